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
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..arith import ceil_div
from ..args import Argument, c_parameters
from ..compile import check_all_with_nvcc
from ..kernel import ScanKernel
from ..interop import ONE_SHOT_ARRAYS, Call, check_array, dtype_of, host_round_trip
from ..modules import Module, ModuleOwner, ModulePlan, ModulePlanBuilder
from ..plan import as_count
from ..runtime.modules import ModuleRuntime
from ..spec import MAX_STATIC_SHARED_BYTES, as_flag, as_int
from ..strategies.base import NULL, BufferArg, RuntimeArg
from ..strategies.tile_state import TICKET_BYTES, TileState
from ..tuning import MAX_SHARED_BYTES_OPTIN, RADIX, Tuning, max_shared_bytes
from ..types import UNSIGNED_C_TYPES, as_dtype, element_type, prerequisites
from .registry import command_line

__all__ = ["RadixSort", "RadixDigitOffsets", "radix_sort", "argsort", "radix_digit_offsets"]

#: What one pass handles: digits of up to 8 bits (256 counters per warp in shared memory).
MAX_RADIX_BITS = 8
#: radix_digit_offsets takes digits up to this wide: wider than one pass, it sorts by the
#: digit in passes and finishes with the "places" kernels.
MAX_DIGIT_BITS = 16
KEY_DTYPES = tuple(np.dtype(t) for t in (
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float32", "float64"))
#: The onesweep tile: a block of 256 threads x up to 24 keys (fewer where wide keys and
#: values would not fit in shared memory). These values: scangen.tuning.RADIX.
_TILE = (RADIX.value("onesweep_block_size"), RADIX.value("onesweep_max_items"))
#: radix_digit_offsets' tile (threads, keys each) and register bound (threads a
#: multiprocessor holds, at least).
_DIGIT_PLACES_TILE = (RADIX.value("digit_places_block_size"),
                      RADIX.value("digit_places_max_items"),
                      RADIX.value("digit_places_min_threads_per_sm"))

#: Blocks of a grid-stride launch (the places kernels): enough to fill any GPU.
_MAX_GRID_STRIDE_BLOCKS = RADIX.value("max_grid_stride_blocks")
#: Blocks per multiprocessor of radix_digit_counts (a grid-stride loop: each block adds its
#: counts to the global ones once, so fewer blocks mean fewer global atomics).
_DIGIT_COUNT_BLOCKS_PER_SM = RADIX.value("digit_count_blocks_per_sm")
#: Tiles one radix_onesweep launch covers at most: a portion's tile status is
#: tiles x 2**radix_bits words of 8 bytes, and its counts fit 32 bits. Larger inputs take
#: a launch per portion.
ONESWEEP_PORTION_TILES = RADIX.value("onesweep_portion_tiles")
#: radix_onesweep's register bound: a multiprocessor holds this many of its threads.
ONESWEEP_MIN_THREADS_PER_SM = RADIX.value("onesweep_min_threads_per_sm")
#: The register bound of a onesweep kernel whose tile is staged in dynamic shared memory
#: (RadixPassesModule.dynamic_staging): fewer, larger blocks a multiprocessor.
ONESWEEP_DYNAMIC_MIN_THREADS_PER_SM = RADIX.value("onesweep_dynamic_min_threads_per_sm")
#: Shared memory a block of every GPU scangen builds for may opt in to (sm_75's 64 KiB is
#: the least): a default tile staged in dynamic shared memory fits it, so it runs anywhere.
PORTABLE_SHARED_BYTES = min(MAX_SHARED_BYTES_OPTIN.values())
#: Predecessors a onesweep digit's look-back reads per poll, all loaded before any is
#: decoded (RadixPassesModule.lookback_tiles; see templates/tile/state.cuh.j2's read_status).
ONESWEEP_LOOKBACK_TILES = RADIX.value("onesweep_lookback_tiles")
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


class _RadixTiles:
    """What the tiled radix modules share: digits of ``radix_bits`` bits, tiles of
    ``block_size`` threads x ``items_per_thread`` keys, and the key's typedefs and ordered
    bits in the template (``_key_context``)."""

    def _fill_tile(self, tile) -> None:
        """The tile fields left None take ``tile``'s (block_size, max_items,
        min_threads_per_sm; a shorter ``tile`` fills the first ones only)."""
        for field, default in zip(("block_size", "max_items", "min_threads_per_sm"), tile):
            if getattr(self, field) is None:
                object.__setattr__(self, field, default)

    @property
    def items_per_thread(self) -> int:
        return self.max_items

    @property
    def tile_size(self) -> int:
        return self.block_size * self.items_per_thread

    @property
    def radix(self) -> int:
        return 1 << self.radix_bits

    def tiles(self, n: int) -> int:
        return ceil_div(n, self.tile_size)

    @property
    def layout(self) -> str:
        """The module and its tile, as plans print it."""
        return (f"{self.description}: digits of {self.radix_bits} bits, tiles of "
                f"{self.tile_size} = {self.block_size} threads x {self.items_per_thread}")

    def _tile_context(self) -> dict:
        return dict(radix_bits=self.radix_bits,
                    min_blocks=max(1, self.min_threads_per_sm // self.block_size),
                    items_per_thread=self.items_per_thread, tile_size=self.tile_size)


def _key_context(module, output: str, value_type=None) -> dict:
    """What every part of templates/radix.cu.j2 reads: the key's (and value's) types, the
    part (``output``), the block size and the entry points' parameter lists."""
    key = element_type(module.key_dtype)
    includes, declarations = prerequisites([key] + ([] if value_type is None else
                                                    [value_type]))
    return dict(
        output=output, key_dtype=str(module.key_dtype), key_c=key.c_name,
        key_bits_c=UNSIGNED_C_TYPES[module.key_dtype.itemsize],
        key_order={"u": "unsigned", "i": "signed", "f": "float"}[module.key_dtype.kind],
        value_dtype=None if value_type is None else value_type.name,
        value_c=None if value_type is None else value_type.c_name,
        includes=list(includes), type_declarations=declarations,
        block_size=module.block_size,
        parameters={name: c_parameters(params) for name, params in module.entry_points()})


@dataclass(frozen=True)
class RadixPassesModule(_RadixTiles, Module):
    """The radix passes over keys of one type (and values of one type), rendered from
    templates/radix.cu.j2: radix_digit_counts counts the digits of every pass in one read,
    radix_onesweep moves the keys (and values) of one portion to their places by one
    digit. ``index_values``: the value array may be NULL, and each key then carries its
    index (argsort's first pass)."""

    template: ClassVar[str] = "radix.cu.j2"
    key_dtype: np.dtype
    value_dtype: np.dtype | None = None
    index_values: bool = False
    radix_bits: int = MAX_RADIX_BITS
    #: The tile: block_size threads, up to max_items keys each (None: _TILE's).
    block_size: int | None = None
    max_items: int | None = None
    #: Predecessors a digit's look-back reads per poll.
    lookback_tiles: int = ONESWEEP_LOOKBACK_TILES
    #: The register bound of the ranking kernel: a multiprocessor holds this many threads
    #: (None: ONESWEEP_MIN_THREADS_PER_SM).
    min_threads_per_sm: int | None = None
    #: The staged tile in dynamic shared memory, max_items keys (and values) a thread
    #: however wide they are, up to what a block may opt in to; otherwise in what the
    #: static 48 KiB leave, fewer keys a thread where keys and values are wide. None: for
    #: a sort whose whole tile does not fit the static area but fits what a block of every
    #: supported GPU may opt in to (PORTABLE_SHARED_BYTES), under the register bound
    #: ONESWEEP_DYNAMIC_MIN_THREADS_PER_SM where min_threads_per_sm is None.
    dynamic_staging: bool | None = None

    def __post_init__(self):
        key_type(self.key_dtype)
        if self.index_values and self.value_dtype != np.dtype(np.int64):
            raise ValueError("index values are int64")
        if not 1 <= self.radix_bits <= MAX_RADIX_BITS:
            raise ValueError(f"a pass takes digits of 1..{MAX_RADIX_BITS} bits")
        if not 1 <= self.lookback_tiles <= 32:
            raise ValueError("lookback_tiles must be 1..32")
        self._fill_tile(_TILE)  # the tile's shape; its register bound follows the staging
        if self.dynamic_staging is None:
            whole = self._fixed_shared_bytes + \
                self.block_size * self.max_items * self.moved_itemsize
            object.__setattr__(self, "dynamic_staging", self.value_dtype is not None and
                               MAX_STATIC_SHARED_BYTES < whole <= PORTABLE_SHARED_BYTES)
        self._fill_tile((*_TILE, ONESWEEP_DYNAMIC_MIN_THREADS_PER_SM if self.dynamic_staging
                         else ONESWEEP_MIN_THREADS_PER_SM))
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
    def _warp_digit_bytes(self) -> int:
        """A 4-byte word per digit (and one for lanes past the end) per warp: the ranking's
        counters, and as many digit masks, which share the staging area."""
        return 4 * (self.block_size // 32) * (self.radix + 1)

    @property
    def _fixed_shared_bytes(self) -> int:
        """The onesweep kernel's shared memory besides the staging area: the warps' digit
        counters, the tile's counts, starts (4 bytes) and bases (8 bytes) per digit, and
        the ticket's tile number (8 bytes)."""
        return self._warp_digit_bytes + 16 * self.radix + 8

    @property
    def items_per_thread(self) -> int:
        """Keys per thread: as many as the staging area (keys and values of a whole tile)
        holds, up to max_items."""
        # The ranking's digit masks (as many as the counters) share the staging area.
        limit = max_shared_bytes() if self.dynamic_staging else MAX_STATIC_SHARED_BYTES
        staging = limit - self._fixed_shared_bytes
        itemsize = self.moved_itemsize
        items = min(self.max_items, staging // (self.block_size * itemsize))
        if items < 1:
            raise TypeError(f"values of {itemsize - self.key_dtype.itemsize} bytes are too "
                            f"large to stage in shared memory (at most "
                            f"{staging // self.block_size - self.key_dtype.itemsize})")
        return items

    def dynamic_shared(self) -> dict:
        """Entry point -> the dynamic shared memory its launches take (scangen.compile
        opts the kernel in to it)."""
        return {"radix_onesweep": self.dynamic_shared_bytes} if self.dynamic_staging else {}

    @property
    def dynamic_shared_bytes(self) -> int:
        """The staging area, where it is dynamic shared memory (dynamic_staging): the tile's
        keys and values, or the ranking's digit masks where those take more; else 0."""
        if not self.dynamic_staging:
            return 0
        return max(self.tile_size * self.moved_itemsize, self._warp_digit_bytes)

    @property
    def max_passes(self) -> int:
        """Passes one digit count serves: every digit of the key."""
        return ceil_div(8 * self.key_dtype.itemsize, self.radix_bits)

    def entry_points(self):
        keys = Argument("keys", "radix_key_t", pointer=True, const=True)
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

    @property
    def description(self) -> str:
        values = "" if self.value_dtype is None else f" with {self.value_dtype} values"
        return f"radix passes over {self.key_dtype} keys{values}"

    def context(self) -> dict:
        return dict(
            _key_context(self, "keys", self.value_type), **self._tile_context(),
            max_passes=self.max_passes, index_values=self.index_values,
            lookback_tiles=self.lookback_tiles, dynamic_staging=self.dynamic_staging,
            dynamic_shared_bytes=self.dynamic_shared_bytes,
            backoff_min_ns=Tuning.backoff_min_ns, backoff_max_ns=Tuning.backoff_max_ns,
            **DIGIT_STATUS.template_context())


@dataclass(frozen=True)
class DigitPlacesModule(_RadixTiles, Module):
    """radix_digit_offsets' kernels for a digit up to a pass wide (templates/radix.cu.j2,
    kernels/radix_tile_places.cuh.j2): radix_tile_counts (each tile's count of every
    digit, and each key's digit) and radix_tile_places (each key's place from its tile's
    bases)."""

    template: ClassVar[str] = "radix.cu.j2"
    key_dtype: np.dtype
    radix_bits: int = MAX_RADIX_BITS
    #: The tile and register bound (None: _DIGIT_PLACES_TILE's).
    block_size: int | None = None
    max_items: int | None = None
    min_threads_per_sm: int | None = None

    def __post_init__(self):
        key_type(self.key_dtype)
        if not 1 <= self.radix_bits <= MAX_RADIX_BITS:
            raise ValueError(f"a pass takes digits of 1..{MAX_RADIX_BITS} bits")
        self._fill_tile(_DIGIT_PLACES_TILE)

    def entry_points(self):
        return (("radix_tile_counts",
                 (Argument("keys", "radix_key_t", pointer=True, const=True),
                  Argument("tile_counts", "long long", pointer=True),
                  Argument("digits", "unsigned char", pointer=True))
                 + _PASS_PARAMETERS),
                ("radix_tile_places",
                 (Argument("digits", "unsigned char", pointer=True, const=True),
                  Argument("tile_bases", "long long", pointer=True, const=True),
                  Argument("dest", "long long", pointer=True),
                  Argument("digit_start", "long long", pointer=True), _N)))

    @property
    def description(self) -> str:
        return f"radix digit offsets of {self.key_dtype} keys"

    def context(self) -> dict:
        return dict(_key_context(self, "dest"), **self._tile_context())


@dataclass(frozen=True)
class WideDigitPlacesModule(Module):
    """The two kernels that finish a digit wider than a pass (templates/radix.cu.j2,
    kernels/radix_places.cuh.j2): radix_places_from_order (each key's place from the
    stable order by the digit) and radix_digit_starts (where each digit starts, from the
    keys in that order). Grid-stride loops of ``block_size`` threads a block."""

    template: ClassVar[str] = "radix.cu.j2"
    key_dtype: np.dtype
    block_size: int = _TILE[0]

    def __post_init__(self):
        key_type(self.key_dtype)

    def entry_points(self):
        return (("radix_places_from_order",
                 (Argument("order", "long long", pointer=True, const=True),
                  Argument("dest", "long long", pointer=True), _N)),
                ("radix_digit_starts",
                 (Argument("sorted", "radix_key_t", pointer=True, const=True),
                  Argument("digit_start", "long long", pointer=True))
                 + _PASS_PARAMETERS))

    @property
    def description(self) -> str:
        return f"radix places and digit starts of {self.key_dtype} keys"

    @property
    def layout(self) -> str:
        return f"{self.description}: blocks of {self.block_size} threads"

    def context(self) -> dict:
        return _key_context(self, "places")


@functools.cache
def _tile_bases_scan():
    """The scan between the tile kernels of radix_digit_offsets: tile_counts[j] becomes the
    sum of the counts before it (the counts of tile t's digit d sit at d * tiles + t)."""
    return ScanKernel(np.int64, "add", arguments="long long *tile_counts",
                      input_expr="tile_counts[i]", output_statement="tile_counts[i] = prev_item;",
                      title="radix digit offsets: tile bases")


def _flip(descending) -> int:
    """What ordered bits are xor-ed with: all ones for a descending order."""
    return 2 ** 64 - 1 if descending else 0


def _pass_arguments(n, shift, bits, descending) -> dict:
    """The arguments of _PASS_PARAMETERS: n, the digit's shift and mask, and the flip."""
    return dict(n=n, shift=shift, mask=(1 << bits) - 1, flip=_flip(descending))


def _buffer(name):
    """A buffer argument by name; None (no such array) is NULL."""
    return NULL if name is None else BufferArg(name)


def _plan_sort(builder, module, n, begin, end, descending, portion_tiles, *, keys="keys",
               values="values", out_keys="out_keys", out_values="out_values") -> None:
    """The launches that sort ``n`` keys (buffer ``keys``, and ``values`` if the module
    carries any; None: argsort's first pass numbers the keys) by bits begin..end into
    ``out_keys`` (and ``out_values``): the digit counts of every pass in one launch, then
    one radix_onesweep launch per pass and portion of the keys, least significant digit
    first, ping-ponging between the outputs and spare buffers so that the last pass lands
    in the outputs. A launch covers ``portion_tiles`` tiles at most."""
    carries = module.value_dtype is not None
    # (shift, bits) of each pass; with no bits to sort by, one pass over a digit that is
    # always 0 (a stable pass then copies keys and values, and numbers argsort's indices)
    passes = [(shift, min(MAX_RADIX_BITS, end - shift))
              for shift in range(begin, end, MAX_RADIX_BITS)] or [(0, 0)]
    radix, tiles = module.radix, module.tiles(n)
    count_bytes = len(passes) * radix * 8
    counts = builder.temporary("digit_counts", count_bytes,
                               "each pass's count of every digit")
    builder.zero("digit_counts", count_bytes)
    key_bytes = n * module.key_dtype.itemsize
    builder.launch(module, "radix_digit_counts", tiles, module.block_size, dict(
        keys=BufferArg(keys), counts=counts, n=n, first_shift=passes[0][0],
        passes=len(passes), end_bit=passes[-1][0] + passes[-1][1], flip=_flip(descending)),
        reads=key_bytes, writes=count_bytes, blocks_per_sm=_DIGIT_COUNT_BLOCKS_PER_SM,
        why=f"the digits of {len(passes)} pass(es) counted in one read of the keys, "
            f"a grid-stride loop over {tiles} tiles")
    portion = min(tiles, portion_tiles)
    words = portion * radix
    builder.temporary("ticket", TICKET_BYTES, "atomic tile counter", persistent=True)
    builder.temporary("status", words * DIGIT_STATUS.word_bytes,
                      f"{portion} tiles x {radix} digits: {DIGIT_STATUS.describe(words)}",
                      persistent=True)
    builder.single_pass_tiles = max(builder.single_pass_tiles, words)
    for name in ("bases", "bases_next"):
        builder.temporary(name, radix * 8, "where each digit starts in a portion")
    if len(passes) > 1:
        builder.temporary("spare_keys", key_bytes, "keys between passes")
        if carries:
            builder.temporary("spare_values", n * module.value_dtype.itemsize,
                              "values between passes")
    targets = [(out_keys, out_values), ("spare_keys", "spare_values")]
    source = (keys, values)
    for number, (shift, bits) in enumerate(passes):
        target = targets[(len(passes) - 1 - number) % 2]
        # Where each digit starts in a portion: written by the portion before it.
        bases = ["bases", "bases_next"]
        for first_tile in range(0, tiles, portion):
            grid = min(portion, tiles - first_tile)
            args = dict(keys=BufferArg(source[0]), keys_out=BufferArg(target[0]))
            if carries:
                args.update(values=_buffer(source[1]), values_out=BufferArg(target[1]))
            args.update(
                digit_counts=BufferArg("digit_counts", 8 * number * radix),
                portion_in=BufferArg(bases[0]), portion_out=BufferArg(bases[1]),
                ticket=BufferArg("ticket"), ticket_base=RuntimeArg("ticket_base"),
                status=BufferArg("status"), epoch=RuntimeArg("epoch"), first_tile=first_tile,
                **_pass_arguments(n, shift, bits, descending))
            moved = (min(n, (first_tile + grid) * module.tile_size)
                     - first_tile * module.tile_size) * module.moved_itemsize
            builder.launch(
                module, "radix_onesweep", grid, module.block_size, args, reads=moved,
                writes=moved, dynamic_shared_bytes=module.dynamic_shared_bytes,
                why=f"pass {number + 1} of {len(passes)}, bits {shift}..{shift + bits - 1}"
                    f" ({bits} bits): tiles {first_tile}..{first_tile + grid - 1} by ticket,"
                    f" each digit's count by look-back")
            bases.reverse()
        source = target


@functools.lru_cache(maxsize=256)
def _sort_plan(module, n, begin, end, descending, portion_tiles) -> ModulePlan:
    builder = ModulePlanBuilder()
    if n:
        _plan_sort(builder, module, n, begin, end, descending, portion_tiles,
                   values=None if module.index_values else "values")
    what = "argsort" if module.index_values else "radix sort"
    values = "" if module.value_dtype is None or module.index_values else \
        f" with {module.value_dtype} values"
    order = ", descending" if descending else ""
    return builder.build(f"{what} of {module.key_dtype} keys{values}, bits {begin}..{end}"
                         f"{order}", n, [module.layout])


@functools.lru_cache(maxsize=256)
def _offsets_plan(modules, bits, n, shift, descending, portion_tiles) -> ModulePlan:
    """RadixDigitOffsets' plan (see its docstring) with its ``modules``."""
    radix = 1 << bits
    key_dtype = modules[0].key_dtype
    builder = ModulePlanBuilder()
    if bits <= MAX_RADIX_BITS:
        (module,) = modules
    else:
        passes, module = modules
    if n == 0:
        builder.zero("digit_start", radix * 8)
    elif bits <= MAX_RADIX_BITS:
        tiles = module.tiles(n)
        bases = builder.temporary("tile_bases", radix * tiles * 8,
                                  "each tile's count of every digit, then its base")
        digits = builder.temporary("digits", n, "each key's digit")
        pass_args = _pass_arguments(n, shift, bits, descending)
        builder.launch(module, "radix_tile_counts", tiles, module.block_size,
                       dict(keys=BufferArg("keys"), tile_counts=bases, digits=digits,
                            **pass_args),
                       reads=n * key_dtype.itemsize, writes=radix * tiles * 8 + n,
                       why=f"each of {tiles} tiles' count of every digit, digit-major")
        builder.scan(_tile_bases_scan(), radix * tiles, dict(tile_counts=bases),
                     "each (digit, tile) count becomes the keys before it")
        builder.launch(module, "radix_tile_places", tiles, module.block_size,
                       dict(digits=digits, tile_bases=bases, dest=BufferArg("dest"),
                            digit_start=BufferArg("digit_start"), n=n),
                       reads=n + radix * tiles * 8, writes=n * 8 + radix * 8,
                       why="each key's place: its tile's base plus its rank in the tile")
    else:
        # A stable argsort by the digit's bits (bits past the key's width read as zero:
        # nothing to sort by there), then each key's place from that order, and each
        # digit's start from the keys in that order.
        width = 8 * key_dtype.itemsize
        builder.temporary("sorted", n * key_dtype.itemsize, "the keys by the digit")
        builder.temporary("order", n * 8, "the keys' indices by the digit")
        _plan_sort(builder, passes, n, shift, min(shift + bits, width), descending,
                   portion_tiles, values=None, out_keys="sorted", out_values="order")
        grid = min(ceil_div(n, module.block_size), _MAX_GRID_STRIDE_BLOCKS)
        builder.launch(module, "radix_places_from_order", grid, module.block_size,
                       dict(order=BufferArg("order"), dest=BufferArg("dest"), n=n),
                       reads=n * 8, writes=n * 8, why="dest[order[j]] = j")
        builder.launch(module, "radix_digit_starts", grid, module.block_size,
                       dict(sorted=BufferArg("sorted"), digit_start=BufferArg("digit_start"),
                            **_pass_arguments(n, shift, bits, descending)),
                       reads=n * key_dtype.itemsize, writes=radix * 8,
                       why="where each digit starts among the keys in that order")
    order = ", descending" if descending else ""
    return builder.build(f"radix digit offsets of {key_dtype} keys, {bits} bits at shift "
                         f"{shift}{order}", n, [m.layout for m in modules])


def _check_bits(name, value, width) -> int:
    value = as_int(name, value)
    if not 0 <= value <= width:
        raise ValueError(f"{name}={value} is outside the key's {width} bits (0..{width})")
    return value


class RadixDigitOffsets:
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
    each key's rank in its tile added to its tile's base; DigitPlacesModule); wider, a
    stable argsort by the digit in passes of 8 bits and then two launches that give each
    key's place and each digit's start (WideDigitPlacesModule). ``plan(n, shift)`` lists
    the launches (no GPU needed). Scratch: n bytes (each key's digit) and 8 bytes per
    digit and tile (_DIGIT_PLACES_TILE), kept between calls."""

    def __init__(self, key_dtype, bits=8):
        self.key_dtype = key_type(key_dtype)
        bits = as_int("bits", bits)
        if not 1 <= bits <= MAX_DIGIT_BITS:
            raise ValueError(f"bits={bits}: a digit has 1..{MAX_DIGIT_BITS} bits")
        self.bits = bits
        #: The modules of the digit offsets' own kernels: up to a pass wide the tile
        #: kernels, wider the passes of an argsort and the places kernels.
        self.modules: tuple[Module, ...] = \
            (DigitPlacesModule(self.key_dtype, radix_bits=bits),) if bits <= MAX_RADIX_BITS \
            else (RadixPassesModule(self.key_dtype, np.dtype(np.int64), index_values=True),
                  WideDigitPlacesModule(self.key_dtype))
        self._runtime = ModuleRuntime(DIGIT_STATUS)

    def __repr__(self):
        return f"RadixDigitOffsets({self.key_dtype.name}, bits={self.bits})"

    @property
    def source(self) -> str:
        """The CUDA of every kernel the digit offsets launch (no GPU needed)."""
        texts = [module.source for module in self.modules]
        if self.bits <= MAX_RADIX_BITS:
            texts.append(_tile_bases_scan().source)
        return "\n".join(texts)

    def modules_to_compile(self) -> list:
        """What check_compile compiles: every module the digit offsets use, and the tile
        bases' scan where a digit fits a pass."""
        scans = [_tile_bases_scan().scan_module] if self.bits <= MAX_RADIX_BITS else []
        return [*self.modules, *scans]

    def check_compile(self) -> None:
        """Compile every module the digit offsets use with the nvcc on PATH."""
        check_all_with_nvcc(self.modules_to_compile())

    def plan(self, n, shift=0, *, descending=False) -> ModulePlan:
        """The launches that place ``n`` keys by the digit at ``shift`` (no GPU needed);
        ``print()`` it to read it."""
        return _offsets_plan(self.modules, self.bits, as_count(n),
                             _check_bits("shift", shift, 8 * self.key_dtype.itemsize - 1),
                             as_flag("descending", descending), ONESWEEP_PORTION_TILES)

    def __call__(self, keys, shift, *, descending=False, stream=None):
        call = Call(stream, {"keys": keys})
        view = call.views["keys"]
        check_array("keys", view, self.key_dtype)
        plan = self.plan(view.size, shift, descending=descending)
        dest, dest_view = call.empty((view.size,), np.int64)
        digit_start, digit_start_view = call.empty((1 << self.bits,), np.int64)
        self._runtime.run(plan, {"keys": view, "dest": dest_view,
                                 "digit_start": digit_start_view}, call.stream)
        return call.returned((dest, digit_start))


class RadixSort(ModuleOwner):
    """A stable LSD radix sort of keys (and values carried along).

    ``RadixSort(key_dtype, value_dtype=None)(keys, values=None, *, descending=False,
    begin_bit=0, end_bit=None, stream=None)`` -> the sorted keys, or ``(keys, values)``:
    new arrays of the keys' kind (GPUArray, CuPy, torch); the inputs are left as they are.
    Keys: uint8..uint64, int8..int64, float32, float64 (NaN last, -0.0 and +0.0 in input
    order, as numpy's stable sort);
    values: any scangen dtype (structs too). ``begin_bit``/``end_bit`` sort by those bits
    of the order-preserving pattern only (see RadixDigitOffsets). One pass per 8 bits
    (RadixPassesModule); ``plan(n)`` lists the launches (no GPU needed). The scratch of a
    pass (counts, offsets, a spare buffer) is kept between calls, per stream.
    """

    def __init__(self, key_dtype, value_dtype=None, *, _index_values=False):
        self.key_dtype = key_type(key_dtype)
        self.value_dtype = None if value_dtype is None else \
            element_type(value_dtype, "value_dtype").dtype
        self.module = RadixPassesModule(self.key_dtype, self.value_dtype,
                                        index_values=_index_values)
        self._runtime = ModuleRuntime(DIGIT_STATUS)

    def __repr__(self):
        values = "" if self.value_dtype is None else f", value_dtype={self.value_dtype.name}"
        index = ", _index_values=True" if self.module.index_values else ""
        return f"RadixSort({self.key_dtype.name}{values}{index})"

    def plan(self, n, *, descending=False, begin_bit=0, end_bit=None) -> ModulePlan:
        """The launches that sort ``n`` keys (no GPU needed); ``print()`` it to read it."""
        width = 8 * self.key_dtype.itemsize
        descending = as_flag("descending", descending)
        begin = _check_bits("begin_bit", begin_bit, width)
        end = _check_bits("end_bit", width if end_bit is None else end_bit, width)
        if begin > end:
            raise ValueError(f"begin_bit={begin} is past end_bit={end}")
        return _sort_plan(self.module, as_count(n), begin, end, descending,
                          ONESWEEP_PORTION_TILES)

    def __call__(self, keys, values=None, *, descending=False, begin_bit=0, end_bit=None,
                 stream=None):
        call = Call(stream, {"keys": keys, "values": values})
        keys, values = call.views["keys"], call.views["values"]
        check_array("keys", keys, self.key_dtype)
        n = keys.size
        carries = self.value_dtype is not None
        if carries and values is None and not self.module.index_values:
            raise TypeError(f"this RadixSort carries {self.value_dtype} values: call it as "
                            "sort(keys, values)")
        if values is not None:
            if not carries:
                raise TypeError("this RadixSort sorts keys only; build it with value_dtype "
                                "to carry values")
            check_array("values", values, self.value_dtype, length=n)
        plan = self.plan(n, descending=descending, begin_bit=begin_bit, end_bit=end_bit)
        out_keys, out_keys_view = call.empty((n,), self.key_dtype)
        out_values, out_values_view = call.empty((n,), self.value_dtype) if carries \
            else (None, None)
        if n:
            self._runtime.run(plan, {"keys": keys, "values": values, "out_keys": out_keys_view,
                                     "out_values": out_values_view}, call.stream)
        return call.returned((out_keys, out_values) if carries else out_keys)


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

# Their kernels have tiles of their own: the scan options do not apply.
command_line("radix_sort", lambda dtype, options: RadixSort(dtype), scan_options=False)
command_line("argsort", lambda dtype, options: RadixSort(dtype, np.int64, _index_values=True),
             scan_options=False)
command_line("radix_digit_offsets",
             lambda dtype, options, bits=8: RadixDigitOffsets(dtype, bits),
             takes=["bits"], scan_options=False)
