"""What a scan in chunks needs, whoever schedules the chunks (scangen.dask, scangen.out_of_core).

A scan of chunks c0, c1, ... is the scan of each chunk with a carry combined first: the carry
of chunk k is the total of every earlier chunk, t0 op t1 op ... op t(k-1), always on the
LEFT (the earlier operand), so operators that are not commutative stay correct. Two kernels
do the device work, both ScanKernel clients:

* :class:`CarryScan` scans a chunk with its carry read from device memory (a one-element
  array) and writes the next carry there, so chunk after chunk on one stream needs no trip
  to the host for the carry (each element is written once, and read once in a single pass,
  twice where `auto` takes reduce-then-scan, from scangen.tuning's threshold).
* :class:`ChunkTotal` reduces a chunk to its total (writes one element; reads the chunk as
  CarryScan does): the first pass of a reduce-then-scan over chunks that live apart (Dask
  blocks).

Backends give the same two operations (plus the plain scan of the chunk totals) for a
scheduler to call: :class:`GPUBackend` runs these kernels; :class:`ReferenceBackend` computes
the same on the CPU with the operator's numpy twin, so the chunk and carry logic is tested
without a GPU.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from .interop import Call, host_round_trip
from .kernel import ScanKernel
from .ops import resolve_operator
from .one_shot import _operator, exclusive_scan, inclusive_scan
from .reference import reference_scan
from .spec import MODES
from .types import element_type

__all__ = ["CarryScan", "ChunkTotal", "GPUBackend", "ReferenceBackend", "operator_of",
           "identity_of"]


def operator_of(operator, identity=None):
    """The scangen.Operator for a built-in name, an Operator, or a C expression with
    ``identity=`` (as the one-shot functions take them)."""
    return resolve_operator(_operator(operator, identity))


def identity_of(op, dtype):
    """The operator's identity as a numpy scalar of ``dtype``."""
    etype = element_type(dtype)
    return etype.numpy_value(op.identity_for(etype))


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use 'inclusive' or 'exclusive'")


class CarryScan:
    """The scan of one chunk with its carry: ``carry_in`` is combined first, ``carry_out``
    receives ``carry_in op x0 op ... op x(n-1)`` (the carry of the next chunk). They must be
    two places: a strategy may read the input (carry_in with it) again after another block
    has written its outputs.

    Call it as ``scan(x, out, carry_in, carry_out, n=len(x), stream=None)`` with device
    arrays of one kind (or device addresses through ``launch``); ``n`` must be at least 1.
    """

    def __init__(self, dtype, operator, mode="inclusive", **options):
        _check_mode(mode)
        # The carry is folded into x[0] (prev_item then carries it for every later index);
        # the exclusive output at 0 is the carry itself.
        output = {"inclusive": "out[i] = item;",
                  "exclusive": "out[i] = i == 0 ? carry_in[0] : prev_item;"}[mode]
        self.kernel = ScanKernel(
            dtype, operator, title=f"{mode} scan of a chunk with its carry",
            arguments="const scan_t *x, scan_t *out, const scan_t *carry_in, scan_t *carry_out",
            input_expr="i == 0 ? combine(carry_in[0], x[0]) : x[i]",
            output_statement=output + " if (i == n - 1) carry_out[0] = item;", **options)

    @property
    def dtype(self):
        return self.kernel.dtype

    def launch(self, pointers, n, stream):
        """Launch on device addresses ``(x, out, carry_in, carry_out)`` on a stream as
        scangen.interop.as_stream gives it."""
        self.kernel.launch_converted(tuple(int(p) for p in pointers), n, stream)

    def __call__(self, x, out, carry_in, carry_out, *, stream=None):
        call = Call(stream, {"x": x, "out": out, "carry_in": carry_in, "carry_out": carry_out},
                    writes=("out", "carry_out"))
        views = call.views
        self.launch([views[name].ptr for name in ("x", "out", "carry_in", "carry_out")],
                    views["x"].size, call.stream)
        return out


