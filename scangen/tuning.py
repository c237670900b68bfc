"""Tuning values, one table per family of kernels, apart from the code that uses them (as CUB
keeps its policies).

Each table is plain data (``Table.as_data`` and ``Table.with_data`` take it to and from
JSON): values by element size in bytes where they were measured, and a fallback for every
other size. One rule reads them (``Table.value``): the value the user named, else the one
measured for this size, else the fallback. The values were measured on an H100 and an H200
(sm_90); docs/design/tuning.md says, per knob, what was compared, the result that chose the
value and the benchmark that measures it. A :class:`Tuning` is part of every ScanSpec (and
so of the compile cache key): a sweep builds specs with other values instead of changing
this module.
"""
from __future__ import annotations

import json
import numbers
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .cache import cache_dir, write_atomically
from .devices import visible_device_name


@dataclass(frozen=True)
class TileShape:
    """A tile: threads per block, and items each thread scans sequentially in registers."""

    block_size: int
    items_per_thread: int

    @property
    def section_size(self) -> int:
        return self.block_size * self.items_per_thread


@dataclass(frozen=True)
class Table:
    """One family's tuning: ``fallback`` holds every field's value; ``by_size`` the values
    measured for some element sizes (bytes), each entry naming only fields of ``per_size``
    (those its readers look up by size; the others are one value for every size)."""

    fallback: Mapping[str, Any]
    by_size: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    per_size: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = set(self.per_size) - set(self.fallback)
        if unknown:
            raise ValueError(f"per-size fields {sorted(unknown)} have no fallback")
        for size, entry in self.by_size.items():
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"element sizes are ints of at least 1 byte, not {size!r}")
            wrong = set(entry) - set(self.per_size)
            if wrong:
                raise ValueError(f"{sorted(wrong)} for {size}-byte values: only "
                                 f"{', '.join(self.per_size) or 'no field'} may vary by size")
        object.__setattr__(self, "fallback", MappingProxyType(dict(self.fallback)))
        object.__setattr__(self, "by_size", MappingProxyType(
            {size: MappingProxyType(dict(entry)) for size, entry in self.by_size.items()}))

    def value(self, name: str, itemsize: int | None = None, named=None):
        """The value the user named (not None), else the one measured for values of
        ``itemsize`` bytes, else the fallback."""
        if named is not None:
            return named
        return self.by_size.get(itemsize, {}).get(name, self.fallback[name])

    def tile(self, itemsize: int | None = None) -> TileShape:
        """The tile (block_size, items_per_thread) for values of ``itemsize`` bytes."""
        return TileShape(self.value("block_size", itemsize),
                         self.value("items_per_thread", itemsize))

    def as_data(self) -> dict:
        """The values as JSON takes them (sizes as strings)."""
        return {"fallback": dict(self.fallback),
                "by_size": {str(size): dict(entry) for size, entry in self.by_size.items()}}

    def with_data(self, data: Mapping) -> "Table":
        """A table of this one's fields with the values of ``data`` (``as_data``'s form, as
        a tuner would write it): per-size entries by size, and a fallback naming no field
        this table lacks. A field its fallback lacks (one added to scangen after the tuner
        ran) keeps this table's values, fallback and per size."""
        fallback = dict(data["fallback"])
        unknown = set(fallback) - set(self.fallback)
        if unknown:
            raise ValueError(f"the fallback names {sorted(unknown)}, which are not fields "
                             f"of {sorted(self.fallback)}")
        by_size = {int(size): dict(entry) for size, entry in data.get("by_size", {}).items()}
        for name in set(self.fallback) - set(fallback):
            fallback[name] = self.fallback[name]
            for size, entry in self.by_size.items():
                if name in entry:
                    by_size.setdefault(size, {})[name] = entry[name]
        return Table(fallback, by_size, self.per_size)


#: The scan (ScanKernel), by the size in bytes of what is scanned: the value's size for
#: auto_reduce_then_scan_min_bytes, the accumulator's (acc_t, a segmented scan's pair) for
#: the tile shape and the single pass. Fields named as Tuning's (Tuning.at reads them by
#: size) and as the spec's (block_size, items_per_thread: the warp_shuffle tile when the
#: user names no section). The measured sizes share every value but the tile shape: the
#: persistent single pass at every size, never reduce_then_scan, a register bound for 1024
#: threads a multiprocessor. lookback_tiles_per_lane is 1 for every size. 1-byte values
#: move in 16-byte words (tile_vector_runs; measured slower for wider values).
_MEASURED = dict(auto_reduce_then_scan_min_bytes=1 << 40, tile_min_threads_per_sm=1024,
                 tile_persistent_min_bytes=0)
