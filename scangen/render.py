"""Kernel spec -> CUDA text. One Jinja2 Environment, StrictUndefined; no CUDA import here."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .args import c_parameters
from .families import SCAN_ROWS, SCAN_SEGMENTS, SCAN_TILES, SCAN_TILES_PERSISTENT
from .strategies.tile_state import TileState

#: The kernels of lines scanned in tiles of their own, which share templates/tile/lines.cuh.j2.
LINE_TILES = (SCAN_ROWS, SCAN_SEGMENTS)

_HERE = Path(__file__).resolve().parent
#: Installed wheels carry the templates inside the package; a source checkout (or an
#: editable install) keeps them at the top level of the repository.
TEMPLATE_DIRS = [p for p in (_HERE / "templates", _HERE.parent / "templates") if p.is_dir()]


class RenderError(RuntimeError):
    """A template failed to render; names the template and the spec it was given."""


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    if not TEMPLATE_DIRS:
        raise RenderError(f"scangen's templates are missing (looked in {_HERE}/templates)")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(p) for p in TEMPLATE_DIRS]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


_USER_BEGIN = re.compile(r"^// user (.+) \{$")
_USER_END = re.compile(r"^// \} user (.+)$")


@dataclass(frozen=True)
class ModuleSource:
    """The CUDA text of one module, its kernels, and where the user's code sits in it."""

    text: str
    kernel_names: tuple[str, ...]

    def numbered(self, around: int | None = None, context: int = 6) -> str:
        """The text with line numbers (all of it, or ``context`` lines either side of
        line ``around``), as shown next to compiler errors."""
        lines = self.text.splitlines()
        width = len(str(len(lines)))
        first, last = 1, len(lines)
        if around is not None:
            first, last = max(1, around - context), min(len(lines), around + context)
        return "\n".join(f"{'>' if i == around else ' '}{i:>{width}} | {lines[i - 1]}"
                         for i in range(first, last + 1))

    @functools.cached_property
    def user_spans(self) -> dict:
        """{piece of user code: (first line, last line)}, 1-based, from the markers the
        templates put around it."""
        spans, open_at = {}, {}
        for number, line in enumerate(self.text.splitlines(), 1):
            begin, end = _USER_BEGIN.match(line), _USER_END.match(line)
            if begin:
                open_at[begin.group(1)] = number + 1
            elif end and end.group(1) in open_at:
                spans[end.group(1)] = (open_at.pop(end.group(1)), number - 1)
        return spans

    def user_piece_at(self, line: int) -> str | None:
        """The user code (input_expr, output_statement, operator, ...) that line is in; the
        innermost piece where a library wraps one piece in another (a primitive's predicate
        inside the preamble)."""
        holding = [(last - first, piece) for piece, (first, last) in self.user_spans.items()
                   if first <= line <= last]
        return min(holding)[1] if holding else None

    def user_piece_before(self, line: int) -> str | None:
        """The user code whose end marker is the line just before ``line``: nvcc reports an
        expression or statement cut short (``x[i] +``, a missing ``;``) at the first token
        after it, which is on the line scangen closes the piece's wrapping with."""
        for piece, (_, last) in self.user_spans.items():
            if last + 2 == line:
                return piece
        return None


def _kernel_context(kernel, hooks, spec) -> dict:
    parameters = kernel.parameters(hooks.arguments)
    io_names = ", ".join(a.name for a in kernel.io_parameters(hooks.arguments))
    io_struct = "UserIO" if kernel.io == "user" else "TotalsIO"
    bounds = "BLOCK_SIZE, TILE_MIN_BLOCKS" if kernel.family.single_pass else "BLOCK_SIZE"
    return dict(name=kernel.name, family=kernel.family.name, bounds=bounds,
                parameters=c_parameters(parameters), io=f"{io_struct}{{{io_names}}}",
                family_arguments=[a.name for a in kernel.family.parameters])


def _element_context(hooks) -> dict | None:
    """The held element's C type and argument (scangen.kernel.HeldElement), or None."""
    counting = hooks.counting
    if counting is None or counting.element is None:
        return None
    argument = next(a for a in hooks.arguments if a.name == counting.element.argument)
    return dict(c_type=argument.c_type, argument=argument.name)