class ChunkTotal:
    """The total ``x0 op ... op x(n-1)`` of a chunk of at least one element, written to a
    one-element array: the scan machinery runs over the chunk and only the last index
    writes."""

    def __init__(self, dtype, operator, **options):
        self.kernel = ScanKernel(dtype, operator, title="total of a chunk",
                                 arguments="const scan_t *x, scan_t *total", input_expr="x[i]",
                                 output_statement="if (i == n - 1) total[0] = item;", **options)

    def __call__(self, x, *, stream=None):
        """A new one-element array of x's kind holding the total of x."""
        call = Call(stream, {"x": x})
        x_view = call.views["x"]
        if x_view.size == 0:
            raise ValueError("the total of an empty chunk is the identity; chunked scans "
                             "skip empty chunks")
        total, total_view = call.empty((1,), self.kernel.dtype)
        self.kernel.launch_converted((x_view.ptr, total_view.ptr),
                                     x_view.size, call.stream)
        return total


#: One GPU backend call at a time per process. Dask's threaded scheduler calls from several
#: threads, and scangen's per-stream scratch (tile-status epochs, ticket bases) is plain
#: Python state: two threads on one stream could draw the same epoch. Device chunks only
#: queue kernels under it, so it costs little.
_GPU_LOCK = threading.Lock()


@functools.lru_cache(maxsize=64)
def _carry_scan(dtype, op, mode, options):
    return CarryScan(dtype, op, mode, **dict(options))


@functools.lru_cache(maxsize=64)
def _chunk_total(dtype, op, options):
    return ChunkTotal(dtype, op, **dict(options))


class GPUBackend:
    """Chunks scanned by scangen on the current GPU: device chunks (CuPy, torch, GPUArray)
    in place on the device, host numpy chunks copied there and back. ``options`` (algorithm,
    section_size, ...) go to every kernel, as for scangen.Scan."""

    def __init__(self, **options):
        self.options = tuple(sorted(options.items()))

    @staticmethod
    def _on_gpu(run, *args):
        """run(*args) under the process's GPU lock, with a CUDA context current: Dask calls
        from its own threads, where none is yet, and a host chunk's copy to the device
        comes before anything that would make one current."""
        from .compile import current_context

        with _GPU_LOCK:
            current_context()
            return run(*args)

    def total(self, chunk, op):
        """A one-element array (of the chunk's kind) holding the chunk's total."""
        kernel = _chunk_total(np.dtype(chunk.dtype), op, self.options)
        return self._on_gpu(host_round_trip, kernel, {"x": chunk}, None)

    def scan(self, chunk, op, mode, carry=None):
        """The scan of the chunk, ``carry`` (a one-element array of its kind) combined
        first; None: no carry (the identity)."""
        _check_mode(mode)
        if carry is None:
            one_shot = inclusive_scan if mode == "inclusive" else exclusive_scan
            return self._on_gpu(lambda: one_shot(chunk, op, **dict(self.options)))
        kernel = _carry_scan(np.dtype(chunk.dtype), op, mode, self.options)

        def run(x, carry):
            call = Call(None, {"x": x})
            out = call.empty(x.shape, kernel.dtype)[0]
            # carry_out is not needed here: the next chunk's carry comes from the totals.
            return kernel(x, out, carry, call.empty((1,), kernel.dtype)[0])

        return self._on_gpu(host_round_trip, run, {"x": chunk, "carry": carry}, None)

    def select(self, chunk, predicate):
        """The elements of the chunk for which ``predicate`` (a C expression in x) holds."""
        from .primitives import select

        return self._on_gpu(select, chunk, predicate)


class ReferenceBackend:
    """The same results on the CPU, from scangen.reference_scan (the operator's numpy twin,
    applied in operand order): for tests of the chunk and carry logic without a GPU."""

    def total(self, chunk, op):
        if len(chunk) == 0:
            raise ValueError("the total of an empty chunk is the identity; chunked scans "
                             "skip empty chunks")
        return reference_scan(chunk, op)[-1:]

    def scan(self, chunk, op, mode, carry=None):
        _check_mode(mode)
        if carry is None:
            return reference_scan(chunk, op, mode)
        # The carry is one more element before the first.
        full = reference_scan(np.concatenate([np.asarray(carry, chunk.dtype), chunk]), op)
        return full[1:] if mode == "inclusive" else full[:-1]

    def select(self, chunk, predicate):
        """``predicate`` is a numpy function of the chunk here (the C one cannot run)."""
        return chunk[np.asarray(predicate(chunk), bool)]
