"""Scan: the plain scan ``out[i] = x0 op ... op xi``, a thin client of ScanKernel."""
from __future__ import annotations

import numpy as np

from .compile import GPUUnavailableError, ScanCompileError
from .kernel import ScanKernel
from .runtime.launcher import _gpuarray
from .spec import MODES

__all__ = ["Scan", "GPUUnavailableError", "ScanCompileError"]

#: What Scan's output statement writes, per mode.
_OUTPUT = {"inclusive": "out[i] = item;", "exclusive": "out[i] = prev_item;"}


class Scan:
    """A reusable scan of 1-D device arrays.

    Parameters
    ----------
    dtype:
        Element type (int8 .. uint64, float32, float64).
    operator:
        A built-in name (add, mul, min, max, bit_and, bit_or, bit_xor) or a scangen.Operator.
        Must be associative; it need not be commutative (operand order is kept).
    mode:
        "inclusive" (y[i] = x0 op ... op xi) or "exclusive" (y[i] = identity op x0 op ... op x(i-1)).
    algorithm:
        How one block scans its section: naive, kogge_stone, kogge_stone_double_buffered,
        brent_kung, coarsened or warp_shuffle (the default, the fast one).
    section_size:
        Elements per block, a power of two. Default: tuned per element size for
        warp_shuffle (scangen.tuning), 1024 for the other algorithms.
    items_per_thread:
        Coarsening factor of ``coarsened`` and ``warp_shuffle`` (the others fix their own).
    strategy:
        How sections are stitched together over the whole array: "hierarchical",
        "reduce_then_scan", "chained", "decoupled_lookback", or "auto" (the default: one
        launch when n fits a section, then decoupled look-back, and reduce_then_scan from
        ``tuning.auto_reduce_then_scan_min_bytes`` of input on).
    tuning:
        A scangen.tuning.Tuning (default: the measured scangen.tuning.DEFAULT_TUNING); part
        of the compile cache key.

    Scan is ScanKernel with input ``x[i]`` and output ``out[i] = item`` (inclusive) or
    ``out[i] = prev_item`` (exclusive); ``scan.kernel`` is that ScanKernel.

    Floating-point results depend on evaluation order and so differ in the last bits between
    algorithms and section sizes; they are not bit-reproducible against a sequential sum.
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", algorithm=None,
                 section_size=None, items_per_thread=None, strategy="auto", tuning=None):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use 'inclusive' or 'exclusive'")
        self.mode = mode
        self.kernel = ScanKernel(dtype, operator, arguments="const scan_t *x, scan_t *out",
                                 input_expr="x[i]", output_statement=_OUTPUT[mode],
                                 algorithm=algorithm, section_size=section_size,
                                 items_per_thread=items_per_thread, strategy=strategy,
                                 tuning=tuning, title=f"{mode} scan")
        self.spec = self.kernel.spec

    def __repr__(self):
        s = self.spec
        return (f"Scan({s.etype.name}, {s.operator.name!r}, mode={self.mode!r}, "
                f"algorithm={s.algorithm!r}, section_size={s.section_size}, "
                f"items_per_thread={s.items_per_thread}, strategy={s.strategy!r})")

    @property
    def dtype(self) -> np.dtype:
        return self.spec.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA source of every kernel this scan may launch (no GPU needed)."""
        return self.kernel.source

    def plan(self, n):
        """The launches that scan ``n`` elements (no GPU needed); ``print()`` it to read it."""
        return self.kernel.plan(n)

    def check_compile(self) -> None:
        """Compile with the nvcc on PATH, without a GPU; a C error in the operator raises
        ScanCompileError with the numbered source around it."""
        self.kernel.check_compile()

    def __call__(self, x, out=None, *, stream=None):
        """Scan ``x`` (a 1-D contiguous GPUArray) into ``out`` (new if None; may be ``x``)."""
        gpuarray = self._check_arrays(x, out)
        n = x.shape[0]
        if out is None:
            out = gpuarray.empty(n, self.dtype)
        if n == 0:
            return out
        self.kernel.launch_converted((np.uintp(x.ptr), np.uintp(out.ptr)), n, stream)
        return out

    def _check_arrays(self, x, out):
        gpuarray = _gpuarray()
        for name, array in (("x", x), ("out", out)):
            if array is None:
                continue
            if not isinstance(array, gpuarray.GPUArray):
                hint = " (copy it with pycuda.gpuarray.to_gpu)" if isinstance(array, np.ndarray) \
                    else ""
                raise TypeError(f"{name} must be a pycuda GPUArray, not "
                                f"{type(array).__name__}{hint}")
            if array.dtype != self.dtype and name == "out":
                raise TypeError(f"out has dtype {array.dtype}, but this scan writes "
                                f"{self.dtype}: pass an out of dtype {self.dtype} (or none, "
                                f"and get a new array)")
            if array.dtype != self.dtype:
                raise TypeError(f"x has dtype {array.dtype}, but this scan was built for "
                                f"{self.dtype}: build Scan({array.dtype.name!r}, ...) or convert "
                                f"with .astype()")
            if len(array.shape) != 1:
                raise ValueError(f"{name} must be 1-D, got shape {array.shape} "
                                 "(flatten it with .ravel() if that is what you mean)")
            if array.strides[0] != array.dtype.itemsize and array.shape[0] > 1:
                raise ValueError(f"{name} must be contiguous (a strided view is not)")
        if out is not None and out is not x:
            if out.shape != x.shape:
                raise ValueError(f"out has shape {out.shape}, but x has shape {x.shape}")
            if x.size and _overlaps(x, out):
                raise ValueError("out overlaps x without being x; pass out=x to scan in place")
        return gpuarray


def _overlaps(a, b) -> bool:
    a_start, b_start = a.ptr, b.ptr
    return a_start < b_start + b.nbytes and b_start < a_start + a.nbytes
