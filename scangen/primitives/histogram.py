"""Equal-width histograms with numpy.histogram's semantics (bins, range; the last bin closed
on the right; values outside the range and NaN not counted)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..arith import ceil_div
from ..args import Argument, c_parameters
from ..interop import ONE_SHOT_ARRAYS, Call, check_array, dtype_of, host_round_trip
from ..modules import Module, ModuleOwner, ModulePlan, ModulePlanBuilder
from ..plan import as_count
from ..runtime.contexts import context_key, release_at_exit
from ..runtime.gpu import gpuarray as _gpuarray
from ..runtime.modules import ModuleRuntime
from ..strategies.base import BufferArg, RuntimeArg
from ..tuning import HISTOGRAM
from ..types import as_dtype, element_type
from .radix import KEY_DTYPES
from .registry import command_line

__all__ = ["Histogram", "histogram"]

#: Threads a block, and bins counted in shared memory (scangen.tuning.HISTOGRAM).
_BLOCK_SIZE = HISTOGRAM.value("block_size")
_SHARED_BINS = HISTOGRAM.value("shared_bins")
#: Blocks per multiprocessor, all resident at once (the kernel's register bound; its shared
#: counts fit six times): one wave, each block walking the tiles with a grid stride, so its
#: shared counts are added to the global ones once per block, not once per tile.
_BLOCKS_PER_SM = HISTOGRAM.value("blocks_per_sm")
#: The most bins for which the kernel may guess bins its own way: beyond, numpy's float32
#: arithmetic may guess two bins off, and then only numpy's own guess gives numpy's answer.
_FAST_PATH_BINS = 2 ** 20

_PARAMETERS = (
    Argument("x", "histogram_value_t", pointer=True, const=True),
    Argument("edges", "edge_t", pointer=True, const=True),
    Argument("counts", "long long", pointer=True),
    Argument("n", "long long"), Argument("bins", "int"), Argument("low", "double"),
    Argument("high", "double"), Argument("span", "double"),
    Argument("scale_in_bins", "double"), Argument("margin_in_bins", "double"))


@dataclass(frozen=True)
class HistogramModule(Module):
    """The histogram kernel for one value dtype (templates/histogram.cu.j2)."""

    template: ClassVar[str] = "histogram.cu.j2"
    dtype: np.dtype

    @property
    def edge_dtype(self) -> np.dtype:
        """numpy's bin type for a range of Python numbers: float32 for float32 data, else
        float64."""
        return np.dtype(np.float32 if self.dtype == np.float32 else np.float64)

    def entry_points(self):
        return (("histogram_counts", _PARAMETERS),)

    @property
    def description(self) -> str:
        return f"histogram of {self.dtype}"

    @property
    def items_per_thread(self) -> int:
        """Values a thread loads before binning: two 16-byte words of them."""
        return 32 // self.dtype.itemsize

    @property
    def tile_size(self) -> int:
        return _BLOCK_SIZE * self.items_per_thread

    def context(self) -> dict:
        return dict(dtype=str(self.dtype), c_type=element_type(self.dtype).c_name,
                    edge_c=element_type(self.edge_dtype).c_name,
                    block_size=_BLOCK_SIZE, items_per_thread=self.items_per_thread,
                    blocks_per_sm=_BLOCKS_PER_SM,
                    shared_bins=_SHARED_BINS, parameters=c_parameters(_PARAMETERS))


#: What the kernel takes of the call's range (Histogram.__call__ gives them).
_RANGE_VALUES = ("low", "high", "span", "scale_in_bins", "margin_in_bins")


@functools.lru_cache(maxsize=256)
def _plan(module, n, bins) -> ModulePlan:
    """The counts zeroed, then (n > 0) one wave of blocks walking the tiles."""
    builder = ModulePlanBuilder()
    builder.zero("counts", bins * 8)
    if n:
        tiles = ceil_div(n, module.tile_size)
        builder.launch(
            module, "histogram_counts", tiles, _BLOCK_SIZE,
            dict(x=BufferArg("x"), edges=BufferArg("edges"), counts=BufferArg("counts"),
                 n=n, bins=bins, **{name: RuntimeArg(name) for name in _RANGE_VALUES}),
            reads=n * module.dtype.itemsize + (bins + 1) * module.edge_dtype.itemsize,
            writes=bins * 8, blocks_per_sm=_BLOCKS_PER_SM,
            why=f"a grid-stride loop over {tiles} tiles of {module.tile_size}, counts in "
                f"shared memory{'' if bins <= _SHARED_BINS else ' (too many bins: global)'}")
    return builder.build(f"histogram of {module.dtype} into {bins} bins", n,
                         [f"{module.description}: tiles of {module.tile_size} = "
                          f"{_BLOCK_SIZE} threads x {module.items_per_thread}"])


def outer_edges(bins, range) -> tuple[float, float]:
    """numpy.histogram's checks of ``bins`` and ``range``, and its outer edges."""
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, (int, np.integer)):
        raise TypeError(f"bins must be an int (equal-width bins), not {bins!r}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    if range is None:
        raise TypeError("range=(low, high) is required (scangen does not scan the data for "
                        "its minimum and maximum)")
    try:
        low, high = (float(v) for v in range)
    except (TypeError, ValueError):
        raise TypeError(f"range must be a pair of numbers (low, high), not {range!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"range=({low}, {high}) must be finite")
    if low > high:
        raise ValueError(f"range=({low}, {high}): the low end is past the high end")
    if low == high:  # as numpy: a bin of width one around the value
        low, high = low - 0.5, high + 0.5
    return low, high


def bin_edges(bins, range, edge_dtype) -> tuple[float, float, np.ndarray]:
    """``(low, high, edges)`` as numpy.histogram makes them, with its checks: the edges must
    rise strictly (too many bins for a narrow float32 range do not)."""
    low, high = outer_edges(bins, range)
    edges = np.linspace(low, high, int(bins) + 1, dtype=edge_dtype)
    if np.any(edges[:-1] >= edges[1:]):
        raise ValueError(f"too many bins for the range: {bins} bins over ({low}, {high}) "
                         f"do not have distinct {np.dtype(edge_dtype)} edges")
    return low, high, edges


def fast_path_margin(edges, low: float, high: float) -> float:
    """How far (in bins) from its bin's edges a value's computed position must lie for the
    kernel to take the bin from the position alone (clear_bin in histogram.cu.j2, arithmetic in
    the edges' type); 1.0 (the edges lie too far from their ideal places for the position to
    be a guess within one bin, or there are too many bins) leaves the kernel numpy's own
    arithmetic. It bounds how far the actual edges lie from their ideal places (float32
    edges are rounded, linspace rounds too) and the rounding of ``(v - low) * scale`` (low and
    scale rounded to the edges' type, then a subtraction and a product) and of the check
    itself, then doubles the sum."""
    bins = len(edges) - 1
    scale = bins / (high - low)
    ideal = low + np.arange(bins + 1) * ((high - low) / bins)
    misplaced = float(np.max(np.abs(edges.astype(np.float64) - ideal))) * scale
    epsilon = float(np.finfo(edges.dtype).eps)
    rounding = 4 * epsilon * (bins + 1 + max(abs(low), abs(high)) * scale)
    margin = 2 * (misplaced + rounding)
    return margin if margin < 0.25 and bins <= _FAST_PATH_BINS else 1.0


class Histogram(ModuleOwner):
    """Counts of equal-width bins, as numpy.histogram(x, bins, range).

    ``Histogram(dtype)(x, bins, range)`` -> ``(counts, edges)``: counts an int64 array of
    ``bins`` entries, of x's kind (GPUArray, CuPy, torch), edges the ``bins + 1`` edges (a
    numpy array: float32 for float32 data, else float64, as numpy's for a range of Python
    numbers; range values are taken as Python floats). Every value lands in the bin numpy
    puts it in (the kernel bins by its own arithmetic only where that provably agrees);
    the last bin includes ``range[1]``; values outside the range and NaN are not counted.
    Dtypes: the integers, float32, float64.
    """

    def __init__(self, dtype):
        dtype = as_dtype(dtype)
        if dtype not in KEY_DTYPES:
            raise TypeError(f"histogram takes a dtype of "
                            f"{', '.join(str(k) for k in KEY_DTYPES)}, not {dtype}")
        self.module = HistogramModule(dtype)
        self._edges = None  # the last call's bins: see _bins
        self._runtime = ModuleRuntime()
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._edges = None

    def __repr__(self):
        return f"Histogram({self.module.dtype.name})"

    def plan(self, n, bins=10) -> ModulePlan:
        """The launches that count ``n`` values into ``bins`` bins (no GPU needed); the
        range's values are the call's (``<low>`` ...). ``print()`` it to read it."""
        outer_edges(bins, (0, 1))  # bins' checks
        return _plan(self.module, as_count(n), int(bins))

    def _bins(self, bins, range):
        """``(low, high, edges on the host, on the device, margin)`` for these bins: the last
        call's when asked the same way in the same context (computing edges costs more than
        a small histogram, and checking the arguments again costs a small call a tenth of
        its time), else new. Kept with the object: freed while the kernel runs, the edges
        could be overwritten."""
        try:
            range = tuple(range)  # once: it may be an iterator
            asked = (type(bins), bins, range, context_key())
        except TypeError:  # not a pair of numbers: outer_edges says what is wrong
            asked = None
        if self._edges is None or asked is None or self._edges[0] != asked:
            low, high, edges = bin_edges(bins, range, self.module.edge_dtype)
            self._edges = (asked, low, high, edges, _gpuarray().to_gpu(edges),
                           fast_path_margin(edges, low, high))
        return self._edges[1:]

    def __call__(self, x, bins, range, *, stream=None):
        call = Call(stream, {"x": x})
        view = call.views["x"]
        check_array("x", view, self.module.dtype)
        low, high, edges, device_edges, margin = self._bins(bins, range)
        bins = len(edges) - 1
        counts, counts_view = call.empty((bins,), np.int64)
        self._runtime.run(_plan(self.module, view.size, bins),
                          {"x": view, "edges": device_edges, "counts": counts_view},
                          call.stream, dict(low=low, high=high, span=high - low,
                                            scale_in_bins=bins / (high - low),
                                            margin_in_bins=margin))
        return call.returned(counts), edges.copy()


@functools.lru_cache(maxsize=32)
def _histogram(dtype):
    return Histogram(dtype)


def histogram(x, bins, range, *, stream=None):
    """``(counts, edges)`` of ``bins`` equal-width bins over ``range``: see Histogram.
    {arrays}"""
    hist = _histogram(dtype_of(x))
    return host_round_trip(lambda x: hist(x, bins, range, stream=stream), {"x": x}, stream)


histogram.__doc__ = histogram.__doc__.format(arrays=ONE_SHOT_ARRAYS)

command_line("histogram", lambda dtype, options: Histogram(dtype), scan_options=False,
             plan_takes=["bins"])
