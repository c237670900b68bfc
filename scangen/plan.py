"""(spec, n) -> the launches that scan n elements. Pure Python: no CUDA import.

A plan is data: the runtime (scan.py) walks its launches in order, binding buffer names to
device arrays. ``python -m scangen plan`` prints the same object, so what you read is what runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import tuning
from .render import add_block_size
from .spec import ScanSpec


@dataclass(frozen=True)
class BufferArg:
    """A kernel argument that is a device buffer: "input", "output" or a temporary's name."""

    name: str


#: CUDA's limit on gridDim.x.
MAX_GRID = 2**31 - 1

#: A null pointer argument (no section totals to write).
NULL = None


@dataclass(frozen=True)
class RuntimeArg:
    """A scalar the runtime supplies per call: "ticket_base" or "epoch" (single-pass)."""

    name: str


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
    """Device scratch. Persistent temporaries (single-pass status, ticket) keep their
    contents from call to call on a stream and start zeroed; the others are free each call."""

    name: str
    nbytes: int
    persistent: bool = False
    what: str = ""


@dataclass(frozen=True)
class Plan:
    spec: ScanSpec
    n: int
    #: The strategy in effect (what "auto" chose for this n).
    strategy: str
    launches: tuple[Launch, ...]
    temporaries: tuple[Temporary, ...]

    @property
    def temp_bytes(self) -> int:
        return sum(t.nbytes for t in self.temporaries)

    @property
    def bytes_read(self) -> int:
        return sum(launch.bytes_read for launch in self.launches)

    @property
    def bytes_written(self) -> int:
        return sum(launch.bytes_written for launch in self.launches)

    @property
    def single_pass_tiles(self) -> int:
        """Tiles of the single-pass kernel (0 when the plan has none): how many tickets a
        call takes and how much tile status it needs."""
        return sum(launch.grid for launch in self.launches
                   if launch.kernel.startswith("scan_tiles"))

    @property
    def levels(self) -> int:
        return 1 + max((launch.level for launch in self.launches), default=-1)

    def describe(self) -> str:
        """A human-readable table of the plan (what ``python -m scangen plan`` prints)."""
        spec = self.spec
        lines = [
            f"plan: {spec.mode} {spec.operator.name} scan of n={self.n} {spec.etype.name}",
            f"  strategy {self.strategy}"
            + (f" (auto)" if spec.strategy == "auto" else "")
            + f", algorithm {spec.algorithm}, section {spec.section_size}"
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
            kept = ", kept between calls" if temp.persistent else ""
            lines.append(f"  temporary {temp.name}: {temp.nbytes} B ({temp.what}{kept})")
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
    if isinstance(arg, RuntimeArg):
        return f"<{arg.name}>"
    return f"n={arg}"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def resolve_strategy(spec: ScanSpec, n: int) -> str:
    """The strategy used for n elements. Any n that fits one section takes a single launch,
    whatever the strategy; above that "auto" means decoupled look-back (one launch, ~2n
    traffic) for small inputs and reduce_then_scan (three launches, ~3n traffic, but faster
    on large inputs as measured: see scangen.tuning) from AUTO_REDUCE_THEN_SCAN_MIN_BYTES."""
    if n <= spec.section_size:
        return "one_section"
    if spec.strategy != "auto":
        return spec.strategy
    if n * spec.etype.itemsize >= tuning.AUTO_REDUCE_THEN_SCAN_MIN_BYTES:
        return "reduce_then_scan"
    return "decoupled_lookback"


def make_plan(spec: ScanSpec, n: int) -> Plan:
    """The launches that scan n elements with spec's strategy."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative int, not {n!r}")
    sections = _ceil_div(n, spec.section_size)
    if sections > MAX_GRID:
        raise ValueError(
            f"n={n} makes {sections} sections of {spec.section_size}, more blocks than one "
            f"launch can have ({MAX_GRID}): use section_size >= "
            f"{1 << (_ceil_div(n, MAX_GRID) - 1).bit_length()}")
    builder = _PlanBuilder(spec)
    strategy = resolve_strategy(spec, n)
    if n > 0:
        getattr(builder, strategy)(n)
    return Plan(spec, n, strategy, tuple(builder.launches), tuple(builder.temporaries))


class _PlanBuilder:
    """Appends launches and temporaries; one method per strategy."""

    def __init__(self, spec: ScanSpec):
        self.spec = spec
        self.size = spec.etype.itemsize
        self.launches: list[Launch] = []
        self.temporaries: list[Temporary] = []

    def section_launch(self, kernel, grid, args, bytes_read, bytes_written, level, why):
        self.launches.append(Launch(kernel, grid, self.spec.block_size, self.spec.shared_bytes,
                                    args, bytes_read, bytes_written, level, why))

    def totals(self, level: int, sections: int) -> str:
        name = f"totals{level}"
        self.temporaries.append(Temporary(name, sections * self.size,
                                          what=f"{sections} section totals"))
        return name

    def one_section(self, n: int) -> None:
        self.section_launch(f"scan_sections_{self.spec.mode}", 1,
                            (BufferArg("input"), BufferArg("output"), NULL, n),
                            n * self.size, n * self.size, 0,
                            f"one section: the whole {self.spec.mode} scan in one launch")

    def hierarchical(self, n: int) -> None:
        self.scan_level("input", "output", n, self.spec.mode, 0)

    def scan_level(self, src: str, dst: str, count: int, mode: str, level: int) -> None:
        """Scan sections, scan their totals (recursively, exclusive, in place), add back."""
        section, size = self.spec.section_size, self.size
        sections = _ceil_div(count, section)
        kernel = f"scan_sections_{mode}"
        if sections == 1:
            self.section_launch(kernel, 1, (BufferArg(src), BufferArg(dst), NULL, count),
                                count * size, count * size, level,
                                f"one section: {mode} scan of {count} elements")
            return
        totals = self.totals(level, sections)
        self.section_launch(kernel, sections,
                            (BufferArg(src), BufferArg(dst), BufferArg(totals), count),
                            count * size, (count + sections) * size, level,
                            f"{mode} scan of {sections} sections, totals to {totals}")
        # The totals are scanned exclusively in place: entry s becomes "everything before s".
        self.scan_level(totals, totals, sections, "exclusive", level + 1)
        rest = count - section
        self.launches.append(Launch(
            "add_prefixes", sections - 1, add_block_size(self.spec), 0,
            (BufferArg(dst), BufferArg(totals), count),
            (rest + sections - 1) * size, rest * size, level,
            f"combine sections 1..{sections - 1} with the scanned {totals}"))

    def reduce_then_scan(self, n: int) -> None:
        """Reduce each section, scan the totals, scan each section seeded with its prefix."""
        size = self.size
        sections = _ceil_div(n, self.spec.section_size)
        totals = self.totals(0, sections)
        self.section_launch("reduce_sections", sections,
                            (BufferArg("input"), BufferArg(totals), n),
                            n * size, sections * size, 0,
                            f"reduce {sections} sections to {totals}")
        self.scan_level(totals, totals, sections, "exclusive", 1)
        self.section_launch(f"scan_sections_seeded_{self.spec.mode}", sections,
                            (BufferArg("input"), BufferArg("output"), BufferArg(totals), n),
                            (n + sections) * size, n * size, 0,
                            f"{self.spec.mode} scan of each section seeded with its prefix")

    def single_pass(self, n: int, strategy: str, how: str) -> None:
        size = self.size
        tiles = _ceil_div(n, self.spec.section_size)
        if self.spec.etype.itemsize <= 4:
            status_values = NULL
            self.temporaries.append(Temporary(
                "status", 8 * tiles, persistent=True,
                what=f"{tiles} packed 64-bit words: epoch, flag and value"))
            status_bytes = 8 * tiles
        else:
            status_values = BufferArg("status_values")
            self.temporaries.append(Temporary("status", 4 * tiles, persistent=True,
                                              what=f"{tiles} epoch-tagged flags"))
            self.temporaries.append(Temporary(
                "status_values", 2 * tiles * size, persistent=True,
                what=f"aggregate and inclusive prefix of {tiles} tiles"))
            status_bytes = 4 * tiles + 2 * tiles * size
        self.temporaries.append(Temporary("ticket", 8, persistent=True,
                                          what="atomic tile counter"))
        self.section_launch(
            f"scan_tiles_{self.spec.mode}", tiles,
            (BufferArg("input"), BufferArg("output"), BufferArg("status"), status_values,
             BufferArg("ticket"), RuntimeArg("ticket_base"), RuntimeArg("epoch"), n),
            n * size, n * size + status_bytes, 0,
            f"{strategy}: {tiles} tiles in one pass, {how}")

    def chained(self, n: int) -> None:
        self.single_pass(n, "chained", "each waits for its predecessor's inclusive prefix")

    def decoupled_lookback(self, n: int) -> None:
        self.single_pass(n, "decoupled look-back",
                         "each looks back over up to 32 predecessors' status at a time")
