"""The Scan object: validate and render once, compile once per context, launch many times."""
from __future__ import annotations

import functools

import numpy as np

from .compile import (GPUUnavailableError, ScanCompileError, compile_spec, current_context,
                      require_pycuda)
from .plan import BufferArg, Plan, RuntimeArg, make_plan
from .render import render
from .spec import make_spec

__all__ = ["Scan", "GPUUnavailableError", "ScanCompileError"]

#: Bound launchers kept per Scan (one per distinct n, stream and context).
_MAX_LAUNCHERS = 256

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
        scangen.tuning.AUTO_REDUCE_THEN_SCAN_MIN_BYTES of input on).

    Floating-point results depend on evaluation order and so differ in the last bits between
    algorithms and section sizes; they are not bit-reproducible against a sequential sum.
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", algorithm=None,
                 section_size=None, items_per_thread=None, strategy="auto"):
        self.spec = make_spec(dtype, operator, mode=mode, algorithm=algorithm,
                              section_size=section_size, items_per_thread=items_per_thread,
                              strategy=strategy)
        self._scratch = {}  # (stream handle, context handle) -> _StreamScratch
        self._launchers = {}  # (n, stream handle, context handle) -> _Launcher

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
        stream_key = 0 if stream is None else stream.handle
        context = current_context()
        key = (n, stream_key, context.handle)
        launcher = self._launchers.get(key)
        if launcher is None or launcher.stale():
            scratch = self._scratch.get((stream_key, context.handle))
            if scratch is None:
                scratch = _StreamScratch(self.spec.etype.itemsize)
                self._scratch[(stream_key, context.handle)] = scratch
            launcher = _Launcher(self.plan(n), compile_spec(self.spec).functions, scratch)
            if len(self._launchers) >= _MAX_LAUNCHERS:
                self._launchers.clear()  # many distinct sizes: rebinding is cheap enough
            self._launchers[key] = launcher
        launcher(x.ptr, out.ptr, stream)
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
            if array.dtype != self.dtype:
                raise TypeError(f"{name} has dtype {array.dtype}, but this scan was built for "
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


_gpuarray_module = None


def _gpuarray():
    """pycuda.gpuarray, imported once (per-call imports cost microseconds on small scans)."""
    global _gpuarray_module
    if _gpuarray_module is None:
        require_pycuda()
        from pycuda import gpuarray

        _gpuarray_module = gpuarray
    return _gpuarray_module


class _Launcher:
    """A plan bound to one context's kernels and one stream's scratch: per call, only the
    input and output addresses (and the single-pass ticket base and epoch) change."""

    def __init__(self, plan: Plan, kernels: dict, scratch: "_StreamScratch"):
        self.scratch = scratch
        self.generation = scratch.generation
        bindings = scratch.bind(plan)
        self.tiles = plan.single_pass_tiles
        self.steps = []
        for launch in plan.launches:
            args = [_bind(arg, bindings) for arg in launch.args]
            slots = {arg.name: i for i, arg in enumerate(launch.args)
                     if isinstance(arg, (BufferArg, RuntimeArg))
                     and arg.name in ("input", "output", "ticket_base", "epoch")}
            self.steps.append((kernels[launch.kernel].prepared_async_call,
                               (launch.grid, 1, 1), (launch.block, 1, 1), args, slots))

    def stale(self) -> bool:
        """True once the scratch was reallocated (a larger call on the same stream)."""
        return self.generation != self.scratch.generation

    def __call__(self, input_ptr: int, output_ptr: int, stream) -> None:
        per_call = {"input": input_ptr, "output": output_ptr}
        if self.tiles:
            ticket_base, epoch = self.scratch.next_single_pass_call(self.tiles, stream)
            per_call["ticket_base"] = np.uint64(ticket_base)
            per_call["epoch"] = np.uint32(epoch)
        for launch, grid, block, args, slots in self.steps:
            for name, index in slots.items():
                args[index] = per_call[name]
            launch(grid, block, stream, *args)


class _StreamScratch:
    """Device scratch of one Scan for calls on one stream.

    Calls on one stream run in order, so they can share scratch; calls on different streams
    may run at once, so each stream gets its own. Two parts:

    * per-call temporaries (section totals), overwritten by every call;
    * single-pass state kept between calls: a ticket counter and the tile status array.
      The status is tagged with a per-call epoch, so it needs no reset between calls; the
      ticket keeps counting, and each call is told where its tickets start.
    """

    #: Epochs use 30 bits of the status word; on wrap-around the status is cleared once.
    EPOCH_LIMIT = 1 << 30

    def __init__(self, itemsize: int):
        self.itemsize = itemsize
        self.word_bytes = 8 if itemsize <= 4 else 4  # packed word, or a flag beside values
        self.temporaries = None  # (allocation, nbytes)
        self.state = None  # (allocation, tile capacity)
        self.epoch = 0
        self.ticket_base = 0
        #: Bumped whenever an allocation is replaced, so launchers bound to it rebind.
        self.generation = 0

    def bind(self, plan: Plan) -> dict:
        """Addresses of the plan's temporaries, growing the allocations if needed."""
        driver = require_pycuda()
        bindings = {}
        per_call = [t for t in plan.temporaries if not t.persistent]
        if per_call:
            offsets, total = {}, 0
            for temp in per_call:
                offsets[temp.name] = total
                total += _aligned(temp.nbytes)
            if self.temporaries is None or self.temporaries[1] < total:
                self.temporaries = (driver.mem_alloc(total), total)
                self.generation += 1
            base = int(self.temporaries[0])
            bindings.update({name: base + offset for name, offset in offsets.items()})
        tiles = plan.single_pass_tiles
        if tiles:
            # Layout fixed by the capacity, not by n, so every call finds the ticket and
            # each tile's status where earlier calls left them.
            if self.state is None or self.state[1] < tiles:
                capacity = max(tiles, 2 * self.state[1] if self.state else 0)
                nbytes = self._state_bytes(capacity)
                allocation = driver.mem_alloc(nbytes)
                driver.memset_d8(allocation, 0, nbytes)
                self.state, self.epoch, self.ticket_base = (allocation, capacity), 0, 0
                self.generation += 1
            allocation, capacity = self.state
            base = int(allocation)
            bindings.update({
                "ticket": base,
                "status": base + _TEMP_ALIGNMENT,
                "status_values": base + _TEMP_ALIGNMENT + _aligned(capacity * self.word_bytes),
            })
        return bindings

    def next_single_pass_call(self, tiles: int, stream) -> tuple[int, int]:
        """(ticket base, epoch) for the next single-pass call of ``tiles`` tiles."""
        self.epoch += 1
        if self.epoch == self.EPOCH_LIMIT:
            allocation, capacity = self.state
            require_pycuda().memset_d8_async(int(allocation) + _TEMP_ALIGNMENT, 0,
                                             self._state_bytes(capacity) - _TEMP_ALIGNMENT,
                                             stream)
            self.epoch = 1
        ticket_base = self.ticket_base
        self.ticket_base += tiles
        return ticket_base, self.epoch

    def _state_bytes(self, capacity: int) -> int:
        values = 0 if self.itemsize <= 4 else 2 * capacity * self.itemsize
        return _TEMP_ALIGNMENT + _aligned(capacity * self.word_bytes) + values


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _TEMP_ALIGNMENT) * _TEMP_ALIGNMENT


def _bind(arg, bindings):
    if isinstance(arg, BufferArg):
        return bindings.get(arg.name)  # input and output are filled in per call
    if arg is None:
        return np.uintp(0)
    if isinstance(arg, RuntimeArg):
        return None  # filled in per call by _Launcher
    return np.int64(arg)


def _overlaps(a, b) -> bool:
    a_start, b_start = a.ptr, b.ptr
    return a_start < b_start + b.nbytes and b_start < a_start + a.nbytes


@functools.lru_cache(maxsize=1024)
def _cached_plan(spec, n):
    return make_plan(spec, n)
