"""Scans of Dask arrays: 1-D dask.arrays whose chunks are CuPy arrays (one GPU per worker
with dask-cuda) or host numpy arrays (each chunk copied to its worker's GPU and back).

The composition (Dask schedules it; scangen scans each chunk where it lives):

1. the total of each non-empty chunk (scangen.chunked.ChunkTotal);
2. one exclusive scan of those totals, in chunk order, with the operator itself: the carry
   of chunk k is t0 op ... op t(k-1), earlier totals on the left, so operators that are not
   commutative stay correct (a small task: one element per chunk);
3. the scan of each chunk with its carry combined first, in the same kernel
   (scangen.chunked.CarryScan). Chunks below auto's threshold
   (Tuning.auto_reduce_then_scan_min_bytes) are read twice in all and written once
   (single-pass kernels); larger ones four times, as `auto` scans them with reduce-then-scan,
   whose two passes each read the chunk (the total's second pass writes only one element).

The result is a dask.array with the input's chunks. Empty chunks contribute nothing and get
an empty result. ``backend=`` picks who computes: scangen.chunked.GPUBackend (the default) or
ReferenceBackend (numpy, for tests of this composition on machines without a GPU).

Dask is imported when a function here is called; install it with ``pip install
'scangen[dask]'``.
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from .chunked import GPUBackend, operator_of
from .primitives.histogram import outer_edges
from .runtime.gpu import require_pycuda
from .spec import as_int
from .usercode import identifiers

__all__ = ["inclusive_scan", "exclusive_scan", "select", "histogram", "gpu_cluster"]


def _dask_array():
    try:
        import dask.array
    except ImportError:
        raise ImportError("scangen.dask needs Dask: pip install 'scangen[dask]' (dask[array] "
                          "and distributed; dask-cuda for one worker per GPU)") from None
    return dask.array


def _checked(darr, backend, options):
    """darr as a 1-D dask.array with known chunk sizes, and the backend to use."""
    da = _dask_array()
    if not isinstance(darr, da.Array):
        raise TypeError(f"scangen.dask takes a dask.array.Array, not {type(darr).__name__}; "
                        "for one array on one GPU use scangen.inclusive_scan")
    if darr.ndim != 1:
        raise ValueError(f"scangen.dask scans 1-D arrays, got {darr.ndim}-D")
    if backend is None:
        return darr, GPUBackend(**options)
    if options:
        raise TypeError(f"scan options ({', '.join(options)}) go to GPUBackend(...); pass "
                        "them there when giving backend=")
    return darr, backend


def _total(chunk, backend, op):
    # An empty chunk has no total to give: it gets no slot in the totals (see _scan).
    return chunk[:0] if len(chunk) == 0 else backend.total(chunk, op)


def _scan_totals(totals, backend, op):
    return backend.scan(totals, op, "exclusive")


def _scan_chunk(chunk, carry, backend, op, mode):
    return chunk.copy() if len(chunk) == 0 else backend.scan(chunk, op, mode, carry)


def _scan(mode, darr, operator, identity, backend, options):
    darr, backend = _checked(darr, backend, options)
    sizes = darr.chunks[0]
    if any(math.isnan(size) for size in sizes):
        raise ValueError("the array has chunks of unknown size (after a select, say): call "
                         ".compute_chunk_sizes() first; the carries need each chunk's place")
    op = operator_of(operator, identity)
    op.check_dtype(darr.dtype)
    # One total per non-empty chunk: a chunk of the totals array is one element or none.
    one_each = (tuple(1 if size else 0 for size in sizes),)
    common = dict(dtype=darr.dtype, meta=darr._meta)
    totals = darr.map_blocks(_total, backend, op, chunks=one_each,
                             token="scangen-chunk-total", **common)
    carries = (totals.rechunk((sum(one_each[0]),))
               .map_blocks(_scan_totals, backend, op, token="scangen-carries", **common)
               .rechunk(one_each))
    # Chunk k with carry k, paired by block index: their lengths differ, so no alignment
    # (which would cut the chunks to the carries' sizes); the output has darr's chunks.
    return _dask_array().blockwise(_scan_chunk, "i", darr, "i", carries, "i", backend, None,
                                   op, None, mode, None, align_arrays=False,
                                   token=f"scangen-{mode}-scan", **common)


_DOC = """The {mode} scan of a 1-D dask.array ``darr`` with ``operator``: a dask.array with
    the same chunks (lazy: nothing runs before ``.compute()``/``.persist()``).

    Parameters
    ----------
    darr:
        A 1-D dask.array of known chunk sizes whose chunks are CuPy arrays (scanned on the
        GPU of the worker that holds them) or numpy arrays (copied to that GPU and back).
    operator, identity:
        As for scangen.{mode}_scan: a built-in name, a scangen.Operator, or a C expression
        in ``a`` (the earlier operand) and ``b`` with ``identity=``. Associative; it need
        not be commutative (chunk carries are combined on the left). Real scalar or struct
        types; floating-point results depend on the chunking in the last bits.
    backend:
        Who scans each chunk: scangen.chunked.GPUBackend() (the default) or
        scangen.chunked.ReferenceBackend() (numpy on the CPU: for tests).
    **options:
        algorithm, section_size, ... for every kernel, as for scangen.Scan (GPU backend).
    """


def inclusive_scan(darr, operator="add", *, identity=None, backend=None, **options):
    return _scan("inclusive", darr, operator, identity, backend, options)


def exclusive_scan(darr, operator="add", *, identity=None, backend=None, **options):
    return _scan("exclusive", darr, operator, identity, backend, options)


inclusive_scan.__doc__ = _DOC.format(mode="inclusive")
exclusive_scan.__doc__ = _DOC.format(mode="exclusive")


def _select(chunk, backend, predicate):
    return backend.select(chunk, predicate)


def select(darr, predicate, *, backend=None):
    """The elements of a 1-D dask.array for which ``predicate`` holds, in order: a dask.array
    with one chunk per input chunk, of sizes unknown until computed (``.compute_chunk_sizes()``
    finds them).

    ``predicate`` is a C expression in ``x`` for the GPU backend (as for scangen.select; the
    index ``i`` is refused: within a chunk it would not be the index in the array), or a
    numpy function of the chunk for ReferenceBackend.
    """
    darr, backend = _checked(darr, backend, {})
    if isinstance(predicate, str) and "i" in identifiers(predicate):
        raise ValueError("a predicate of scangen.dask.select sees x only: i would be the index "
                         "within a chunk, not within the array")
    unknown = ((np.nan,) * darr.numblocks[0],)
    return darr.map_blocks(_select, backend, predicate, chunks=unknown, dtype=darr.dtype,
                           meta=darr._meta, token="scangen-select")


def _chunk_counts(chunk, backend, bins, range):
    """One row of counts: the chunk's, as a (1, bins) array of its kind."""
    return backend.histogram(chunk, bins, range).reshape(1, bins)


