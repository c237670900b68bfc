"""What a plan is made of, and the Strategy interface. Pure Python: no CUDA import.

A plan is data: the runtime walks its launches in order, binding buffer names to device
memory. ``python -m scangen plan`` prints the same object, so what you read is what runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..families import Kernel
from .tile_state import TICKET_BYTES, TileState

#: CUDA's limit on gridDim.x.
MAX_GRID = 2**31 - 1


@dataclass(frozen=True)
class BufferArg:
    """A kernel argument that is device memory: a temporary's name (or, in a module's plan,
    an array of the call), ``offset`` bytes into it."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class RuntimeArg:
    """A scalar the runtime supplies per call: "ticket_base" or "epoch" (single pass), or
    in a module's plan a value of the call (a histogram's range)."""

    name: str


@dataclass(frozen=True)
class UserArgs:
    """Where the ScanKernel's own arguments go (all of them, in their order)."""


USER_ARGS = UserArgs()
#: A null pointer argument.
NULL = None


@dataclass(frozen=True)
class Launch:
    #: A scan's Kernel, or a module's entry point (scangen.modules.EntryPoint).
    kernel: Kernel
    grid: int
    block: int
    #: Shared memory of the module's hungriest kernel, static and dynamic together
    #: (ScanSpec.shared_bytes); None where the kernel declares its own (a module's).
    shared_bytes: int | None
    #: A scan's: one entry per parameter of the family, after the io's: USER_ARGS (user io)
    #: or the totals buffer (totals io) first. A module's: (parameter name, value) pairs in
    #: the entry point's order (scangen.modules.named_arguments).
    args: tuple
    bytes_read: int
    bytes_written: int
    level: int
    why: str
    #: A persistent kernel: ``grid`` is the most blocks it needs; the runtime launches as many
    #: as fit on the device at once (scangen.runtime.gpu.resident_grid), and each takes
    #: tiles until none is left.
    persistent: bool = False
    #: Of ``shared_bytes``, what the launch passes as dynamic shared memory (ScanModule.
    #: dynamic_shared_bytes; 0: the kernel declares all of its own).
    dynamic_shared_bytes: int = 0
    #: A grid-stride kernel (0: not one): ``grid`` is the most blocks it needs; the runtime
    #: launches at most this many per multiprocessor of the device
    #: (scangen.runtime.launcher.wave_grid).
    blocks_per_sm: int = 0

    def tickets(self, blocks: int) -> int:
        """Tickets a single-pass launch of ``grid`` tiles takes when run as ``blocks``
        blocks: one per tile, and for a persistent kernel one more per block (the ticket
        that finds no tile left)."""
        return self.grid + (blocks if self.persistent else 0)


@dataclass(frozen=True)
class Temporary:
    """Device scratch. Persistent temporaries (single-pass status, ticket) keep their
    contents from call to call on a stream and start zeroed; the others are free each call."""

    name: str
    nbytes: int
    persistent: bool = False
    what: str = ""


@dataclass(frozen=True)
class PlanOptions:
    """Everything the strategies read while they plan, besides n: the scan spec and the
    module's modes, made in one place (ScanModule.plan_options). A mode that changes plans
    is a field here, which the strategies read as ``builder.options``, set there."""

    #: The scangen.spec.ScanSpec.
    spec: object
    #: The output reads last_item, so the plan computes the grand total before it.
    needs_last_item: bool = False
    #: The module has the persistent single-pass kernel (ScanModule.persistent_tiles).
    persistent_tiles: bool = False
    #: Sections each block of reduce_then_scan's first pass counts over the user's input
    #: (ScanModule.counted_sections_per_block).
    counted_sections_per_block: int = 1
    #: (entry point, bytes) of the kernels that take dynamic shared memory (ScanModule.
    #: dynamic_shared); the others take none.
    dynamic_shared: tuple[tuple[str, int], ...] = ()
    #: A module counting by ballots (ScanModule.counts_by_ballots): its user-io kernels
    #: stage no section, so their shared memory is their own few arrays, not the spec's.
    counts_by_ballots: bool = False

    def shared_bytes(self, kernel: Kernel) -> int | None:
        """The shared memory a plan shows for a launch of ``kernel`` (Launch.shared_bytes):
        the spec's, or None where the kernel declares its own."""
        return None if self.counts_by_ballots and kernel.io == "user" \
            else self.spec.shared_bytes

    def dynamic_shared_bytes(self, kernel: Kernel) -> int:
        """The dynamic shared memory a launch of ``kernel`` passes."""
        return dict(self.dynamic_shared).get(kernel.name, 0)


