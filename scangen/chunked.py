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

import numpy as np

from . import primitives
from .interop import Call, as_stream, host_round_trip, kind_of
from .kernel import ScanKernel
from .ops import resolve_operator
from .one_shot import _operator, exclusive_scan, inclusive_scan
from .reference import reference_scan
from .runtime.gpu_thread import on_gpu_thread
from .spec import check_mode
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


class CarryScan:
    """The scan of one chunk with its carry: ``carry_in`` is combined first, ``carry_out``
    receives ``carry_in op x0 op ... op x(n-1)`` (the carry of the next chunk). They must be
    two places: a strategy may read the input (carry_in with it) again after another block
    has written its outputs.

    Call it as ``scan(x, out, carry_in, carry_out=None, stream=None)`` with device arrays
    of one kind (or device addresses through ``launch``); x has at least one element.
    """

    def __init__(self, dtype, operator, mode="inclusive", **options):
        check_mode(mode)
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

    def __call__(self, x, out, carry_in, carry_out=None, *, stream=None):
        """Scan x into ``out`` (None: a new array of x's kind) and write the next carry to
        ``carry_out`` (None: not kept); returns out."""
        call = Call(stream, {"x": x, "out": out, "carry_in": carry_in, "carry_out": carry_out},
                    writes=("out", "carry_out"))
        views = call.views
        if out is None:
            out, views["out"] = call.empty(views["x"].shape, self.dtype)
        if carry_out is None:
            # The kernel writes it all the same; freed after the launch is queued, it goes
            # back to a pool of its stream (ours, CuPy's or torch's), so no later user of
            # the block runs before the kernel.
            views["carry_out"] = call.empty((1,), self.dtype)[1]
        self.launch([views[name].ptr for name in ("x", "out", "carry_in", "carry_out")],
                    views["x"].size, call.stream)
        return call.returned(out)


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
        return call.returned(total)


@functools.lru_cache(maxsize=64)
def _carry_scan(dtype, op, mode, options):
    return CarryScan(dtype, op, mode, **dict(options))


@functools.lru_cache(maxsize=64)
def _chunk_total(dtype, op, options):
    return ChunkTotal(dtype, op, **dict(options))


#: CUDA's per-thread default stream: a stream of the thread that names it.
_PER_THREAD_STREAM = 2


def _callers_stream(chunk):
    """The stream the calling thread orders work on ``chunk`` on (its library's current
    stream there: CuPy's and torch's are per thread), read in the calling thread; None for
    host chunks and the legacy default stream. The per-thread default stream would be the
    GPU thread's own over there: the legacy default stream, which waits for that stream's
    earlier work and is waited for by its later work, orders the call instead."""
    kind = kind_of(chunk)
    if kind is None:
        return None
    stream = as_stream(kind.default_stream(chunk), check_device=False)
    return None if stream is None or stream.handle == _PER_THREAD_STREAM else stream


def _packed(chunk):
    """The chunk in C order, packed in the calling thread on its current stream where it is
    a strided view (Dask's chunks of an N-D device array are; the kernels read packed arrays
    only). Host chunks are packed on their trip to the device."""
    kind = kind_of(chunk)
    return chunk if kind is None else kind.contiguous(chunk)


def _on_gpu(chunk, work):
    """``work(stream)`` on scangen's GPU thread (scangen.runtime.gpu_thread), ``stream``
    being the one the calling thread orders work on ``chunk`` on."""
    return on_gpu_thread(work, _callers_stream(chunk))