def template_context(scan_module, kernels=None) -> dict:
    """What module.cu.j2 renders ``kernels`` of ``scan_module`` with (default: all of them);
    the layers only those kernels use are left out."""
    spec, hooks = scan_module.scan, scan_module.hooks
    etype = spec.etype
    kernels = scan_module.kernels if kernels is None else kernels
    strategy = scan_module.strategy
    state = TileState.of(spec)
    includes, declarations = scan_module.prerequisites
    counts = scan_module.counts_by_ballots
    # The families with a kernel that counts ballots (the user io of a counting module) and
    # those with one that scans values: a part (ModulePart) renders only the bodies its
    # kernels call, which nvcc would otherwise warn of.
    counting = [k.family.name for k in kernels if counts and k.io == "user"]
    scanning_values = [k.family.name for k in kernels if not (counts and k.io == "user")]
    return dict(
        title=hooks.title,
        dtype=etype.name,
        c_type=etype.c_name,
        type_declarations=declarations,
        includes=list(includes),
        operator_name=spec.operator.name,
        combine_expression=spec.operator.c_expression(etype),
        identity=spec.identity_literal,
        operator_preamble=spec.operator.preamble.strip(),
        preamble=hooks.preamble,
        helpers=hooks.helpers,
        arguments=[a.declaration for a in hooks.arguments],
        input_expr=hooks.input_expr,
        counts=counts,
        counting_families=counting,
        value_families=scanning_values,
        last_counted=scan_module.tracks_last_counted,
        element=_element_context(hooks),
        holds_elements=scan_module.holds_elements,
        segmented=spec.segmented,
        reverse=hooks.reverse,
        initial=hooks.initial,
        is_segment_start_expr=hooks.is_segment_start_expr,
        output_statement=hooks.output_statement,
        line_places=hooks.line_places,
        algorithm=spec.algorithm,
        section_size=spec.section_size,
        block_size=spec.block_size,
        items_per_thread=spec.items_per_thread,
        column_items_per_thread=spec.column_items_per_thread,
        column_tile_rows=spec.column_tile_rows,
        pad_every=spec.pad_every,
        section_slots=spec.section_slots,
        dynamic_shared=spec.dynamic_shared,
        strategy=spec.strategy,
        protocol=strategy.protocol,
        warp_runs=scan_module.moves_warp_runs,
        vector_runs=scan_module.vector_runs,
        vector_input_word=scan_module.vector_input_word if scan_module.vector_runs else None,
        packed_combine=scan_module.packed_combine,
        counted_mask=scan_module.counted_mask,
        run_heads=scan_module.run_heads,
        counted_sections_per_block=scan_module.counted_sections_per_block,
        **state.template_context(),
        backoff_min_ns=spec.tuning.backoff_min_ns,
        backoff_max_ns=spec.tuning.backoff_max_ns,
        first_wait_ns=spec.tuning.lookback_first_wait_ns,
        lookback_tiles_per_lane=spec.tuning.at(spec.acc_itemsize).lookback_tiles_per_lane,
        ios=sorted({k.io for k in kernels}),
        families=list(dict.fromkeys(k.family.name for k in kernels)),
        # the tile status serves every single-pass kernel; the look-back and warp runs
        # the tile kernels and the kernels of lines in tiles, rows and segments (a scan
        # along columns looks back a column at a time)
        single_pass=any(k.family.single_pass for k in kernels),
        tile_min_blocks=spec.tuning.at(spec.acc_itemsize).tile_min_blocks_per_sm(
            spec.block_size),
        tiles=any(k.family in (SCAN_TILES, SCAN_TILES_PERSISTENT) + LINE_TILES
                  for k in kernels),
        line_tiles=any(k.family in LINE_TILES for k in kernels),
        segment_tiles=hooks.segment_tiles,
        kernels=[_kernel_context(k, hooks, spec) for k in kernels],
    )


def render_template(name: str, context: dict, what) -> str:
    """Render one module template; a failure names the template and what it was for."""
    try:
        return environment().get_template(name).render(**context)
    except jinja2.TemplateError as err:
        raise RenderError(f"rendering {name} for {what} failed: {err}\n"
                          f"context: {context}") from err


@functools.lru_cache(maxsize=128)
def render_module(module) -> ModuleSource:
    """The source of a module that is not a scan (histogram, radix passes, run
    lengths): its ``template`` rendered with its ``context()``, its kernels the names of its
    ``entry_points()``. Pure text; cached per (hashable) spec."""
    text = render_template(module.template, module.context(), module.description)
    return ModuleSource(text, tuple(name for name, _ in module.entry_points()))


@functools.lru_cache(maxsize=256)
def render(scan_module, kernels=None) -> ModuleSource:
    """Render the module for ``scan_module``: every kernel, or only ``kernels`` (a tuple of
    some of them: scangen.kernel.ModulePart). Pure text; works with no GPU and no pycuda."""
    context = template_context(scan_module, kernels)
    text = render_template("module.cu.j2", context, scan_module)
    return ModuleSource(text, tuple(k["name"] for k in context["kernels"]))