class PlanBuilder:
    """Collects launches and temporaries while a strategy plans."""

    def __init__(self, options: PlanOptions):
        self.options = options
        self.spec = options.spec
        self.itemsize = options.spec.acc_itemsize
        self.launches: list[Launch] = []
        self.temporaries: list[Temporary] = []
        #: Tiles of the single-pass launch (0: none); how many tickets a call takes.
        self.single_pass_tiles = 0

    def temporary(self, name: str, elements: int, what: str) -> BufferArg:
        self.temporaries.append(Temporary(name, elements * self.itemsize, what=what))
        return BufferArg(name)

    def tile_status(self, entries: int, each: str = "") -> tuple:
        """The single-pass state for ``entries`` status entries (``each``: what one entry
        stands for, as plans print it): the ticket, the status words and, where values do
        not pack into them, the value slots, all kept between calls. Returns the launch's
        arguments for them, the single-pass families' first parameters: (status, status
        values or NULL, ticket, ticket base, epoch)."""
        state = TileState.of(self.spec)
        self.temporaries.append(Temporary("ticket", TICKET_BYTES, persistent=True,
                                          what="atomic tile counter"))
        self.temporaries.append(Temporary("status", entries * state.word_bytes,
                                          persistent=True,
                                          what=state.describe(entries) + each))
        values = NULL
        if not state.packed:
            values = BufferArg("status_values")
            self.temporaries.append(Temporary("status_values", state.value_bytes(entries),
                                              persistent=True, what="tile value slots"))
        self.single_pass_tiles = entries
        return (BufferArg("status"), values, BufferArg("ticket"), RuntimeArg("ticket_base"),
                RuntimeArg("epoch"))

    def launch(self, kernel: Kernel, grid: int, io_arg, args: tuple, *, reads: int,
               writes: int, level: int, why: str, persistent: bool = False) -> None:
        """Append a launch of ``kernel`` with the spec's block size; reads and writes count
        elements of the scan type (extra bytes, such as tile status, go through extra)."""
        if grid > MAX_GRID:
            raise ValueError(f"{kernel.name} needs {grid} blocks, more than one launch can "
                             f"have ({MAX_GRID})")
        self.launches.append(Launch(kernel, grid, self.spec.block_size,
                                    self.options.shared_bytes(kernel),
                                    (io_arg,) + tuple(args), reads * self.itemsize,
                                    writes * self.itemsize, level, why, persistent,
                                    self.options.dynamic_shared_bytes(kernel)))


class Strategy:
    """How sections are stitched into a whole-array scan.

    A strategy owns its kernels (what the module must define for it) and its plan (the
    launches and temporaries for n elements). ``io_arg`` is USER_ARGS at the top level and
    the totals buffer one level down.
    """

    name: str = ""
    summary: str = ""
    #: Whether the plan knows the total before the output pass (output may use last_item).
    provides_last_item: bool = True
    #: How the single-pass tile kernel obtains its prefix ("chained" or
    #: "decoupled_lookback"); None for strategies without one.
    protocol: str | None = None

    def kernels(self) -> tuple[Kernel, ...]:
        raise NotImplementedError

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        raise NotImplementedError


#: Every strategy a spec may name besides "auto", by name: each strategy's module registers
#: its object (:func:`register`), and scangen.strategies imports every module of the
#: package, so a new strategy is its own file.
REGISTERED: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Make ``strategy`` one a spec may name (``strategy=strategy.name``); returns it."""
    if not strategy.name or strategy.name in REGISTERED or strategy.name == "auto":
        raise ValueError(f"strategy name {strategy.name!r} is empty, taken or reserved")
    REGISTERED[strategy.name] = strategy
    return strategy


def io_of(io_arg) -> str:
    """The io of a level: the user's hooks at the top, a totals buffer below."""
    return "user" if io_arg is USER_ARGS else "totals"
