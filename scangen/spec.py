"""A frozen, validated description of how to scan: the value type, the operator, how a block
scans its section (algorithm, section, items per thread), how sections are stitched
together (strategy) and the tuning. What is scanned and where results go (the hooks) live
in scangen.kernel; the two together are everything that changes the emitted CUDA.

Validation happens here, at construction, so that a bad request fails with a message that
says what to change, never later inside the compiler or the GPU.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, replace

import numpy as np

from .arith import WARP_SIZE
from . import tuning as tuning_table
from .ops import Operator, resolve_operator
# How sections are stitched into a whole-array scan: the names scangen.strategies defines
# ("auto" resolves per n in scangen.strategies.auto).
from .strategies import NAMES as STRATEGIES
from .types import ElementType

MODES = ("inclusive", "exclusive")


def check_mode(mode):
    """``mode`` if it is one of MODES; else the one ValueError every entry point raises."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use {MODES[0]!r} or {MODES[1]!r}")
    return mode


MAX_BLOCK_THREADS = 1024
#: Shared memory per block without an opt-in attribute: all a kernel may declare statically.
#: Past it, a spec's sections live in dynamic shared memory (ScanSpec.dynamic_shared).
MAX_STATIC_SHARED_BYTES = 48 * 1024

#: The most indices a counting scan that reads last_counted takes (scangen.ScanKernel): it
#: packs the count and the last counted index + 1 in 32 bits each, one 8-byte value.
LAST_COUNTED_MAX_N = 2 ** 32 - 1


@dataclass(frozen=True)
class Algorithm:
    """How one block scans its section: the facts the planner and validator need."""

    name: str
    summary: str
    #: Items per thread when the user names none; None: fixed by the algorithm.
    default_items_per_thread: int
    coarsening_is_parameter: bool = False
    #: Each thread reads a run of consecutive elements from shared memory; the section is
    #: stored with one padding slot per 128 bytes so those runs do not hit one bank.
    padded: bool = False
    #: Extra shared memory beyond the section itself, in elements, as f(section, block).
    scratch_elements: callable = field(default=lambda section, block: 0)

    def block_size(self, section_size: int, items_per_thread: int) -> int:
        return section_size // items_per_thread


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("naive", "each thread combines its whole prefix: O(n^2) work", 1),
        Algorithm("kogge_stone", "log n steps, two barriers per step: O(n log n) work", 1),
        Algorithm("kogge_stone_double_buffered",
                  "log n steps, one barrier per step (two shared buffers)", 1,
                  scratch_elements=lambda section, block: section),
        Algorithm("brent_kung", "reduction tree then distribution tree: O(n) work, 2 log n steps",
                  2),
        Algorithm("coarsened",
                  "three phases: sequential per-thread scan, block scan of thread totals, add-back",
                  4, coarsening_is_parameter=True, padded=True,
                  scratch_elements=lambda section, block: 2 * block),
        Algorithm("warp_shuffle",
                  "per-thread runs in registers, warp scans with __shfl_up_sync, a scan of "
                  "warp totals: the fast path", 1, coarsening_is_parameter=True, padded=True,
                  scratch_elements=lambda section, block: WARP_SIZE + 1),
    )
}


