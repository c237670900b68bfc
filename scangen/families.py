"""The kernels a module can hold: one table, read by the strategies (which launch them), the
renderer (which emits their entry points) and the compiler (which prepares their calls).

Each kernel is a *family* (what it does: scan one section, reduce sections, ...) applied to
an *io* (where its values come from and where results go):

* ``user``: the ScanKernel's hooks: its arguments, ``input_expr`` and ``output_statement``;
* ``totals``: scangen's own section totals, scanned exclusively in place (the inner levels
  of hierarchical and reduce_then_scan).

The entry point ``<family>_<io>`` takes the io's parameters, then the family's.
"""
from __future__ import annotations

from dataclasses import dataclass

from .args import Argument

N = Argument("n", "long long")

IOS = ("user", "totals")
#: The totals io: one array of acc_t (what the machinery combines: scan_t, or a segmented
#: pair), read at i and overwritten with the exclusive prefix.
TOTALS_PARAMETERS = (Argument("values", "acc_t", pointer=True),)


@dataclass(frozen=True)
class KernelFamily:
    """What a kernel does; its template macro in templates/kernels/ has the same name."""

    name: str
    parameters: tuple[Argument, ...]
    summary: str
    #: The single-pass kernel is launched with a register bound and reads tile status.
    single_pass: bool = False
    #: Sections the kernel holds in shared memory (with the block scan's scratch): what it
    #: keeps in dynamic shared memory where they do not fit static (ScanSpec.dynamic_shared).
    sections: int = 1


ONE_SECTION = KernelFamily(
    "scan_one_section", (N,), "the whole scan in one block (n fits one section)")
SCAN_SECTIONS = KernelFamily(
    "scan_sections",
    (Argument("partial", "acc_t", pointer=True), Argument("totals", "acc_t", pointer=True), N),
    "hierarchical pass 1: scan each section into partial, its total into totals")
ADD_PREFIXES = KernelFamily(
    "add_prefixes",
    (Argument("partial", "acc_t", pointer=True, const=True),
     Argument("prefixes", "acc_t", pointer=True, const=True), N),
    "hierarchical pass 2: combine each section with its prefix and emit the results",
    sections=0)
REDUCE_SECTIONS = KernelFamily(
    "reduce_sections", (Argument("totals", "acc_t", pointer=True), N),
    "reduce_then_scan pass 1: each section's total into totals")
SCAN_SEEDED = KernelFamily(
    "scan_seeded", (Argument("prefixes", "acc_t", pointer=True, const=True), N),
    "reduce_then_scan pass 2: scan each section seeded with its prefix and emit the results")
SCAN_TILES = KernelFamily(
    "scan_tiles",
    (Argument("status", "void", pointer=True), Argument("status_values", "void", pointer=True),
     Argument("ticket", "unsigned long long", pointer=True),
     Argument("ticket_base", "unsigned long long"), Argument("epoch", "unsigned int"), N),
    "single pass: tiles in ticket order, each prefix from the tile status", single_pass=True)
SCAN_TILES_PERSISTENT = KernelFamily(
    "scan_tiles_persistent", SCAN_TILES.parameters,
    "single pass by persistent blocks: each takes tiles until none is left, holding two",
    single_pass=True, sections=2)
SCAN_COLUMNS = KernelFamily(
    "scan_columns",
    SCAN_TILES.parameters[:-1] + (Argument("axis_length", "long long"),
                                  Argument("axis_stride", "long long"), N),
    "the n indices as an (outer, axis_length, axis_stride) array scanned along its middle "
    "axis, each column on its own: tiles of a warp's width of columns in ticket order, each "
    "column's carry from the tile status", single_pass=True, sections=0)
SCAN_ROWS = KernelFamily(
    "scan_rows",
    SCAN_COLUMNS.parameters[:-2] + (N,),
    "the n indices as rows of axis_length, each scanned on its own: each row's tiles in "
    "ticket order, each looking back to its row's first tile", single_pass=True)
SCAN_SEGMENTS = KernelFamily(
    "scan_segments", SCAN_TILES.parameters,
    "the n indices as segments of any lengths (the hooks' SegmentTiles: each segment's start "
    "and first tile), each scanned on its own in tiles of its own: tiles in ticket order, "
    "each looking back to its segment's first tile", single_pass=True)

FAMILIES = (ONE_SECTION, SCAN_SECTIONS, ADD_PREFIXES, REDUCE_SECTIONS, SCAN_SEEDED, SCAN_TILES,
            SCAN_TILES_PERSISTENT, SCAN_COLUMNS, SCAN_ROWS, SCAN_SEGMENTS)


@dataclass(frozen=True)
class Kernel:
    """One ``__global__`` entry point of a module."""

    family: KernelFamily
    io: str

    def __post_init__(self):
        if self.io not in IOS:
            raise ValueError(f"unknown io {self.io!r}")

    @property
    def name(self) -> str:
        return f"{self.family.name}_{self.io}"

    def io_parameters(self, user_arguments: tuple[Argument, ...]) -> tuple[Argument, ...]:
        return tuple(user_arguments) if self.io == "user" else TOTALS_PARAMETERS

    def parameters(self, user_arguments: tuple[Argument, ...]) -> tuple[Argument, ...]:
        """Every parameter of the entry point, in order."""
        return self.io_parameters(user_arguments) + self.family.parameters
