"""(kernel spec, n) -> the launches that scan n elements. Pure Python: no CUDA import.

The strategies (scangen.strategies) write the launches; this module is the entry point and
the readable description (``python -m scangen plan`` prints ``str(plan)``).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

from .arith import ceil_div
from .spec import LAST_COUNTED_MAX_N, make_spec
from .strategies import columns as columns_plan, resolve
from .strategies.base import (MAX_GRID, NULL, USER_ARGS, BufferArg, Launch, PlanBuilder,
                              RuntimeArg, Temporary)

__all__ = ["BufferArg", "Launch", "NULL", "Plan", "RuntimeArg", "Temporary", "USER_ARGS",
           "make_plan"]


class PlanTotals:
    """What a plan's launches and temporaries add up to; a scan's Plan and a primitive's
    ModulePlan (scangen.modules) both have ``launches`` and ``temporaries``."""

    @property
    def temp_bytes(self) -> int:
        return sum(t.nbytes for t in self.temporaries)

    @property
    def bytes_read(self) -> int:
        return sum(launch.bytes_read for launch in self.launches)

    @property
    def bytes_written(self) -> int:
        return sum(launch.bytes_written for launch in self.launches)


@dataclass(frozen=True)
class Plan(PlanTotals):
    #: The scangen.kernel.ScanModule planned for.
    scan_module: object
    n: int
    #: The strategy in effect (what "auto" chose for this n; "one_section" when n fits one).
    strategy: str
    launches: tuple[Launch, ...]
    temporaries: tuple[Temporary, ...]
    #: Tiles of the single-pass launch (0: none): how many tickets a call takes and how much
    #: tile status it needs (along columns: its status entries, one per chunk and column).
    single_pass_tiles: int = 0
    #: The layout of a kernel of lines (make_plan): along columns (axis_length,
    #: axis_stride), over segment tiles the number of segments; None: along the indices.
    layout: tuple[int, int] | int | None = None

    @property
    def spec(self):
        return self.scan_module.scan

    @property
    def part(self):
        """The part of the module this plan launches (scangen.kernel.ModulePart): what a
        call compiles."""
        return self.scan_module.part(launch.kernel for launch in self.launches)

    @property
    def levels(self) -> int:
        return 1 + max((launch.level for launch in self.launches), default=-1)

    def __str__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """A human-readable table of the plan (what ``python -m scangen plan`` prints)."""
        spec = self.spec
        layout = self.layout
        shape = "" if layout is None else \
            f" as {layout} segment(s), each in tiles of its own" if isinstance(layout, int) \
            else f" as rows of {layout[0]}" if layout[1] == 1 else \
            f" as (outer, {layout[0]}, {layout[1]}) along the middle axis"
        lines = [
            f"plan: {self.scan_module.hooks.title} with {spec.operator.name} over "
            f"n={self.n} {spec.etype.name}{shape}",
            f"  strategy {self.strategy}"
            + (" (auto)" if spec.strategy == "auto" and layout is None else "")
            + f", algorithm {spec.algorithm}, section {spec.section_size}"
            f" = {spec.block_size} threads x {spec.items_per_thread} item(s)",
            f"  {len(self.launches)} launch(es), {self.levels} level(s)",
        ]
        for i, launch in enumerate(self.launches):
            lines += launch_lines(i, launch, f"level {launch.level} ")
        lines += temporary_lines(self.temporaries)
        payload = 2 * self.n * spec.etype.itemsize
        lines.append(f"  temporary bytes: {self.temp_bytes}")
        lines.append(f"  bytes read: {self.bytes_read}, written: {self.bytes_written}, "
                     f"total {self.bytes_read + self.bytes_written} "
                     f"({(self.bytes_read + self.bytes_written) / payload:.2f}x the 2n minimum)"
                     if payload else "  nothing to read or write")
        return "\n".join(lines)


def launch_lines(index: int, launch: Launch, where: str = "") -> list[str]:
    """A launch as plans print it: ``[index] {where}kernel<<<grid, block, smem>>>(args)``
    and a line saying why and what it moves."""
    # A scan's launch: the io's argument, then one per parameter of its family.
    family = getattr(launch.kernel, "family", None)
    names = [None] + [p.name for p in family.parameters] if family else []
    names += [None] * (len(launch.args) - len(names))
    args = ", ".join(_format_arg(a, name) for a, name in zip(launch.args, names))
    grid = launch.grid
    if launch.persistent:
        grid = f"min({launch.grid}, resident)"
    elif launch.blocks_per_sm:
        grid = f"min({launch.grid}, {launch.blocks_per_sm} per SM)"
    dynamic = f" ({launch.dynamic_shared_bytes} dynamic)" \
        if launch.dynamic_shared_bytes else ""
    shared = "" if launch.shared_bytes is None else f", {launch.shared_bytes} B smem{dynamic}"
    return [f"  [{index}] {where}{launch.kernel.name}<<<{grid}, {launch.block}{shared}>>>"
            f"({args})",
            f"      {launch.why}; reads {launch.bytes_read} B, "
            f"writes {launch.bytes_written} B"]


def temporary_lines(temporaries) -> list[str]:
    lines = []
    for temp in temporaries:
        kept = ", kept between calls" if temp.persistent else ""
        lines.append(f"  temporary {temp.name}: {temp.nbytes} B ({temp.what}{kept})")
    return lines


def _format_arg(arg, name=None) -> str:
    if isinstance(arg, tuple):  # a module's (parameter name, value)
        name, value = arg
        return f"{name}={format_value(value)}"
    if arg is USER_ARGS:
        return "<arguments>"
    if isinstance(arg, (BufferArg, RuntimeArg)) or arg is NULL:
        return format_value(arg)
    return f"{name or 'n'}={arg}"


def format_value(value) -> str:
    """An argument's value as plans print it: a buffer's name (and offset), NULL, a value
    the call supplies in angle brackets, or the number."""
    if isinstance(value, BufferArg):
        return f"{value.name}+{value.offset}" if value.offset else value.name
    if value is NULL:
        return "NULL"
    if isinstance(value, RuntimeArg):
        return f"<{value.name}>"
    return str(value)


def as_count(n) -> int:
    """n as a non-negative int; numpy integers are accepted, bools and floats are not."""
    if isinstance(n, bool):
        raise ValueError(f"n must be a non-negative int, not {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n must be a non-negative int, not {n!r}") from None
    if n < 0:
        raise ValueError(f"n must be a non-negative int, not {n!r}")
    return n


def _too_many_sections(spec, n: int, sections: int) -> str:
    """Advice that can be followed: a section size that exists for this spec, or pieces."""
    message = (f"n={n} makes {sections} sections of {spec.section_size}, more blocks than one "
               f"launch can have ({MAX_GRID})")
    needed = 1 << (ceil_div(n, MAX_GRID) - 1).bit_length()
    try:
        bigger = make_spec(spec.etype.dtype, spec.operator, algorithm=spec.algorithm,
                           section_size=needed, strategy=spec.strategy, tuning=spec.tuning,
                           segmented=spec.segmented)
    except ValueError:
        return (f"{message}; no section size of {spec.algorithm} is large enough, so scan "
                f"at most {spec.section_size * MAX_GRID} elements per call (in pieces)")
    return (f"{message}: use section_size={bigger.section_size} (or larger), or scan at most "
            f"{spec.section_size * MAX_GRID} elements per call")


def make_plan(scan_module, n, layout=None) -> Plan:
    """The launches that scan n elements with the spec's strategy. A module of lines plans
    its own from ``layout``: along columns (Hooks.columns) ``(axis_length,
    axis_stride)``, over segment tiles (Hooks.segment_tiles) the number of segments."""
    n = as_count(n)
    spec, hooks = scan_module.scan, scan_module.hooks
    lines = hooks.columns or hooks.segment_tiles is not None
    if lines != (layout is not None):
        raise ValueError("a kernel of lines plans with their layout, and only it: "
                         "columns=(axis_length, axis_stride) along columns, the number of "
                         "segments over segment tiles")
    if layout is not None:
        builder = PlanBuilder(scan_module.plan_options)
        strategy = columns_plan.COLUMNS if hooks.columns else columns_plan.SEGMENTS
        name = strategy.name
        if n > 0:
            layout = strategy.check(n, layout)
            strategy.build(builder, n, layout)
            name = strategy.plan_name(layout)
        return Plan(scan_module, n, name, tuple(builder.launches),
                    tuple(builder.temporaries), builder.single_pass_tiles,
                    None if n == 0 else layout)
    sections = ceil_div(n, spec.section_size)
    if sections > MAX_GRID:
        raise ValueError(_too_many_sections(spec, n, sections))
    if scan_module.tracks_last_counted and n > LAST_COUNTED_MAX_N:
        raise ValueError(f"n={n}: a counting scan that reads last_counted takes at most "
                         f"{LAST_COUNTED_MAX_N} indices (2^32 - 1) per call")
    options = scan_module.plan_options
    strategy = resolve(spec.strategy, options.needs_last_item, spec, n)
    builder = PlanBuilder(options)
    if n > 0:
        strategy.build(builder, n, USER_ARGS, 0)
    return Plan(scan_module, n, strategy.name, tuple(builder.launches),
                tuple(builder.temporaries), builder.single_pass_tiles)
