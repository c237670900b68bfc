"""Equal-width histograms with numpy.histogram's semantics (bins, range; the last bin closed
on the right; values outside the range and NaN not counted)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..args import Argument, c_parameters
from ..compile import release_at_exit
from ..interop import ONE_SHOT_ARRAYS, Call, dtype_of, host_round_trip
from ..runtime.launcher import _gpuarray, check_array, launch_function
from ..runtime.streams import memset_d8_async
from ..strategies.base import ceil_div
from ..types import element_type
from .radix import KEY_DTYPES

_BLOCK_SIZE = 256
_SHARED_BINS = 8192
#: Blocks launched at most: each walks the input with a grid stride, so its shared counts
#: are added to the global ones once per block, not once per tile.
_MAX_BLOCKS = 2048

_PARAMETERS = (
    Argument("x", "histogram_value_t", pointer=True, const=True),
    Argument("edges", "edge_t", pointer=True, const=True),
    Argument("counts", "long long", pointer=True),
    Argument("n", "long long"), Argument("bins", "int"), Argument("low", "double"),
    Argument("high", "double"), Argument("span", "double"))


@dataclass(frozen=True)
class HistogramModule:
    """The histogram kernel for one value dtype: a module spec for scangen.compile."""

    dtype: np.dtype

    @property
    def edge_dtype(self) -> np.dtype:
        """numpy's bin type for a range of Python numbers: float32 for float32 data, else
        float64."""
        return np.dtype(np.float32 if self.dtype == np.float32 else np.float64)

    def entry_points(self):
        return (("histogram_counts", _PARAMETERS),)

    def module_source(self):
        return _render(self)

    @property
    def description(self) -> str:
        return f"histogram of {self.dtype}"

    def context(self) -> dict:
        return dict(dtype=str(self.dtype), c_type=element_type(self.dtype).c_name,
                    edge_c=element_type(self.edge_dtype).c_name,
                    block_size=_BLOCK_SIZE, shared_bins=_SHARED_BINS,
                    parameters=c_parameters(_PARAMETERS))


@functools.lru_cache(maxsize=32)
def _render(module: HistogramModule):
    from ..render import ModuleSource, render_template

    return ModuleSource(render_template("histogram.cu.j2", module.context(),
                                        module.description), ("histogram_counts",))


def outer_edges(bins, range) -> tuple[float, float]:
    """numpy.histogram's checks of ``bins`` and ``range``, and its outer edges."""
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, (int, np.integer)):
        raise TypeError(f"bins must be an int (equal-width bins), not {bins!r}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    if range is None:
        raise TypeError("range=(low, high) is required (scangen does not scan the data for "
                        "its minimum and maximum)")
    low, high = (float(v) for v in range)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"range=({low}, {high}) must be finite")
    if low > high:
        raise ValueError(f"range=({low}, {high}): the low end is past the high end")
    if low == high:  # as numpy: a bin of width one around the value
        low, high = low - 0.5, high + 0.5
    return low, high


class Histogram:
    """Counts of equal-width bins, as numpy.histogram(x, bins, range).

    ``Histogram(dtype)(x, bins, range)`` -> ``(counts, edges)``: counts an int64 array of
    ``bins`` entries, of x's kind (GPUArray, CuPy, torch), edges the ``bins + 1`` edges (a
    numpy array: float32 for float32 data, else float64, as numpy's for a range of Python
    numbers; range values are taken as Python floats). The arithmetic is numpy's, so every
    value lands in the bin numpy puts it in; the last bin includes ``range[1]``; values
    outside the range and NaN are not counted. Dtypes: the integers, float32, float64.
    """

    def __init__(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in KEY_DTYPES:
            raise TypeError(f"histogram takes {', '.join(str(k) for k in KEY_DTYPES)}, "
                            f"not {dtype}")
        self.module = HistogramModule(dtype)
        self._edges = None  # the last call's edges: (on the host, on the device)
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._edges = None

    @property
    def source(self) -> str:
        return self.module.module_source().text

    def check_compile(self) -> None:
        from ..compile import check_with_nvcc

        check_with_nvcc(self.module)

    def __call__(self, x, bins, range, *, stream=None):
        call = Call(stream, {"x": x})
        view = call.views["x"]
        check_array("x", view, self.module.dtype)
        low, high = outer_edges(bins, range)
        edges = np.linspace(low, high, int(bins) + 1, dtype=self.module.edge_dtype)
        counts, counts_view = call.empty((len(edges) - 1,), np.int64)
        memset_d8_async(counts_view.ptr, 0, counts_view.nbytes, call.stream)
        n = view.size
        if n == 0:
            return counts, edges
        from ..compile import compile_module

        # Kept with the object (freed while the kernel runs, the edges could be overwritten),
        # beside their host copy, so a call with the same bins reads nothing back.
        if self._edges is None or not np.array_equal(self._edges[0], edges):
            self._edges = (edges.copy(), _gpuarray().to_gpu(edges))
        blocks = min(ceil_div(n, _BLOCK_SIZE), _MAX_BLOCKS)
        launch_function(compile_module(self.module), "histogram_counts", call.stream)(
            (blocks, 1, 1), (_BLOCK_SIZE, 1, 1), call.stream, view.ptr,
            self._edges[1].ptr, counts_view.ptr, np.int64(n),
            np.int32(len(edges) - 1), np.float64(low), np.float64(high),
            np.float64(high - low))
        return counts, edges


@functools.lru_cache(maxsize=32)
def _histogram(dtype):
    return Histogram(dtype)


def histogram(x, bins, range, *, stream=None):
    """``(counts, edges)`` of ``bins`` equal-width bins over ``range``: see Histogram.
    {arrays}"""
    hist = _histogram(dtype_of(x))
    return host_round_trip(lambda x: hist(x, bins, range, stream=stream), {"x": x}, stream)


histogram.__doc__ = histogram.__doc__.format(arrays=ONE_SHOT_ARRAYS)
