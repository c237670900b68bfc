"""Radix-sort building blocks: digit offsets, radix sort and argsort.

A sort starts with ``radix_digit_counts``, which counts the digits of every pass in one
read of the keys. Then each pass over a digit is one ``radix_onesweep`` launch per portion
of the keys (onesweep, Adinets & Merrill 2022): a block takes the next tile by ticket, ranks
its keys stably among the tile's keys of the same digit, publishes the tile's digit counts
and looks back over earlier tiles' counts (decoupled look-back, one status word per (tile,
digit), the single-pass scan's tile state of scangen.strategies.tile_state), then writes
every key to its place. A sort is one pass per digit, least significant first; each pass
is stable, so the whole sort is.

radix_digit_offsets of a digit up to 8 bits wide is a reduce, a scan and a place
(kernels/radix_tile_places.cuh.j2): each tile's count of every digit, an exclusive
ScanKernel over those counts in digit-major order, then each key's rank in its tile added
to its tile's base. Wider digits sort the keys' indices by the digit in passes as above,
then turn the order into destinations and digit starts (kernels/radix_places.cuh.j2).

Keys are ordered by an order-preserving bit pattern (templates/radix.cu.j2, ``ordered_bits``):
unsigned integers as they are; signed integers with the sign bit flipped; floats with the
negatives' bits flipped and the positives' sign bit set, -0.0 taken as +0.0 and every NaN as
the largest key, so a sort puts NaN last and keeps -0.0 and +0.0 in input order, as numpy's
stable sort does. ``descending=True`` flips that pattern (NaN first, ties still in input
order, as torch.sort(stable=True, descending=True)).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..args import Argument, c_parameters
from ..compile import check_with_nvcc, compile_module
from ..interop import ONE_SHOT_ARRAYS, Call, check_array, dtype_of, host_round_trip
from ..kernel import ScanKernel
from ..render import render_module
from ..runtime.contexts import release_at_exit, stream_key
from ..runtime.gpu import gpuarray as _gpuarray, wave_grid
from ..runtime.launcher import launch_function
from ..runtime.scratch import StreamScratch
from ..runtime.streams import memset_d8_async
from ..spec import MAX_STATIC_SHARED_BYTES, as_flag, as_int
from ..arith import ceil_div
from ..strategies.tile_state import TileState
from ..tuning import Tuning
from ..types import UNSIGNED_C_TYPES, as_dtype, element_type, prerequisites

#: What one pass handles: digits of up to 8 bits (256 counters per warp in shared memory).
MAX_RADIX_BITS = 8
#: radix_digit_offsets takes digits up to this wide: wider than one pass, it sorts by the
#: digit in passes and finishes with the "places" kernels.
MAX_DIGIT_BITS = 16
KEY_DTYPES = tuple(np.dtype(t) for t in (
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float32", "float64"))
#: A tile is a block of 256 threads x up to 24 keys (fewer where wide keys and values would
#: not fit in shared memory). H200, 2026-11-25, with the shared-memory ranking (uint32,
#: 2^26, median of 9, benchmarks/tune_radix.py; sort, then radix_digit_offsets, us, at the
#: threads per multiprocessor of ONESWEEP_MIN_THREADS_PER_SM): 256 x 16 at 1024 2098 and
#: 579, at 1280 2059-2293 and 554-578; 256 x 24 at 768 1931-1933 and 545-548, at 1024 1931
#: and 538; 256 x 20 2039, 577; 256 x 28 1977, 511; 256 x 32 at 768 1946, 569; 256 x 8 at 1536
#: 2786, 778; 384 x 16 2064, 532; 384 x 24 2492, 557; 512 x 8 2735, 729; 512 x 16 2772,
#: 581 (cupy.sort 1745 us in the same runs). Earlier, on an H100 with the ballot ranking:
#: 256 x 16 2.66-2.72 ms, 384 x 16 2.69, 512 x 8 3.60.
_TILE = (256, 24)
#: radix_digit_offsets' tile (threads, keys each) and register bound (threads a
#: multiprocessor holds, at least). H100, 2026-11-25, uint32 keys, 8 bits, us at 2^24 /
#: 2^26 / 2^28 in one run, two rounds (.gpu/s16_dest3.py; a copy of 12n bytes takes 77 /
#: 274 / 1077): 512 x 12 at 1536 139-192 / 458-460 / 1730-1733 (no spills), 512 x 16 at
#: 1536 144-146 / 464-465 / 1730-1740, 384 x 16 at 1536 144-145 / 469-472 / 1751-1761,
#: 384 x 12 at 1536 143-145 / 487-490 / 1846-1860, 640 x 12 at 1920 146-148 / 485 /
#: 1800-1807, 256 x 32 at 1024 154-157 / 488-491 / 1791-1815, 384 x 16 at 1152 151 / 497 /
#: 1880. Fewer threads a multiprocessor lose more: 256 x 24 at 1024 158 / 533 / 1933.
_DIGIT_PLACES_TILE = (512, 12, 1536)

#: Blocks of a grid-stride launch (the places kernels): enough to fill any GPU.
_MAX_GRID_STRIDE_BLOCKS = 16384
#: Blocks per multiprocessor of radix_digit_counts (a grid-stride loop: each block adds its
#: counts to the global ones once, so fewer blocks mean fewer global atomics).
_DIGIT_COUNT_BLOCKS_PER_SM = 4
#: Tiles one radix_onesweep launch covers at most: a portion's tile status is
#: tiles x 2**radix_bits words of 8 bytes (32 MiB here for 8-bit digits), and its counts
#: fit 32 bits. Larger inputs take a launch per portion. Measured on an H200 (uint32 keys,
#: best of 7): 8192 / 16384 / 65536 tiles sort 2^26 keys in 2288 / 2249 / 2265 us and 2^28
#: in 8713 / 8305 / 8394 us (each launch ends with a tail of idle multiprocessors).
ONESWEEP_PORTION_TILES = 16384
#: radix_onesweep's register bound: a multiprocessor holds this many of its threads (4
#: blocks of 256) at least. Measured on an H100 (256 x 16 tiles, 2^26 uint32 keys): 2.66-2.72
#: ms against 3.20 ms unbounded; blocks of 384 and 512 threads were no faster. On an H200
#: with 256 x 24 tiles, 768 (80 registers) and 1024 (64, and 168 bytes of spills) sort
#: 2^26 uint32 keys alike (1931-1933 us).
ONESWEEP_MIN_THREADS_PER_SM = 1024
#: Predecessors a onesweep digit's look-back reads per poll, all loaded before any is
#: decoded (RadixModule.lookback_tiles; see templates/tile/state.cuh.j2's read_status).
#: H200, 2026-11-25, 2^26 uint32 keys, sort and radix_digit_offsets in us (cupy.sort
#: 1745): 1 a poll 1972/510 and 1963/504, 2 1881/504, 4 1882/515 and 1879/511, 8 1909/544;
#: one read a round trip as before 2010/529 and 1968/511.
ONESWEEP_LOOKBACK_TILES = 2
#: The onesweep status: a tile's count of one digit (32 bits) with flag and epoch in one word.
DIGIT_STATUS = TileState(4)

_N = Argument("n", "long long")
_FLIP = Argument("flip", "unsigned long long")
_PASS_PARAMETERS = (_N, Argument("shift", "int"), Argument("mask", "unsigned int"), _FLIP)


def key_type(dtype) -> np.dtype:
    """The key dtype, or a TypeError listing the ones radix passes take."""
    key = as_dtype(dtype, "key_dtype")
    if key not in KEY_DTYPES:
        raise TypeError(f"keys of dtype {key} cannot be radix sorted; key dtypes are "
                        f"{', '.join(str(k) for k in KEY_DTYPES)}")
    return key


@dataclass(frozen=True)
class RadixModule:
    """The module of radix passes for one key type (and value type): a module spec for
    scangen.compile, hashable, rendered from templates/radix.cu.j2.

    ``output`` is "keys" (keys, and values if any, move to their places), "dest" (no
    passes: the tile counts and tile places kernels of radix_digit_offsets, see
    _DigitPlaces) or "places" (no passes: the two kernels that finish a digit wider than a
    pass, see RadixDigitOffsets).
    ``index_values``: the value array may be NULL, and each key then carries its index
    (argsort's first pass)."""

    template: ClassVar[str] = "radix.cu.j2"
    key_dtype: np.dtype
    value_dtype: np.dtype | None = None
    output: str = "keys"
    index_values: bool = False
    radix_bits: int = MAX_RADIX_BITS
    #: The tile: block_size threads, up to max_items keys each (None: _TILE's, or
    #: _DIGIT_PLACES_TILE's for "dest").
    block_size: int | None = None
    max_items: int | None = None
    #: Predecessors a digit's look-back reads per poll.
    lookback_tiles: int = ONESWEEP_LOOKBACK_TILES
    #: The register bound of the ranking kernels: a multiprocessor holds this many threads
    #: (None: ONESWEEP_MIN_THREADS_PER_SM, or _DIGIT_PLACES_TILE's for "dest").
    min_threads_per_sm: int | None = None

    def __post_init__(self):
        key_type(self.key_dtype)
        if self.output not in ("keys", "dest", "places"):
            raise ValueError(f"output must be 'keys', 'dest' or 'places', not {self.output!r}")
        if self.output != "keys" and self.value_dtype is not None:
            raise ValueError(f"a {self.output!r} module moves no values")
        if self.index_values and self.value_dtype != np.dtype(np.int64):
            raise ValueError("index values are int64")
        if not 1 <= self.radix_bits <= MAX_RADIX_BITS:
            raise ValueError(f"a pass takes digits of 1..{MAX_RADIX_BITS} bits")
        if not 1 <= self.lookback_tiles <= 32:
            raise ValueError("lookback_tiles must be 1..32")
        tile = _DIGIT_PLACES_TILE if self.output == "dest" else \
            (*_TILE, ONESWEEP_MIN_THREADS_PER_SM)
        for field, default in zip(("block_size", "max_items", "min_threads_per_sm"), tile):
            if getattr(self, field) is None:
                object.__setattr__(self, field, default)
        # Values too wide to stage in shared memory: a TypeError when the module is made
        # (and with it the sort), not at its first call.
        _ = self.items_per_thread

    @property
    def moved_itemsize(self) -> int:
        """Bytes a key (and its value) take."""
        return self.key_dtype.itemsize + (0 if self.value_dtype is None
                                          else self.value_dtype.itemsize)

    @property
    def value_type(self):
        return None if self.value_dtype is None else element_type(self.value_dtype)

    @property
    def items_per_thread(self) -> int:
        """Keys per thread: as many as the staging area (keys and values of a whole tile)
        holds, up to max_items."""
        if self.output != "keys":
            return self.max_items
        # What the digit counters leave of the static limit: a counter per digit (and one
        # for lanes past the end) per warp, the tile's counts, starts (4 bytes) and bases
        # (8 bytes) per digit, and the ticket's tile number (8 bytes). The ranking's digit
        # masks (as many as the counters) share the staging area.
        warps = self.block_size // 32
        staging = MAX_STATIC_SHARED_BYTES - 4 * warps * (self.radix + 1) - 16 * self.radix - 8
        itemsize = self.moved_itemsize
        items = min(self.max_items, staging // (self.block_size * itemsize))
        if items < 1:
            raise TypeError(f"values of {itemsize - self.key_dtype.itemsize} bytes are too "
                            f"large to stage in shared memory (at most "
                            f"{staging // self.block_size - self.key_dtype.itemsize})")
        return items

    @property
    def max_passes(self) -> int:
        """Passes one digit count serves: every digit of the key."""
        return ceil_div(8 * self.key_dtype.itemsize, self.radix_bits)

    @property
    def tile_size(self) -> int:
        return self.block_size * self.items_per_thread

    @property
    def radix(self) -> int:
        return 1 << self.radix_bits

    def tiles(self, n: int) -> int:
        return ceil_div(n, self.tile_size)

    # The module spec protocol of scangen.compile.

    def entry_points(self):
        if self.output == "places":
            return (("radix_places_from_order",
                     (Argument("order", "long long", pointer=True, const=True),
                      Argument("dest", "long long", pointer=True), _N)),
                    ("radix_digit_starts",
                     (Argument("sorted", "radix_key_t", pointer=True, const=True),
                      Argument("digit_start", "long long", pointer=True))
                     + _PASS_PARAMETERS))
        keys = Argument("keys", "radix_key_t", pointer=True, const=True)
        if self.output == "dest":
            return (("radix_tile_counts",
                     (keys, Argument("tile_counts", "long long", pointer=True),
                      Argument("digits", "unsigned char", pointer=True))
                     + _PASS_PARAMETERS),
                    ("radix_tile_places",
                     (Argument("digits", "unsigned char", pointer=True, const=True),
                      Argument("tile_bases", "long long", pointer=True, const=True),
                      Argument("dest", "long long", pointer=True),
                      Argument("digit_start", "long long", pointer=True), _N)))
        counts = (keys, Argument("counts", "unsigned long long", pointer=True), _N,
                  Argument("first_shift", "int"), Argument("passes", "int"),
                  Argument("end_bit", "int"), _FLIP)
        moved = (Argument("keys_out", "radix_key_t", pointer=True),)
        if self.value_dtype is not None:
            moved += (Argument("values", "radix_value_t", pointer=True, const=True),
                      Argument("values_out", "radix_value_t", pointer=True))
        onesweep = (keys, *moved,
                    Argument("digit_counts", "unsigned long long", pointer=True, const=True),
                    Argument("portion_in", "long long", pointer=True, const=True),
                    Argument("portion_out", "long long", pointer=True),
                    Argument("ticket", "unsigned long long", pointer=True),
                    Argument("ticket_base", "unsigned long long"),
                    Argument("status", "void", pointer=True),
                    Argument("epoch", "unsigned int"), Argument("first_tile", "long long"),
                    *_PASS_PARAMETERS)
        return (("radix_digit_counts", counts), ("radix_onesweep", onesweep))

    def module_source(self):
        return render_module(self)

    @property
    def description(self) -> str:
        if self.output == "places":
            return f"radix places and digit starts of {self.key_dtype} keys"
        if self.output == "dest":
            return f"radix digit offsets of {self.key_dtype} keys"
        values = "" if self.value_dtype is None else f" with {self.value_dtype} values"
        return f"radix passes over {self.key_dtype} keys{values}"

    def context(self) -> dict:
        key = element_type(self.key_dtype)
        value = self.value_type
        includes, declarations = prerequisites([key] + ([] if value is None else [value]))
        kind = self.key_dtype.kind
        return dict(
            key_dtype=str(self.key_dtype), key_c=key.c_name,
            key_bits_c=UNSIGNED_C_TYPES[self.key_dtype.itemsize],
            key_order={"u": "unsigned", "i": "signed", "f": "float"}[kind],
            value_dtype=None if value is None else value.name,
            value_c=None if value is None else value.c_name,
            includes=list(includes), type_declarations=declarations,
            radix_bits=self.radix_bits, max_passes=self.max_passes,
            min_blocks=max(1, self.min_threads_per_sm // self.block_size),
            block_size=self.block_size,
            items_per_thread=self.items_per_thread, tile_size=self.tile_size,
            output=self.output, index_values=self.index_values,
            lookback_tiles=self.lookback_tiles,
            backoff_min_ns=Tuning.backoff_min_ns, backoff_max_ns=Tuning.backoff_max_ns,
            **DIGIT_STATUS.template_context(),
            parameters={name: c_parameters(params) for name, params in self.entry_points()})


def _ptr(array) -> int:
    """A device address for a launch (an int: launches pack arguments by the kernel's format,
    and a numpy scalar per pointer costs a fifth of a microsecond); 0 for none or empty."""
    return array.ptr if array is not None and array.size else 0


class _Scratch:
    """What a module's launches on one stream use, kept between calls: arrays (digit
    counts, portion bases, a sort's spare buffers), grown as needed, and the onesweep
    passes' ticket and tile status."""

    def __init__(self):
        self.arrays = {}
        self.status = StreamScratch(DIGIT_STATUS)

    def get(self, name, size, dtype):
        array = self.arrays.get(name)
        if array is None or array.size < size or array.dtype != dtype:
            array = self.arrays[name] = _gpuarray().empty(max(size, 1), dtype)
        return array


class _ModuleLaunches:
    """A module and the scratch its launches use, per calling thread and stream."""

    def __init__(self, module: RadixModule):
        self.module = module
        # Keyed by the thread and compile.stream_key (the context and the stream): a call's
        # launches use it in stream order, and a call from another thread (the one-shot
        # functions share their objects) may queue its own on the same stream between
        # them, so it has its own; another context's memory is not this one's.
        self._scratch = {}  # -> _Scratch
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._scratch.clear()

    def scratch(self, stream) -> _Scratch:
        """The calling thread's scratch for ``stream`` in the current context."""
        key = (threading.get_ident(), *stream_key(stream))
        scratch = self._scratch.get(key)
        if scratch is None:
            scratch = self._scratch[key] = _Scratch()
        return scratch

    @property
    def source(self) -> str:
        """The CUDA of the module's kernels."""
        return self.module.module_source().text

    def check_compile(self) -> None:
        check_with_nvcc(self.module)


class _RadixPasses(_ModuleLaunches):
    """Runs a module's launches on a stream: the digit counts of all passes, then each pass
    as one onesweep launch per portion of the keys."""

    def count(self, keys, n, passes, descending, stream) -> None:
        """Count the digits of ``passes`` ((shift, bits) of each, consecutive) over the n
        keys, for run() to find where each pass's digits start."""
        module = self.module
        counts = self.scratch(stream).get("digit_counts", len(passes) * module.radix,
                                          np.uint64)
        memset_d8_async(counts.ptr, 0, len(passes) * module.radix * 8, stream)
        grid = wave_grid(module.tiles(n), _DIGIT_COUNT_BLOCKS_PER_SM)
        end_bit = passes[-1][0] + passes[-1][1]
        launch_function(compile_module(module), "radix_digit_counts", stream)(
            (grid, 1, 1), (module.block_size, 1, 1), stream, _ptr(keys), counts.ptr,
            np.int64(n), np.int32(passes[0][0]), np.int32(len(passes)), np.int32(end_bit),
            _flip(descending))

    def run(self, keys, moved, n, number, shift, bits, descending, stream):
        """Pass ``number`` of those count() counted, over the digit at ``shift`` (``bits``
        wide): ``moved`` is the arguments after the keys (the outputs, and values if any)."""
        module = self.module
        launch = launch_function(compile_module(module), "radix_onesweep", stream)
        scratch = self.scratch(stream)
        counts = scratch.get("digit_counts", (number + 1) * module.radix, np.uint64)
        # Where each digit starts in a portion: written by the portion before it.
        bases = [scratch.get(name, module.radix, np.int64) for name in ("bases", "bases_next")]
        tiles = module.tiles(n)
        portion = min(tiles, ONESWEEP_PORTION_TILES)
        state = scratch.status
        addresses = state.bind_state(portion * module.radix, stream)
        pass_args = _pass_arguments(n, shift, bits, descending)
        for first_tile in range(0, tiles, portion):
            grid = min(portion, tiles - first_tile)
            ticket_base, epoch = state.next_single_pass_call(grid, stream)
            launch((grid, 1, 1), (module.block_size, 1, 1), stream, _ptr(keys),
                   *(_ptr(a) for a in moved), counts.ptr + 8 * number * module.radix,
                   bases[0].ptr, bases[1].ptr, addresses["ticket"],
                   ticket_base, addresses["status"], epoch, first_tile, *pass_args)
            bases.reverse()


class _DigitPlaces(_ModuleLaunches):
    """radix_digit_offsets of a digit up to a pass wide: the tile counts of every digit, an
    exclusive scan of them in digit-major order (in place: each becomes the base of its tile
    and digit), and each key's place from its tile's bases."""

    @property
    def source(self) -> str:
        """The CUDA of the tile kernels and of the scan between them."""
        return super().source + "\n" + _tile_bases_scan().source

    def check_compile(self) -> None:
        super().check_compile()
        _tile_bases_scan().check_compile()

    def run(self, keys, dest, digit_start, n, shift, descending, stream) -> None:
        """dest and digit_start of the n keys for the module's digit at ``shift``."""
        module = self.module
        compiled = compile_module(module)
        scratch = self.scratch(stream)
        tiles = module.tiles(n)
        bases = scratch.get("tile_bases", module.radix * tiles, np.int64)
        grid, block = (tiles, 1, 1), (module.block_size, 1, 1)
        pass_args = _pass_arguments(n, shift, module.radix_bits, descending)
        digits = scratch.get("digits", n, np.uint8)
        launch_function(compiled, "radix_tile_counts", stream)(
            grid, block, stream, _ptr(keys), bases.ptr, digits.ptr, *pass_args)
        _tile_bases_scan().launch_converted((bases.ptr,), module.radix * tiles, stream)
        launch_function(compiled, "radix_tile_places", stream)(
            grid, block, stream, digits.ptr, bases.ptr, _ptr(dest), _ptr(digit_start),
            np.int64(n))


@functools.cache
def _tile_bases_scan():
    """The scan between the tile kernels of radix_digit_offsets: tile_counts[j] becomes the
    sum of the counts before it (the counts of tile t's digit d sit at d * tiles + t)."""
    return ScanKernel(np.int64, "add", arguments="long long *tile_counts",
                      input_expr="tile_counts[i]", output_statement="tile_counts[i] = prev_item;",
                      title="radix digit offsets: tile bases")


def _flip(descending) -> np.uint64:
    """What ordered bits are xor-ed with: all ones for a descending order."""
    return np.uint64(2 ** 64 - 1 if descending else 0)


def _pass_arguments(n, shift, bits, descending) -> tuple:
    """The values of _PASS_PARAMETERS: n, the digit's shift and mask, and the flip."""
    return np.int64(n), np.int32(shift), np.uint32((1 << bits) - 1), _flip(descending)


def _finish_wide_digit(module, sorted_keys, order, dest, digit_start, n, shift, bits,
                       descending, stream) -> None:
    """The places module's two launches: dest from the stable order by the digit, and where
    each digit starts from the keys in that order."""
    compiled = compile_module(module)
    grid = (min(ceil_div(n, module.block_size), _MAX_GRID_STRIDE_BLOCKS), 1, 1)
    block = (module.block_size, 1, 1)
    launch_function(compiled, "radix_places_from_order", stream)(
        grid, block, stream, _ptr(order), _ptr(dest), np.int64(n))
    launch_function(compiled, "radix_digit_starts", stream)(
        grid, block, stream, _ptr(sorted_keys), _ptr(digit_start),
        *_pass_arguments(n, shift, bits, descending))


def _check_bits(name, value, width) -> int:
    value = as_int(name, value)
    if not 0 <= value <= width:
        raise ValueError(f"{name}={value} is outside the key's {width} bits (0..{width})")
    return value


class _RadixPrimitive:
    """What the radix classes share: their passes' source and compile check."""

    _passes: _ModuleLaunches

    @property
    def source(self) -> str:
        """The CUDA of the radix kernels (no GPU needed)."""
        return self._passes.source

    def check_compile(self) -> None:
        """Compile the module with the nvcc on PATH (no GPU needed)."""
        self._passes.check_compile()


class RadixDigitOffsets(_RadixPrimitive):
    """Where each key goes when keys are stably ordered by one digit.

    ``RadixDigitOffsets(key_dtype, bits=8)(keys, shift)`` -> ``(dest, digit_start)``, both
    int64 arrays of the keys' kind: ``dest[i]`` is the stable position of ``keys[i]`` when
    keys are ordered by the digit ``(ordered_bits(keys[i]) >> shift) & (2**bits - 1)``, and
    ``digit_start[d]`` is how many keys have a smaller digit. ``ordered_bits`` is the
    order-preserving bit pattern radix_sort uses: the key itself for unsigned keys, the
    sign bit flipped for signed ones, and for floats the negatives' bits flipped and the
    positives' sign bit set (-0.0 as +0.0, NaN as all ones). Bits past the key's width
    read as zero. ``descending=True`` orders by the flipped pattern. ``bits`` is 1 to 16:
    up to 8, three launches (each tile's digit counts, an exclusive ScanKernel over them,
    each key's rank in its tile added to its tile's base; see _DigitPlaces); wider, a
    stable argsort by the digit in passes of 8 bits and then two launches that give each
    key's place and each digit's start. Scratch: n bytes (each key's digit) and 8 bytes
    per digit and tile (_DIGIT_PLACES_TILE), kept between calls."""

    def __init__(self, key_dtype, bits=8):
        self.key_dtype = key_type(key_dtype)
        bits = as_int("bits", bits)
        if not 1 <= bits <= MAX_DIGIT_BITS:
            raise ValueError(f"bits={bits}: a digit has 1..{MAX_DIGIT_BITS} bits")
        self.bits = bits
        self._order = None
        if bits <= MAX_RADIX_BITS:  # tile counts, their scan, each key's place
            self._passes = _DigitPlaces(RadixModule(self.key_dtype, output="dest",
                                                    radix_bits=self.bits))
        else:
            # Wider than one pass: a stable argsort by the digit's bits (passes of at most 8
            # bits, least significant first), then the places module: each key's place
            # from that order, and each digit's start from the keys in that order.
            self._order = RadixSort(self.key_dtype, np.int64, _index_values=True)
            self._passes = self._order._passes
            self._places = RadixModule(self.key_dtype, output="places")

    def __repr__(self):
        return f"RadixDigitOffsets({self.key_dtype.name}, bits={self.bits})"

    @property
    def source(self) -> str:
        """The CUDA of the passes and (digits wider than a pass) of the places module (no
        GPU needed)."""
        if self._order is None:
            return self._passes.source
        return self._passes.source + "\n" + self._places.module_source().text

    def check_compile(self) -> None:
        """Compile every module the digit offsets use with the nvcc on PATH."""
        self._passes.check_compile()
        if self._order is not None:
            check_with_nvcc(self._places)

    def __call__(self, keys, shift, *, descending=False, stream=None):
        call = Call(stream, {"keys": keys})
        view = call.views["keys"]
        check_array("keys", view, self.key_dtype)
        width = 8 * self.key_dtype.itemsize
        shift = _check_bits("shift", shift, width - 1)
        descending = as_flag("descending", descending)
        n = view.size
        dest, dest_view = call.empty((n,), np.int64)
        digit_start, digit_start_view = call.empty((1 << self.bits,), np.int64)
        if n == 0:
            _zero(digit_start_view, call.stream)
        elif self._order is None:
            self._passes.run(view, dest_view, digit_start_view, n, shift, descending,
                             call.stream)
        else:
            scratch = self._passes.scratch(call.stream)
            sorted_keys = scratch.get("sorted", n, self.key_dtype)
            order = scratch.get("order", n, np.int64)
            # Bits past the key's width read as zero: nothing to sort by there.
            end = min(shift + self.bits, width)
            self._order.sort_views(view, None, sorted_keys, order, n, shift, end, descending,
                                   call.stream)
            _finish_wide_digit(self._places, sorted_keys, order, dest_view, digit_start_view,
                               n, shift, self.bits, descending, call.stream)
        return dest, digit_start


def _zero(view, stream) -> None:
    if view.size:
        memset_d8_async(view.ptr, 0, view.nbytes, stream)


class RadixSort(_RadixPrimitive):
    """A stable LSD radix sort of keys (and values carried along).

    ``RadixSort(key_dtype, value_dtype=None)(keys, values=None, *, descending=False,
    begin_bit=0, end_bit=None, stream=None)`` -> the sorted keys, or ``(keys, values)``:
    new arrays of the keys' kind (GPUArray, CuPy, torch); the inputs are left as they are.
    Keys: uint8..uint64, int8..int64, float32, float64 (NaN last, -0.0 and +0.0 in input
    order, as numpy's stable sort);
    values: any scangen dtype (structs too). ``begin_bit``/``end_bit`` sort by those bits
    of the order-preserving pattern only (see RadixDigitOffsets). One pass per 8 bits; the
    scratch of a pass (counts, offsets, a spare buffer) is kept between calls, per stream.
    """

    def __init__(self, key_dtype, value_dtype=None, *, _index_values=False):
        self.key_dtype = key_type(key_dtype)
        self.value_dtype = None if value_dtype is None else \
            element_type(value_dtype, "value_dtype").dtype
        self._passes = _RadixPasses(RadixModule(self.key_dtype, self.value_dtype,
                                                index_values=_index_values))

    def __repr__(self):
        values = "" if self.value_dtype is None else f", value_dtype={self.value_dtype.name}"
        index = ", _index_values=True" if self._passes.module.index_values else ""
        return f"RadixSort({self.key_dtype.name}{values}{index})"

    def __call__(self, keys, values=None, *, descending=False, begin_bit=0, end_bit=None,
                 stream=None):
        call = Call(stream, {"keys": keys, "values": values})
        keys, values = call.views["keys"], call.views["values"]
        check_array("keys", keys, self.key_dtype)
        n = keys.size
        carries = self.value_dtype is not None
        if carries and values is None and not self._passes.module.index_values:
            raise TypeError(f"this RadixSort carries {self.value_dtype} values: call it as "
                            "sort(keys, values)")
        if values is not None:
            if not carries:
                raise TypeError("this RadixSort sorts keys only; build it with value_dtype "
                                "to carry values")
            check_array("values", values, self.value_dtype, length=n)
        width = 8 * self.key_dtype.itemsize
        descending = as_flag("descending", descending)
        begin = _check_bits("begin_bit", begin_bit, width)
        end = _check_bits("end_bit", width if end_bit is None else end_bit, width)
        if begin > end:
            raise ValueError(f"begin_bit={begin} is past end_bit={end}")
        out_keys, out_keys_view = call.empty((n,), self.key_dtype)
        out_values, out_values_view = call.empty((n,), self.value_dtype) if carries \
            else (None, None)
        if n:
            self.sort_views(keys, values, out_keys_view, out_values_view, n, begin, end,
                            descending, call.stream)
        return (out_keys, out_values) if carries else out_keys

    def sort_views(self, keys, values, out_keys, out_values, n, begin, end, descending,
                   stream) -> None:
        """The passes over bits begin..end of n keys (views, checked by the caller) into
        out_keys (and out_values)."""
        carries = self.value_dtype is not None
        # (shift, bits) of each pass; with no bits to sort by, one pass over a digit that is
        # always 0 (a stable pass then copies keys and values, and numbers argsort's indices)
        passes = [(shift, min(MAX_RADIX_BITS, end - shift))
                  for shift in range(begin, end, MAX_RADIX_BITS)] or [(0, 0)]
        # Ping-pong between the output and a spare so that the last pass lands in the output.
        scratch = self._passes.scratch(stream)
        spare_keys = scratch.get("keys", n, self.key_dtype)
        spare_values = scratch.get("values", n, self.value_dtype) if carries else None
        targets = [(out_keys, out_values), (spare_keys, spare_values)]
        source = (keys, values)
        self._passes.count(keys, n, passes, descending, stream)
        for number, (shift, bits) in enumerate(passes):
            target = targets[(len(passes) - 1 - number) % 2]
            moved = (target[0],) + ((source[1], target[1]) if carries else ())
            self._passes.run(source[0], moved, n, number, shift, bits, descending, stream)
            source = target


# --- one-shot functions: cached objects, so a repeated call compiles nothing --------------

@functools.lru_cache(maxsize=64)
def _radix_sort(key_dtype, value_dtype, index_values=False):
    return RadixSort(key_dtype, value_dtype, _index_values=index_values)


@functools.lru_cache(maxsize=64)
def _digit_offsets(key_dtype, bits):
    return RadixDigitOffsets(key_dtype, bits)


def radix_digit_offsets(keys, shift, bits=8, *, descending=False, stream=None):
    """``(dest, digit_start)`` for ordering ``keys`` stably by one digit: see
    RadixDigitOffsets (which keeps its scratch between calls). {arrays}"""
    offsets = _digit_offsets(dtype_of(keys, "keys"), bits)
    return host_round_trip(
        lambda keys: offsets(keys, shift, descending=descending, stream=stream),
        {"keys": keys}, stream)


def radix_sort(keys, values=None, *, descending=False, begin_bit=0, end_bit=None,
               stream=None):
    """Stably sorted keys (new arrays), or ``(keys, values)`` with values carried along:
    see RadixSort. {arrays}"""
    sort = _radix_sort(dtype_of(keys, "keys"),
                       None if values is None else dtype_of(values, "values"))
    return host_round_trip(
        lambda keys, values: sort(keys, values, descending=descending, begin_bit=begin_bit,
                                  end_bit=end_bit, stream=stream),
        {"keys": keys, "values": values}, stream)


def argsort(keys, *, descending=False, stream=None):
    """The int64 indices that sort ``keys`` stably (numpy's ``argsort(kind='stable')``;
    NaN last; ``descending=True`` keeps ties in input order). {arrays}"""
    sort = _radix_sort(dtype_of(keys, "keys"), np.dtype(np.int64), index_values=True)
    return host_round_trip(lambda keys: sort(keys, descending=descending, stream=stream)[1],
                           {"keys": keys}, stream)


for _function in (radix_digit_offsets, radix_sort, argsort):
    _function.__doc__ = _function.__doc__.format(arrays=ONE_SHOT_ARRAYS)
