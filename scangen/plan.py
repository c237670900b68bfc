"""(spec, n) -> the launches that scan n elements. Pure Python: no CUDA import.

A plan is data: the runtime (scan.py) walks its launches in order, binding buffer names to
device arrays. ``python -m scangen plan`` prints the same object, so what you read is what runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from .render import add_block_size
from .spec import ScanSpec


@dataclass(frozen=True)
class BufferArg:
    """A kernel argument that is a device buffer: "input", "output" or a temporary's name."""

    name: str


#: A null pointer argument (no section totals to write).
NULL = None


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: int
    block: int
    shared_bytes: int
    args: tuple
    bytes_read: int
    bytes_written: int
    level: int
    why: str


@dataclass(frozen=True)
class Temporary:
    name: str
    elements: int


@dataclass(frozen=True)
class Plan:
    spec: ScanSpec
    n: int
    launches: tuple[Launch, ...]
    temporaries: tuple[Temporary, ...]

    @property
    def temp_bytes(self) -> int:
        return sum(t.elements for t in self.temporaries) * self.spec.etype.itemsize

    @property
    def bytes_read(self) -> int:
        return sum(launch.bytes_read for launch in self.launches)

    @property
    def bytes_written(self) -> int:
        return sum(launch.bytes_written for launch in self.launches)

    @property
    def levels(self) -> int:
        return 1 + max((launch.level for launch in self.launches), default=-1)

    def describe(self) -> str:
        """A human-readable table of the plan (what ``python -m scangen plan`` prints)."""
        spec = self.spec
        lines = [
            f"plan: {spec.mode} {spec.operator.name} scan of n={self.n} {spec.etype.name}",
            f"  strategy {spec.strategy}, algorithm {spec.algorithm}, section {spec.section_size}"
            f" = {spec.block_size} threads x {spec.items_per_thread} item(s)",
            f"  {len(self.launches)} launch(es), {self.levels} level(s)",
        ]
        for i, launch in enumerate(self.launches):
            args = ", ".join(_format_arg(a) for a in launch.args)
            lines.append(
                f"  [{i}] level {launch.level} {launch.kernel}<<<{launch.grid}, {launch.block}, "
                f"{launch.shared_bytes} B smem>>>({args})"
            )
            lines.append(f"      {launch.why}; reads {launch.bytes_read} B, "
                         f"writes {launch.bytes_written} B")
        for temp in self.temporaries:
            lines.append(f"  temporary {temp.name}: {temp.elements} x {spec.etype.name}")
        payload = 2 * self.n * spec.etype.itemsize
        lines.append(f"  temporary bytes: {self.temp_bytes}")
        lines.append(f"  bytes read: {self.bytes_read}, written: {self.bytes_written}, "
                     f"total {self.bytes_read + self.bytes_written} "
                     f"({(self.bytes_read + self.bytes_written) / payload:.2f}x the 2n minimum)"
                     if payload else "  nothing to read or write")
        return "\n".join(lines)


def _format_arg(arg) -> str:
    if isinstance(arg, BufferArg):
        return arg.name
    if arg is NULL:
        return "NULL"
    return f"n={arg}"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_plan(spec: ScanSpec, n: int) -> Plan:
    """The hierarchical plan: scan sections, scan their totals (recursively), add back."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, not {n!r}")
    section = spec.section_size
    size = spec.etype.itemsize
    launches: list[Launch] = []
    temporaries: list[Temporary] = []

    def scan_level(src: str, dst: str, count: int, mode: str, level: int) -> None:
        sections = _ceil_div(count, section)
        kernel = f"scan_sections_{mode}"
        if sections == 1:
            launches.append(Launch(
                kernel, 1, spec.block_size, spec.shared_bytes,
                (BufferArg(src), BufferArg(dst), NULL, count),
                count * size, count * size, level,
                f"one section: {mode} scan of {count} elements"))
            return
        totals = f"totals{level}"
        temporaries.append(Temporary(totals, sections))
        launches.append(Launch(
            kernel, sections, spec.block_size, spec.shared_bytes,
            (BufferArg(src), BufferArg(dst), BufferArg(totals), count),
            count * size, (count + sections) * size, level,
            f"{mode} scan of {sections} sections, totals to {totals}"))
        # The totals are scanned exclusively in place: entry s becomes "everything before s".
        scan_level(totals, totals, sections, "exclusive", level + 1)
        rest = count - section
        launches.append(Launch(
            "add_prefixes", sections - 1, add_block_size(spec), 0,
            (BufferArg(dst), BufferArg(totals), count),
            (rest + sections - 1) * size, rest * size, level,
            f"combine sections 1..{sections - 1} with the scanned {totals}"))

    if n > 0:
        scan_level("input", "output", n, spec.mode, 0)
    return Plan(spec, n, tuple(launches), tuple(temporaries))