def histogram(darr, bins, range, *, backend=None):
    """``(counts, edges)`` of ``bins`` equal-width bins over ``range`` for a 1-D dask.array,
    as numpy.histogram(darr, bins, range) gives them: ``counts`` a lazy int64 dask.array of
    ``bins`` entries (of the chunks' kind: CuPy for CuPy chunks), ``edges`` a numpy array.
    Each chunk is counted where it lives (scangen.histogram: a value lands in the bin numpy
    puts it in; values outside the range and NaN are not counted) and the rows of counts
    are summed. ``range`` is required: every chunk must bin alike, and numpy's default (the
    data's extremes) would need a pass over the array first (da.min and da.max give them).
    ``backend`` as for scangen.dask.inclusive_scan."""
    darr, backend = _checked(darr, backend, {})
    range = outer_edges(bins, range)  # numpy's checks; range=None is refused
    edges = np.histogram_bin_edges(np.empty(0, darr.dtype), bins, range)
    rows = darr.map_blocks(_chunk_counts, backend, bins, range, new_axis=1,
                           chunks=((1,) * darr.numblocks[0], (bins,)), dtype=np.int64,
                           meta=darr._meta.astype(np.int64).reshape(0, 0),
                           token="scangen-histogram")
    return rows.sum(axis=0, dtype=np.int64), edges


@contextlib.contextmanager
def gpu_cluster(gpus=None):
    """A local Dask cluster with one single-threaded worker process per GPU, and a
    distributed Client of it (``with scangen.dask.gpu_cluster(2) as client: ...``).

    dask-cuda's LocalCUDACluster where dask-cuda is installed; otherwise one distributed
    Nanny per GPU with CUDA_VISIBLE_DEVICES set to that GPU, so each worker sees its GPU as
    device 0, the one scangen runs on. ``gpus``: how many (default: every GPU this process
    sees); the workers take the first ``gpus`` of CUDA_VISIBLE_DEVICES where it is set.
    """
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("scangen.dask.gpu_cluster needs distributed: pip install "
                          "'scangen[dask]'") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpus is None:
        gpus = len(visible.split(",")) if visible else _device_count()
    gpus = as_int("gpus", gpus)
    if gpus < 1:
        raise ValueError(f"gpus={gpus}: give a positive number of GPUs")
    devices = visible.split(",")[:gpus] if visible else [str(i) for i in range(gpus)]
    if len(devices) < gpus:
        raise ValueError(f"gpus={gpus}, but CUDA_VISIBLE_DEVICES names {len(devices)}")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        from distributed import Nanny, Scheduler, SpecCluster

        # memory_limit: each worker's share of the host memory, as dask-cuda gives. Dask's
        # default for a one-thread worker is 1/cores of it, and Dask counts a CuPy chunk's
        # bytes against that limit: past it, it spills device chunks through the host to
        # disk (measured: a 2^31-element scan took 23 s instead of milliseconds).
        workers = {f"gpu-{device}": {"cls": Nanny, "options": {
            "nthreads": 1, "memory_limit": 1 / gpus,
            "env": {"CUDA_VISIBLE_DEVICES": device}}} for device in devices}
        cluster = SpecCluster(workers=workers, scheduler={
            "cls": Scheduler, "options": {"dashboard_address": None}})
    else:
        cluster = LocalCUDACluster(n_workers=gpus, CUDA_VISIBLE_DEVICES=devices)
    with cluster, Client(cluster) as client:
        yield client


def _device_count() -> int:
    driver = require_pycuda()
    driver.init()
    return driver.Device.count()