SCAN = Table(
    fallback=dict(
        block_size=256, items_per_thread=4,
        # Not measured since 2026-11-21 (docs/design/tuning.md).
        auto_reduce_then_scan_min_bytes=16 << 20,
        lookback_tiles_per_lane=1,
        tile_min_threads_per_sm=1536,
        tile_persistent_min_bytes=None,  # never
        # The same for every size:
        backoff_min_ns=8, backoff_max_ns=256,
        lookback_first_wait_ns=1100,
        status_16_byte_words=True,
        tile_warp_runs=True,
        tile_vector_runs=False,
        columns_max_items_per_thread=None,  # the spec's
    ),
    by_size={
        1: dict(block_size=128, items_per_thread=32, tile_vector_runs=True, **_MEASURED),
        2: dict(block_size=256, items_per_thread=32, **_MEASURED),
        4: dict(block_size=128, items_per_thread=32, columns_max_items_per_thread=16,
                **_MEASURED),
        8: dict(block_size=256, items_per_thread=8, **_MEASURED),
    },
    per_size=("block_size", "items_per_thread", "auto_reduce_then_scan_min_bytes",
              "lookback_tiles_per_lane", "tile_min_threads_per_sm",
              "tile_persistent_min_bytes", "tile_vector_runs", "columns_max_items_per_thread"),
)

#: Tables `python -m scangen tune` measured, shipped with scangen: one file per device.
SHIPPED_TABLES = Path(__file__).resolve().parent / "tables"


def device_slug(device: str) -> str:
    """A device's name as a file name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"


def user_tables() -> Path:
    """Where `python -m scangen tune` writes the tables it measures, and where scangen looks
    first: in scangen's cache directory (scangen.cache)."""
    return cache_dir("tuning")


def user_table_path(device: str) -> Path:
    """The user's table for ``device`` (user_tables)."""
    return user_tables() / f"{device_slug(device)}.json"


def shipped_table_path(device: str) -> Path:
    return SHIPPED_TABLES / f"{device_slug(device)}.json"