class GPUBackend:
    """Chunks scanned by scangen on the GPU: device chunks (CuPy, torch, GPUArray) in place
    on the device, on the stream current in the calling thread, and host numpy chunks copied
    there and back. ``options`` (algorithm, section_size, ...) go to every kernel, as for
    scangen.Scan.

    Every call runs on scangen's GPU thread, one per process (scangen.runtime.gpu_thread),
    whichever thread of a scheduler makes it: the device memory of a host chunk's trip is
    made, used and freed there, and one call at a time uses scangen's per-stream scratch
    (tile-status epochs, ticket bases are plain Python state). A host chunk's result is a
    numpy array and a device chunk's an array of its library (a GPUArray chunk's a GPUArray,
    whose memory is handed back to scangen's pool where it is dropped: in a thread with the
    context current, as for any GPUArray).
    """

    def __init__(self, **options):
        self.options = tuple(sorted(options.items()))

    def total(self, chunk, op, axis=0):
        """The chunk's total along ``axis``: an array of its kind, of its shape with one
        element along ``axis`` (a one-element array for a 1-D chunk)."""
        if chunk.ndim > 1:
            return last_along(self.scan(chunk, op, "inclusive", axis=axis), axis).copy()
        kernel = _chunk_total(np.dtype(chunk.dtype), op, self.options)
        return _on_gpu(chunk, lambda stream: host_round_trip(
            lambda x: kernel(x, stream=stream), {"x": chunk}, stream))

    def scan(self, chunk, op, mode, carry=None, axis=0):
        """The scan of the chunk along ``axis``, ``carry`` (an array of its kind, of its
        shape with one element along ``axis``: a total) combined first; None: no carry
        (the identity)."""
        check_mode(mode)
        if carry is None:
            one_shot = inclusive_scan if mode == "inclusive" else exclusive_scan
            chunk = _packed(chunk)
            return _on_gpu(chunk, lambda stream: one_shot(chunk, op, axis=axis, stream=stream,
                                                          **dict(self.options)))
        if chunk.ndim > 1:
            return scan_after_carry(self, chunk, op, mode, carry, axis)
        kernel = _carry_scan(np.dtype(chunk.dtype), op, mode, self.options)
        # No carry out: the next chunk's carry comes from the totals.
        return _on_gpu(chunk, lambda stream: host_round_trip(
            lambda x, carry: kernel(x, None, carry, stream=stream),
            {"x": chunk, "carry": carry}, stream))

    def select(self, chunk, predicate):
        """The elements of the chunk for which ``predicate`` (a C expression in x) holds."""
        return _on_gpu(chunk, lambda stream: primitives.select(chunk, predicate, stream=stream))

    def histogram(self, chunk, bins, range):
        """The chunk's counts in ``bins`` equal-width bins over ``range`` (scangen.histogram),
        as an int64 array of the chunk's kind."""
        return _on_gpu(chunk, lambda stream: primitives.histogram(chunk, bins, range,
                                                                  stream=stream)[0])

    def sort(self, keys, values=None):
        """The keys sorted stably (scangen.radix_sort: NaN last), or ``(keys, values)`` with
        the values carried along, as arrays of the keys' kind."""
        return _on_gpu(keys, lambda stream: primitives.radix_sort(keys, values, stream=stream))


def along(array, axis, part: slice):
    """``part`` of each line along ``axis``: a view of ``array``."""
    return array[(slice(None),) * axis + (part,)]


def last_along(array, axis):
    """The last element of each line along ``axis``: a view of ``array``'s shape with one
    element along ``axis``."""
    return along(array, axis, slice(-1, None))


def scan_after_carry(backend, chunk, op, mode, carry, axis):
    """The scan of ``chunk`` along ``axis`` with ``carry`` (its shape, one element along
    ``axis``) combined first, from a plain scan: the carry is one more element before the
    first of each line, so the inclusive scan of the two joined, less its first element
    (inclusive) or its last (exclusive), is the answer, for any associative operator. Joins
    and slices with the chunk's own library (np.concatenate hands CuPy arrays to CuPy)."""
    joined = np.concatenate([carry, chunk], axis=axis)
    scanned = backend.scan(joined, op, "inclusive", axis=axis)
    return along(scanned, axis, slice(1, None) if mode == "inclusive" else slice(None, -1)).copy()


class ReferenceBackend:
    """The same results on the CPU, from scangen.reference_scan (the operator's numpy twin,
    applied in operand order): for tests of the chunk and carry logic without a GPU."""

    def total(self, chunk, op, axis=0):
        if chunk.shape[axis] == 0:
            raise ValueError("the total of an empty chunk is the identity; chunked scans "
                             "skip empty chunks")
        return last_along(self.scan(chunk, op, "inclusive", axis=axis), axis).copy()

    def scan(self, chunk, op, mode, carry=None, axis=0):
        check_mode(mode)
        if carry is not None:
            return scan_after_carry(self, np.asarray(chunk), op, mode,
                                    np.asarray(carry, chunk.dtype), axis)
        lines = np.moveaxis(np.asarray(chunk), axis, -1)
        scanned = np.empty_like(lines)
        for index in np.ndindex(lines.shape[:-1]):
            scanned[index] = reference_scan(lines[index], op, mode)
        return np.ascontiguousarray(np.moveaxis(scanned, -1, axis))

    def select(self, chunk, predicate):
        """``predicate`` is a numpy function of the chunk here (the C one cannot run)."""
        return chunk[np.asarray(predicate(chunk), bool)]

    def histogram(self, chunk, bins, range):
        return np.histogram(chunk, bins, range)[0]

    def sort(self, keys, values=None):
        order = np.argsort(keys, kind="stable")
        return keys[order] if values is None else (keys[order], values[order])
