"""The Scan object: validate and render once, compile once per context, launch many times."""
from __future__ import annotations

import functools

import numpy as np

from .compile import GPUUnavailableError, ScanCompileError, compile_spec, require_pycuda
from .plan import BufferArg, Plan, make_plan
from .render import render
from .spec import make_spec

__all__ = ["Scan", "GPUUnavailableError", "ScanCompileError"]

#: Temporaries start on this byte boundary inside their shared allocation.
_TEMP_ALIGNMENT = 256


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
        brent_kung, coarsened or warp_shuffle.
    section_size:
        Elements per block, a power of two.
    items_per_thread:
        Coarsening factor of the ``coarsened`` algorithm (others fix their own).
    strategy:
        How sections are stitched together over the whole array ("hierarchical").

    Floating-point results depend on evaluation order and so differ in the last bits between
    algorithms and section sizes; they are not bit-reproducible against a sequential sum.
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", algorithm="warp_shuffle",
                 section_size=1024, items_per_thread=None, strategy="hierarchical"):
        self.spec = make_spec(dtype, operator, mode=mode, algorithm=algorithm,
                              section_size=section_size, items_per_thread=items_per_thread,
                              strategy=strategy)
        self._temporaries = {}  # stream handle -> device allocation for the plan's temporaries

    def __repr__(self):
        s = self.spec
        return (f"Scan({s.etype.name}, {s.operator.name!r}, mode={s.mode!r}, "
                f"algorithm={s.algorithm!r}, section_size={s.section_size}, "
                f"items_per_thread={s.items_per_thread}, strategy={s.strategy!r})")

    @property
    def dtype(self) -> np.dtype:
        return self.spec.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA source of every kernel this scan launches."""
        return render(self.spec).text

    def plan(self, n: int) -> Plan:
        """The launches that scan ``n`` elements (no GPU needed)."""
        return _cached_plan(self.spec, n)

    def __call__(self, x, out=None, *, stream=None):
        """Scan ``x`` (a 1-D contiguous GPUArray) into ``out`` (new if None; may be ``x``)."""
        gpuarray = self._check_arrays(x, out)
        n = x.shape[0]
        if out is None:
            out = gpuarray.empty(n, self.dtype)
        if n == 0:
            return out
        plan = self.plan(n)
        kernels = compile_spec(self.spec).functions
        buffers = {"input": x.ptr, "output": out.ptr}
        buffers.update(self._bind_temporaries(plan, stream))
        for launch in plan.launches:
            args = [_bind(arg, buffers) for arg in launch.args]
            kernels[launch.kernel].prepared_async_call(
                (launch.grid, 1, 1), (launch.block, 1, 1), stream, *args)
        return out

    def _check_arrays(self, x, out):
        require_pycuda()
        from pycuda import gpuarray

        for name, array in (("x", x), ("out", out)):
            if array is None:
                continue
            if not isinstance(array, gpuarray.GPUArray):
                hint = " (copy it with pycuda.gpuarray.to_gpu)" if isinstance(array, np.ndarray) \
                    else ""
                raise TypeError(f"{name} must be a pycuda GPUArray, not "
                                f"{type(array).__name__}{hint}")
            if array.dtype != self.dtype:
                raise TypeError(f"{name} has dtype {array.dtype}, but this scan was built for "
                                f"{self.dtype}: build Scan({array.dtype.name!r}, ...) or convert "
                                f"with .astype()")
            if array.ndim != 1:
                raise ValueError(f"{name} must be 1-D, got shape {array.shape} "
                                 "(flatten it with .ravel() if that is what you mean)")
            if not array.flags.forc:
                raise ValueError(f"{name} must be contiguous (a strided view is not)")
        if out is not None and out is not x:
            if out.shape != x.shape:
                raise ValueError(f"out has shape {out.shape}, but x has shape {x.shape}")
            if x.size and _overlaps(x, out):
                raise ValueError("out overlaps x without being x; pass out=x to scan in place")
        return gpuarray

    def _bind_temporaries(self, plan: Plan, stream) -> dict:
        """Addresses of the plan's temporaries, in one allocation per stream.

        Calls on one stream run in order, so they can share scratch; calls on different
        streams may run at once, so each stream gets its own.
        """
        if not plan.temporaries:
            return {}
        offsets, total = {}, 0
        for temp in plan.temporaries:
            offsets[temp.name] = total
            total += -(-temp.elements * self.spec.etype.itemsize // _TEMP_ALIGNMENT) \
                * _TEMP_ALIGNMENT
        key = 0 if stream is None else stream.handle
        allocation = self._temporaries.get(key)
        if allocation is None or allocation[1] < total:
            driver = require_pycuda()
            allocation = (driver.mem_alloc(total), total)
            self._temporaries[key] = allocation
        base = int(allocation[0])
        return {name: base + offset for name, offset in offsets.items()}


def _bind(arg, buffers):
    if isinstance(arg, BufferArg):
        return buffers[arg.name]
    if arg is None:
        return np.uintp(0)
    return np.int64(arg)


def _overlaps(a, b) -> bool:
    a_start, b_start = a.ptr, b.ptr
    return a_start < b_start + b.nbytes and b_start < a_start + a.nbytes


@functools.lru_cache(maxsize=1024)
def _cached_plan(spec, n):
    return make_plan(spec, n)