def load_table(path) -> Table:
    """The SCAN table of a tuning file (``write_table``'s form), checked: every field
    SCAN has, per-size values only for SCAN's per-size fields."""
    try:
        data = json.loads(Path(path).read_text())
        return SCAN.with_data(data["scan"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"the tuning table {path} cannot be read ({err}); run "
                         "`python -m scangen tune` again, or set SCANGEN_TUNING=default") \
            from None


def write_table(path, table: Table, device: str, command: str, report=()) -> None:
    """Save a measured SCAN table for ``device`` with the command that measured it and a
    report (rows of what was compared), as load_table reads it."""
    text = json.dumps({"device": device, "command": command, "scan": table.as_data(),
                       "report": list(report)}, indent=1) + "\n"
    write_atomically(Path(path), text.encode())


_active = None  # (Table, where it came from): chosen once per process


def active_scan_table() -> tuple[Table, str]:
    """The SCAN table in effect in this process and where it came from, chosen once (the
    first spec reads it, and specs built later must agree with it): SCANGEN_TUNING=default
    gives scangen's own (SCAN); SCANGEN_TUNING=PATH that file; otherwise the table measured
    for the GPU this process sees (device 0 of CUDA_VISIBLE_DEVICES), the user's own
    (user_table_path) before the one shipped with scangen, else SCAN. Where any table
    exists, the GPU's name is read from the Linux driver's listing where every GPU is one
    model; otherwise finding it initialises the CUDA driver in this process (as its first
    launch would), and a program that forks should build its scans after forking, or use
    the spawn start method, as CUDA asks anyway (scangen.devices)."""
    global _active
    if _active is None:
        _active = _choose_scan_table()
    return _active


def scan_table() -> Table:
    """The SCAN table in effect (active_scan_table)."""
    return (_active or active_scan_table())[0]


def _choose_scan_table() -> tuple[Table, str]:
    setting = os.environ.get("SCANGEN_TUNING", "")
    if setting == "default":
        return SCAN, "scangen's defaults (SCANGEN_TUNING=default)"
    if setting:
        return load_table(setting), setting
    # Naming the device may initialise the driver (cuInit; where the driver's listing of
    # GPUs cannot answer), which a process that forks later must not have done: ask only
    # where some table could apply.
    folders = (user_tables(), SHIPPED_TABLES)
    if any(folder.is_dir() and any(folder.glob("*.json")) for folder in folders):
        device = visible_device_name()
        for path in (user_table_path(device), shipped_table_path(device)) if device else ():
            if path.is_file():
                return load_table(path), str(path)
    return SCAN, "scangen's defaults"


#: Counting scans (ScanKernel counts=True: one bit per element, warp ballots) of a mask's
#: elements (Select's flags) when the user names no section and no tuning: their tile, and
#: the Tuning fields they name for every size (COUNTING_TUNING; the others come from SCAN):
#: reduce_then_scan from 256 MiB of counts, whose first pass counts mask_sections_per_block
#: sections a block from 16-byte loads of the mask (the default of every Tuning).
COUNTING = Table(fallback=dict(block_size=128, items_per_thread=16,
                               auto_reduce_then_scan_min_bytes=256 << 20,
                               tile_min_threads_per_sm=1536, mask_sections_per_block=4))

#: Counting scans of any other condition (a predicate, Partition's, a ScanKernel's own
#: input_expr): COUNTING's tile, one pass at every size (COUNTING_CONDITION_TUNING).
#: reduce_then_scan would evaluate the condition in both passes, reading what it reads
#: twice: H100, float32 `x < 0.5f`, us at 2^25 / 2^26 / 2^28, reduce_then_scan -> one
#: pass: Select 129 / 241 / 899 -> 108 / 205 / 784, Partition(reverse_rejected) 176 / 336
#: / 1286 -> 129 / 250 / 973 (docs/design/decisions.md).
COUNTING_CONDITION = Table(fallback=dict(COUNTING.fallback,
                                         auto_reduce_then_scan_min_bytes=1 << 62))

#: Counting scans whose condition reads the values (Unique, RunLengthEncode): one pass at
#: every size, on tiles of 4096 (COUNTING_VALUES_TUNING).
COUNTING_VALUES = Table(fallback=dict(block_size=128, items_per_thread=32,
                                      auto_reduce_then_scan_min_bytes=1 << 62,
                                      tile_min_threads_per_sm=1024))

#: The most bytes of held elements (scangen.kernel.HeldElement) a thread of a counting scan
#: keeps in registers, from its ballots to its output statements (ScanModule.
#: holds_elements); with more, the hooks load each element where they read it.
HELD_ELEMENT_BYTES = 64

#: Radix sort and radix_digit_offsets (scangen/primitives/radix.py), one value for every key
#: size. onesweep_*: the ranking passes' tile (threads, up to max_items keys each), register
#: bound (and a sort's whose tile is staged in dynamic shared memory: dynamic_min_threads_per_sm),
#: look-back predecessors a poll and tiles a launch covers at most (a portion's
#: status is tiles x 2**radix_bits 8-byte words: 32 MiB for 8-bit digits, and its counts
#: fit 32 bits); digit_places_*: radix_digit_offsets' tile and register bound;
#: digit_count_blocks_per_sm: radix_digit_counts' grid-stride blocks (fewer blocks, fewer
#: global atomics); max_grid_stride_blocks: the places kernels' grid, enough for any GPU.
RADIX = Table(fallback=dict(
    onesweep_block_size=256, onesweep_max_items=24, onesweep_min_threads_per_sm=1024,
    onesweep_lookback_tiles=2, onesweep_portion_tiles=16384,
    onesweep_dynamic_min_threads_per_sm=768,
    digit_places_block_size=512, digit_places_max_items=12,
    digit_places_min_threads_per_sm=1536,
    digit_count_blocks_per_sm=4, max_grid_stride_blocks=16384,
))

#: Histogram (scangen/primitives/histogram.py), one value for every dtype: threads a block,
#: bins counted in shared memory (more bins count in global memory), and blocks per
#: multiprocessor, all resident at once (one wave walking the tiles with a grid stride, so a
#: block adds its shared counts to the global ones once).
HISTOGRAM = Table(fallback=dict(block_size=256, shared_bins=8192, blocks_per_sm=6))

#: RunLengthEncode's lengths kernel from 2^32 elements (RunLengthsModule in
#: scangen/primitives/compaction.py): runs a thread walks each step (loads in flight
#: together), in one wave of blocks.
RUN_LENGTHS = Table(fallback=dict(block_size=256, items_per_thread=4, blocks_per_sm=8))

#: SegmentedScan's segment heads from CSR offsets (SegmentHeadsModule in
#: scangen/segmented.py): an offset a thread, in one wave of blocks walking the offsets
#: with a grid stride (their number is the call's, not the plan's).
SEGMENT_HEADS = Table(fallback=dict(block_size=256, blocks_per_sm=8))

#: Shared memory one block may use, static and dynamic together, once its kernel opts in
#: (cudaFuncAttributeMaxDynamicSharedMemorySize; the device reports it as
#: MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), by architecture: the CUDA C++ Programming Guide's
#: table of technical specifications per compute capability. Without the opt-in a block
#: has 48 KiB (scangen.spec.MAX_STATIC_SHARED_BYTES) on all of them.
MAX_SHARED_BYTES_OPTIN = {
    "sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024,
    "sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024,
    "sm_90": 227 * 1024, "sm_100": 227 * 1024, "sm_120": 99 * 1024,
}

#: The architecture scangen is tuned on (Hopper) and checks against without a GPU: a spec
#: is refused when it needs more shared memory than a block of it may opt in to, and
#: ``check_compile`` compiles for it. On a device with less (MAX_SHARED_BYTES_OPTIN), the
#: first launch refuses what does not fit, naming the device's limit.
DEFAULT_ARCH = "sm_90"


def max_shared_bytes(arch: str = DEFAULT_ARCH) -> int:
    """Shared memory a block of ``arch`` may opt in to (MAX_SHARED_BYTES_OPTIN)."""
    return MAX_SHARED_BYTES_OPTIN[arch]


#: The algorithm used when the user names none.
DEFAULT_ALGORITHM = "warp_shuffle"

#: Section size for algorithms other than the fast path when the user names none.
DEFAULT_SECTION_SIZE = 1024

#: What __nanosleep and the kernels' `static const unsigned` waits take.
_MAX_NS = 2 ** 32 - 1


@dataclass(frozen=True)
class Tuning:
    """Knobs rendered into the kernels or used by ``auto``; part of every spec. A field left
    None is read by element size from the SCAN table (``at``); the others default to the
    tables' values. docs/design/tuning.md: how each value was chosen."""

    #: ``strategy="auto"`` above one section: decoupled look-back (one launch) below this many
    #: input bytes, reduce_then_scan (three passes, but each at higher bandwidth) from here on.
    auto_reduce_then_scan_min_bytes: int | None = None
    #: Polling back-off of the single-pass strategies: __nanosleep starts here and doubles
    #: per unsuccessful poll up to the maximum. The back-off made no measurable difference.
    backoff_min_ns: int = SCAN.value("backoff_min_ns")
    backoff_max_ns: int = SCAN.value("backoff_max_ns")
    #: A look-back first sleeps this long before its first poll, so the predecessors it is
    #: about to read have had time to publish (0: poll at once).
    lookback_first_wait_ns: int = SCAN.value("lookback_first_wait_ns")
    #: Tiles each lane of the decoupled look-back's warp reads per poll: a window of 32 x
    #: this many tiles, all read at once.
    lookback_tiles_per_lane: int | None = None
    #: The single-pass kernel asks the compiler (second __launch_bounds__ argument) to leave
    #: registers for this many threads per multiprocessor.
    tile_min_threads_per_sm: int | None = None
    #: Single-pass tile status of values of 5 to 8 bytes: True packs each value with its
    #: epoch and flag in one 16-byte word, read and written with one relaxed vector access;
    #: False keeps a 32-bit flag word and separate value slots.
    status_16_byte_words: bool = SCAN.value("status_16_byte_words")
    #: Single-pass tiles of the warp_shuffle algorithm (whole warps): True moves data warp
    #: by warp (coalesced loads, a transpose through the warp's shared memory into per-lane
    #: runs scanned in registers); False stages the section and runs the block scan.
    tile_warp_runs: bool = SCAN.value("tile_warp_runs")
    #: Single-pass warp runs of a plain scan (Scan: x[i] in, out[i] out) moved in 16-byte
    #: words, a lane's run at a time, with no transposes (ScanModule.vector_runs). By
    #: default for 1-byte values only: wider ones were measured slower than warp runs.
    tile_vector_runs: bool | None = None
    #: The single pass runs persistent blocks from this many bytes of scanned values (acc_t)
    #: on (0: always; the table's None: never): as many blocks as fit on the device at once,
    #: each taking tile after tile by ticket and holding two, so that its next tile is
    #: published before its current one looks back. The module then holds a second section
    #: in shared memory.
    tile_persistent_min_bytes: int | None = None
    #: The scan along columns (scan_columns): each thread's rows of a column tile are the
    #: spec's items_per_thread, at most this many (None: no limit). A column tile is a
    #: warp's width of columns by (block_size / 32) x these rows; 4-byte sums along dim 1
    #: of (8, 4096, 1024) ran 8-10% faster with 16 rows a thread than with the 1-D tile's 32.
    columns_max_items_per_thread: int | None = None
    #: reduce_then_scan's first pass over a mask (a kernel.MaskInput, as Select's flags:
    #: ScanModule.counted_mask): consecutive
    #: sections each block counts from 16-byte loads of the mask, all in flight together.
    mask_sections_per_block: int = COUNTING.value("mask_sections_per_block")

    def __post_init__(self):
        for name, (optional, low, high) in _INT_FIELDS.items():
            object.__setattr__(self, name, _checked_int(name, getattr(self, name), optional,
                                                        low, high))
        for name in ("status_16_byte_words", "tile_warp_runs", "tile_vector_runs"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (value is None and name in _SIZED_FIELDS):
                optional = "None, " if name in _SIZED_FIELDS else ""
                raise TypeError(f"Tuning.{name} must be {optional}True or False, not {value!r}")

    def at(self, itemsize: int) -> "SizedTuning":
        """The per-size fields for values of ``itemsize`` bytes: each the one named here,
        else the SCAN table's in effect (scan_table) for that size, else its fallback."""
        table = scan_table()
        return SizedTuning(**{name: table.value(name, itemsize, getattr(self, name))
                              for name in _SIZED_FIELDS})


#: Tuning's int fields: (None allowed, lowest, highest or None).
_INT_FIELDS = {
    "auto_reduce_then_scan_min_bytes": (True, 0, None),
    "backoff_min_ns": (False, 0, _MAX_NS),
    "backoff_max_ns": (False, 0, _MAX_NS),
    "lookback_first_wait_ns": (False, 0, _MAX_NS),
    "lookback_tiles_per_lane": (True, 1, 32),
    "tile_min_threads_per_sm": (True, 1, None),
    "tile_persistent_min_bytes": (True, 0, None),
    "columns_max_items_per_thread": (True, 1, 64),
    "mask_sections_per_block": (False, 1, 16),
}


def _checked_int(name, value, optional, low, high):
    """``value`` as an int (numpy's too), or a ValueError naming the field."""
    if value is None and optional:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and \
            low <= value and (high is None or value <= high):
        return int(value)
    wanted = f"an int from {low} to {high}" if high is not None else f"an int >= {low}"
    raise ValueError(f"Tuning.{name} must be {'None or ' if optional else ''}{wanted}, "
                     f"not {value!r}")


@dataclass(frozen=True)
class SizedTuning:
    """A Tuning's per-size fields for one value size (Tuning.at)."""

    auto_reduce_then_scan_min_bytes: int
    lookback_tiles_per_lane: int
    tile_min_threads_per_sm: int
    #: None: never persistent.
    tile_persistent_min_bytes: int | None
    tile_vector_runs: bool
    #: None: no limit.
    columns_max_items_per_thread: int | None

    def tile_min_blocks_per_sm(self, block_size: int) -> int:
        """Blocks of ``block_size`` threads for tile_min_threads_per_sm (CUDA allows 1 to
        32): the single-pass kernel's __launch_bounds__ and its persistent grid."""
        return min(32, max(1, self.tile_min_threads_per_sm // block_size))


_SIZED_FIELDS = tuple(f.name for f in fields(SizedTuning))
assert set(_SIZED_FIELDS) <= set(SCAN.per_size)


def _named_tuning(table: Table) -> Tuning:
    """A Tuning naming the fields ``table`` holds, for every size."""
    return Tuning(**{f.name: table.value(f.name) for f in fields(Tuning)
                     if f.name in table.fallback})


DEFAULT_TUNING = Tuning()

#: Counting scans (ScanKernel counts=True) of a mask when the user names no tuning.
COUNTING_TUNING = _named_tuning(COUNTING)

#: Counting scans of any other condition when the user names no tuning.
COUNTING_CONDITION_TUNING = _named_tuning(COUNTING_CONDITION)

#: Counting scans whose condition reads the values themselves (Unique and
#: RunLengthEncode: does x[i] equal x[i - 1]?).
COUNTING_VALUES_TUNING = _named_tuning(COUNTING_VALUES)