def acc_itemsize(etype, segmented: bool) -> int:
    """Size of {value; unsigned char head} for a segmented scan, else of the value."""
    size, alignment = etype.itemsize, etype.alignment
    return -(-(size + 1) // alignment) * alignment if segmented else size


def as_int(name: str, value) -> int:
    """Accept Python and numpy integers (not bools, not floats)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {value!r}") from None


def as_flag(name: str, value) -> bool:
    """Accept True or False (numpy's too), nothing else: a string such as "no" is true to
    Python, and would quietly turn the option on."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class ScanSpec:
    """Everything that determines the generated kernels. Hashable: it keys the caches."""

    etype: ElementType
    operator: Operator
    algorithm: str
    section_size: int
    items_per_thread: int
    strategy: str
    tuning: tuning_table.Tuning = tuning_table.DEFAULT_TUNING
    #: A segmented scan combines (value, head flag) pairs instead of values.
    segmented: bool = False

    @property
    def acc_itemsize(self) -> int:
        """Bytes of what the scan machinery combines (shared memory, shuffles, tile status):
        the value, or for a segmented scan the struct {value; unsigned char head}, padded
        to the value's alignment."""
        return acc_itemsize(self.etype, self.segmented)

    @property
    def block_size(self) -> int:
        return ALGORITHMS[self.algorithm].block_size(self.section_size, self.items_per_thread)

    @property
    def column_items_per_thread(self) -> int:
        """Each thread's rows of a tile of the scan along columns: items_per_thread, at most
        Tuning.columns_max_items_per_thread."""
        limit = self.tuning.at(self.acc_itemsize).columns_max_items_per_thread
        return self.items_per_thread if limit is None else min(self.items_per_thread, limit)

    @property
    def column_tile_rows(self) -> int:
        """The rows of a tile of the scan along columns: each warp of a block takes
        column_items_per_thread consecutive rows of a warp's width of columns."""
        return self.block_size // WARP_SIZE * self.column_items_per_thread

    @property
    def uses_warp_runs(self) -> bool:
        """Whether the single-pass tile kernel moves data warp by warp (Tuning.tile_warp_runs,
        which applies to the warp_shuffle algorithm in blocks of whole warps)."""
        return (self.tuning.tile_warp_runs and self.algorithm == "warp_shuffle"
                and self.block_size % WARP_SIZE == 0)

    @property
    def has_persistent_tiles(self) -> bool:
        """Whether the single pass has a persistent kernel, which holds two sections in
        shared memory (Tuning.tile_persistent_min_bytes, on warp runs). By default only
        where two sections fit; a named tuning insists (and make_spec names the limit)."""
        if not self.uses_warp_runs or \
                self.tuning.at(self.acc_itemsize).tile_persistent_min_bytes is None:
            return False
        return self.tuning.tile_persistent_min_bytes is not None or \
            self._shared_bytes(sections=2) <= MAX_STATIC_SHARED_BYTES

    @property
    def pad_every(self) -> int:
        """Elements between padding slots of the section in shared memory (0: no padding)."""
        return 128 // self.acc_itemsize if ALGORITHMS[self.algorithm].padded else 0

    @property
    def section_slots(self) -> int:
        """Shared-memory slots the section occupies, padding included, rounded up to whole
        16-byte words: what follows a section (a persistent kernel's second section, an
        algorithm's scratch) starts on a word, which 16-byte accesses (vector runs) need."""
        pad = self.section_size // self.pad_every if self.pad_every else 0
        per_word = 16 // math.gcd(self.acc_itemsize, 16)
        return -(-(self.section_size + pad) // per_word) * per_word

    @property
    def shared_bytes(self) -> int:
        """Shared memory of the hungriest kernel, static and dynamic together: the section,
        the algorithm's scratch, and the kernels' own bookkeeping (the tile number and
        prefix of the single-pass kernel, or the warp partials and total of the reduction)."""
        return self._shared_bytes(sections=2 if self.has_persistent_tiles else 1)

    def _shared_bytes(self, sections: int) -> int:
        return self.section_shared_bytes(sections) + self.bookkeeping_bytes

    @property
    def bookkeeping_bytes(self) -> int:
        """The kernels' static shared memory besides the sections and scratch: a tile
        number and 33 values (warp totals and a prefix, or warp partials and a total), in
        the 16-byte units ptxas reports (4-byte values: 140 bytes, reported as 144)."""
        return -(-(8 + (WARP_SIZE + 1) * self.acc_itemsize) // 16) * 16

    def section_shared_bytes(self, sections: int) -> int:
        """Bytes of ``sections`` sections (padding included) and the algorithm's scratch:
        what a kernel holding them keeps in dynamic shared memory (dynamic_shared)."""
        scratch = ALGORITHMS[self.algorithm].scratch_elements(self.section_size, self.block_size)
        return (sections * self.section_slots + scratch) * self.acc_itemsize

    @property
    def dynamic_shared(self) -> bool:
        """Whether the sections and the algorithm's scratch live in dynamic shared memory:
        where the kernels need more than the 48 KiB of static shared memory a block has
        (they then opt in to more, up to the device's limit; scangen.tuning.
        MAX_SHARED_BYTES_OPTIN). The bookkeeping stays static."""
        return self.shared_bytes > MAX_STATIC_SHARED_BYTES

    @property
    def identity_literal(self) -> str:
        return self.operator.identity_literal(self.etype)


def make_spec(dtype, operator="add", *, algorithm=None, section_size=None,
              items_per_thread=None, strategy="auto", tuning=None,
              segmented=False, counts=False) -> ScanSpec:
    """Validate user choices and freeze them into a ScanSpec.

    Unnamed choices take defaults from scangen.tuning: the warp_shuffle algorithm with the
    section size and items per thread tuned for the element size (``counts``: a counting
    scan's, scangen.tuning.COUNTING); other algorithms a 1024-element section. Naming only
    the section of a coarsening algorithm (warp_shuffle, coarsened) keeps the tuned block
    size and derives the items per thread; strategy "auto"; ``tuning`` (a scangen.Tuning)
    the measured defaults. A default always fits the static shared memory of a block: where
    the tuned one does not (wide values, segmented pairs, an algorithm with scratch), the
    items per thread and then the section the user left unnamed are halved until it does.
    """
    op = resolve_operator(operator)
    etype = op.check_dtype(dtype)
    if algorithm is None:
        algorithm = tuning_table.DEFAULT_ALGORITHM
    named_section, named_items = section_size is not None, items_per_thread is not None
    if algorithm == "warp_shuffle" and not named_section and not named_items:
        tile = tuning_table.COUNTING.tile() if counts else \
            tuning_table.scan_table().tile(acc_itemsize(etype, segmented))
        section_size, items_per_thread = tile.section_size, tile.items_per_thread
    if section_size is None:
        section_size = tuning_table.DEFAULT_SECTION_SIZE

    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    algo = ALGORITHMS[algorithm]

    if items_per_thread is None and algo.coarsening_is_parameter and named_section:
        # A named section keeps the tuned block size; the items per thread follow from it.
        section = as_int("section_size", section_size)
        block = tuning_table.scan_table().value("block_size", acc_itemsize(etype, segmented))
        items_per_thread = max(1, section // block) if _is_power_of_two(section) else 1
    if items_per_thread is None:
        items_per_thread = algo.default_items_per_thread
    else:
        items_per_thread = as_int("items_per_thread", items_per_thread)
    if items_per_thread != algo.default_items_per_thread and not algo.coarsening_is_parameter:
        takers = " and ".join(repr(a.name) for a in ALGORITHMS.values()
                              if a.coarsening_is_parameter)
        raise ValueError(
            f"{algorithm} scans {algo.default_items_per_thread} item(s) per thread; "
            f"items_per_thread is a parameter of {takers} only"
        )
    if not _is_power_of_two(items_per_thread):
        raise ValueError(f"items_per_thread must be a power of two, not {items_per_thread}")

    section_size = as_int("section_size", section_size)
    if not _is_power_of_two(section_size) or section_size < 2:
        raise ValueError(f"section_size must be a power of two of at least 2, not {section_size}")
    if section_size < items_per_thread:
        raise ValueError(
            f"section_size {section_size} is smaller than items_per_thread {items_per_thread}"
        )
    block = algo.block_size(section_size, items_per_thread)
    if block > MAX_BLOCK_THREADS:
        largest = MAX_BLOCK_THREADS * items_per_thread
        raise ValueError(
            f"section_size {section_size} needs {block} threads per block with {algorithm} "
            f"({items_per_thread} item(s) per thread); the limit is {MAX_BLOCK_THREADS}: "
            f"use section_size <= {largest}"
            + (" or more items_per_thread" if algo.coarsening_is_parameter else "")
        )

    if tuning is None:
        tuning = tuning_table.DEFAULT_TUNING
    if not isinstance(tuning, tuning_table.Tuning):
        raise TypeError(f"tuning must be a scangen.Tuning, not {type(tuning).__name__}")
    spec = ScanSpec(etype, op, algorithm, section_size, items_per_thread, strategy, tuning,
                    bool(segmented))
    while spec.shared_bytes > MAX_STATIC_SHARED_BYTES:
        smaller = _halved_default(spec, named_section, named_items)
        if smaller is None:
            break
        spec = smaller
    limit = tuning_table.max_shared_bytes()
    if spec.shared_bytes > limit:
        raise ValueError(shared_memory_refusal(spec, limit, tuning_table.DEFAULT_ARCH))
    return spec


def shared_memory_refusal(spec: ScanSpec, limit: int, device: str) -> str:
    """Why ``spec`` needs more shared memory than a block of ``device`` may have (``limit``
    bytes, with the opt-in attribute), and what to do."""
    return (f"section_size {spec.section_size} of {spec.etype.name} with {spec.algorithm} "
            f"needs {spec.shared_bytes} bytes of shared memory"
            + (" (persistent tiles hold two sections)" if spec.has_persistent_tiles else "")
            + f"; the limit of a block on {device} is {limit}: use a smaller section_size")


def _halved_default(spec: ScanSpec, named_section: bool, named_items: bool) -> ScanSpec | None:
    """``spec`` with half the section, halving only what the user left unnamed: the items
    per thread of a coarsening algorithm (the tuned block size stays), else the threads.
    None where nothing unnamed can shrink."""
    algo = ALGORITHMS[spec.algorithm]
    if not named_section and not named_items and algo.coarsening_is_parameter \
            and spec.items_per_thread > 1:
        return replace(spec, section_size=spec.section_size // 2,
                       items_per_thread=spec.items_per_thread // 2)
    if not named_section and spec.section_size // 2 >= max(2, spec.items_per_thread):
        return replace(spec, section_size=spec.section_size // 2)
    return None
