"""Scans, select, histogram and sort of Dask arrays: dask.arrays whose chunks are CuPy
arrays (one GPU per worker with dask-cuda) or host numpy arrays (each chunk copied to its
worker's GPU and back); 1-D, or N-D for the scans, along any axis (each line of chunks along
it composed as below, every line on its own). The sort is a sample sort (see ``sort``); the
rest follows.

The composition (Dask schedules it; scangen scans each chunk where it lives):

1. the total of each non-empty chunk (scangen.chunked.ChunkTotal);
2. the carry of chunk k, t0 op ... op t(k-1), earlier totals on the left, so operators
   that are not commutative stay correct: up to DIRECT_CARRIES_MAX_CHUNKS chunks, each
   chunk's scan task takes the totals before it and folds them itself (two layers of
   tasks); past that, one small task scans every total into every carry (three layers);
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
import functools
import math
import os
import sys

import numpy as np

from .chunked import GPUBackend, along, last_along, operator_of
from .lines import normalized_axis
from .primitives.histogram import outer_edges
from .runtime.gpu import require_pycuda
from .spec import as_int
from .usercode import identifiers

__all__ = ["inclusive_scan", "exclusive_scan", "select", "histogram", "sort", "argsort",
           "gpu_cluster"]


def _dask_array():
    try:
        import dask.array
    except ImportError:
        raise ImportError("scangen.dask needs Dask: pip install 'scangen[dask]' (dask[array] "
                          "and distributed; dask-cuda for one worker per GPU)") from None
    return dask.array


def _checked(darr, backend, options, any_dimension=False):
    """darr as a dask.array (1-D unless ``any_dimension``), and the backend to use."""
    da = _dask_array()
    if not isinstance(darr, da.Array):
        raise TypeError(f"scangen.dask takes a dask.array.Array, not {type(darr).__name__}; "
                        "for one array on one GPU use scangen.inclusive_scan")
    if darr.ndim == 0 or (darr.ndim > 1 and not any_dimension):
        takes = "scans 1-D arrays or N-D ones along an axis" if any_dimension else \
            "takes 1-D arrays"
        raise ValueError(f"scangen.dask {takes}, got a {darr.ndim}-D array")
    if backend is None:
        return darr, GPUBackend(**options)
    if options:
        raise TypeError(f"scan options ({', '.join(options)}) go to GPUBackend(...); pass "
                        "them there when giving backend=")
    return darr, backend


def _chunk_sizes(darr, why: str, axis=0) -> tuple:
    """The chunk sizes of ``darr`` along ``axis``, or a ValueError where some are unknown
    (after a select, say), saying ``why`` they are needed."""
    if any(math.isnan(size) for sizes in darr.chunks for size in sizes):
        raise ValueError("the array has chunks of unknown size (after a select, say): call "
                         f".compute_chunk_sizes() first; {why}")
    return darr.chunks[axis]


def _at(index: tuple, axis: int, position: int) -> tuple:
    """A block index with its ``axis`` entry set to ``position``."""
    return index[:axis] + (position,) + index[axis + 1:]


def _total(chunk, backend, op, axis):
    # A chunk empty along the axis has no total to give (the identity is not assumed):
    # None, which the carries skip. One empty across it only has an empty total.
    if chunk.shape[axis] == 0:
        return None
    if chunk.size == 0:
        return last_along(chunk, axis).copy()
    return backend.total(chunk, op, axis=axis)


def _fold(totals, backend, op, axis, mode):
    """The scan (``mode``) of the totals of consecutive chunks (None: an empty chunk's,
    skipped) along ``axis``, earlier ones on the left; None where every one is None."""
    present = [total for total in totals if total is not None]
    if not present:
        return None
    # np.concatenate hands CuPy totals to CuPy (NEP 18)
    joined = present[0] if len(present) == 1 else np.concatenate(present, axis=axis)
    if joined.size == 0 or (len(present) == 1 and mode == "inclusive"):
        return joined
    return backend.scan(joined, op, mode, axis=axis)


def _carries(totals, backend, op, axis):
    """Each chunk's carry, in chunk order along ``axis`` (None for an empty chunk): one
    exclusive scan of the non-empty chunks' totals."""
    scanned = _fold(totals, backend, op, axis, "exclusive")
    carries, slot = [], 0
    for total in totals:
        carries.append(None if total is None else along(scanned, axis, slice(slot, slot + 1)))
        slot += total is not None
    return carries


def _scan_chunk(chunk, carries, position, backend, op, mode, axis):
    if chunk.size == 0:
        return chunk.copy()
    return backend.scan(chunk, op, mode, carries[position], axis=axis)


def _scan_after(chunk, *earlier, backend, op, mode, axis=0):
    """The scan of a chunk whose carry folds the totals of every chunk before it along
    ``axis`` (None for an empty one), earlier ones on the left."""
    if chunk.size == 0:
        return chunk.copy()
    folded = _fold(earlier, backend, op, axis, "inclusive")
    carry = None if folded is None else last_along(folded, axis)
    return backend.scan(chunk, op, mode, carry, axis=axis)


#: Chunks along the axis up to which each chunk's scan task takes the totals before it
#: itself and folds its own carry: 2K tasks in two layers, one round of scheduling fewer
#: than with a task that makes every carry (2K + 1 tasks in three layers; 16-36 ms less a
#: scan, median, on a local cluster of 16 chunks whose tasks did nothing;
#: docs/design/decisions.md). A scan task then has k totals as inputs, so past this many
#: chunks the graph's edges (K^2 / 2) would outgrow its tasks, and one task makes the
#: carries instead (one per line of chunks along the axis).
DIRECT_CARRIES_MAX_CHUNKS = 64


def _scan(mode, darr, operator, identity, backend, options, axis):
    darr, backend = _checked(darr, backend, options, any_dimension=True)
    axis = normalized_axis(darr.shape, axis)
    sizes = _chunk_sizes(darr, "the carries need each chunk's place", axis)
    op = operator_of(operator, identity)
    op.check_dtype(darr.dtype)
    # A total per chunk, then a scan per chunk. The totals are a blockwise layer, and the
    # scans either that or a layer of their own: so Dask sees two layers read each chunk,
    # and fuses the work that makes a chunk into neither (it would then run twice).
    one_each = darr.chunks[:axis] + (tuple(1 if size else 0 for size in sizes),) + \
        darr.chunks[axis + 1:]
    totals = darr.map_blocks(_total, backend, op, axis, chunks=one_each, dtype=darr.dtype,
                             meta=darr._meta, token="scangen-chunk-total")
    if len(sizes) <= DIRECT_CARRIES_MAX_CHUNKS:
        return _scans_folding_totals(darr, totals, backend, op, mode, axis)
    return _scans_after_carries_tasks(darr, totals, backend, op, mode, axis)


def _scans_folding_totals(darr, totals, backend, op, mode, axis):
    """A scan per chunk that takes the totals before it along the axis and folds its own
    carry (2K tasks for K chunks with the totals; the totals of the last chunks along the
    axis, which no task takes, are never computed)."""
    from dask.array import Array
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    name = f"scangen-{mode}-scan-{tokenize(darr.name, totals.name, mode, axis)}"
    # the backend, operator, mode and axis bound, so that no argument is read as a key
    scan = functools.partial(_scan_after, backend=backend, op=op, mode=mode, axis=axis)
    layer = {(name, *index): (scan, (darr.name, *index),
                              *[(totals.name, *_at(index, axis, j)) for j in range(index[axis])])
             for index in np.ndindex(darr.numblocks)}
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[darr, totals])
    return Array(graph, name, darr.chunks, dtype=darr.dtype, meta=darr._meta)


def _scans_after_carries_tasks(darr, totals, backend, op, mode, axis):
    """For each line of chunks along the axis, one task that scans their totals into their
    carries, and a scan per chunk that takes its own carry from that task's list (2K + 1
    tasks for K chunks in a line, with no splitting or joining of the totals in between)."""
    from dask.array import Array
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    token = tokenize(darr.name, totals.name, mode, axis)
    carries, name = f"scangen-carries-{token}", f"scangen-{mode}-scan-{token}"
    lines = darr.numblocks[:axis] + (1,) + darr.numblocks[axis + 1:]
    layer = {(carries, *line): (_carries, [(totals.name, *_at(line, axis, j))
                                           for j in range(darr.numblocks[axis])],
                                backend, op, axis)
             for line in np.ndindex(lines)}
    layer.update({(name, *index): (_scan_chunk, (darr.name, *index),
                                   (carries, *_at(index, axis, 0)), index[axis], backend, op,
                                   mode, axis)
                  for index in np.ndindex(darr.numblocks)})
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[darr, totals])
    return Array(graph, name, darr.chunks, dtype=darr.dtype, meta=darr._meta)


_DOC = """The {mode} scan of a dask.array ``darr`` along ``axis`` with ``operator``: a
    dask.array with the same chunks (lazy: nothing runs before ``.compute()``/``.persist()``).

    Parameters
    ----------
    darr:
        A dask.array of known chunk sizes whose chunks are CuPy arrays (scanned on the GPU
        of the worker that holds them) or numpy arrays (copied to that GPU and back).
    operator, identity:
        As for scangen.{mode}_scan: a built-in name, a scangen.Operator, or a C expression
        in ``a`` (the earlier operand) and ``b`` with ``identity=``. Associative; it need
        not be commutative (chunk carries are combined on the left). Real scalar or struct
        types; floating-point results depend on the chunking in the last bits.
    axis:
        The axis scanned (default: the last), every line along it on its own, as for
        scangen.{mode}_scan. 1-D chunks are scanned with their carry in one kernel; N-D
        chunks after a carry are scanned joined to it (a copy of the chunk more).
    backend:
        Who scans each chunk: scangen.chunked.GPUBackend() (the default) or
        scangen.chunked.ReferenceBackend() (numpy on the CPU: for tests).
    **options:
        algorithm, section_size, ... for every kernel, as for scangen.Scan (GPU backend).
    """


def inclusive_scan(darr, operator="add", *, axis=-1, identity=None, backend=None, **options):
    return _scan("inclusive", darr, operator, identity, backend, options, axis)


def exclusive_scan(darr, operator="add", *, axis=-1, identity=None, backend=None, **options):
    return _scan("exclusive", darr, operator, identity, backend, options, axis)


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
    return rows.sum(axis=0, dtype=np.int64, split_every=ROWS_SUMMED_AT_ONCE), edges


#: Rows of histogram counts one task sums: Dask's default (4) would make a tree of
#: partial sums with a layer, and a round of scheduling, for each factor of 4 in the chunks.
ROWS_SUMMED_AT_ONCE = 64


#: Samples of the keys drawn for each output partition of a sort: the splitters are every
#: SAMPLES_PER_PARTITION-th of them, so a partition of keys that repeat little holds close
#: to its even share (a run of equal keys never splits, and may make one partition larger).
SAMPLES_PER_PARTITION = 128


def _array_module(chunk):
    """numpy for a host chunk, CuPy for a CuPy chunk: the kinds scangen.dask takes."""
    if isinstance(chunk, np.ndarray):
        return np
    if type(chunk).__module__.partition(".")[0] == "cupy":
        return sys.modules["cupy"]
    raise TypeError(f"scangen.dask sorts chunks of numpy or CuPy arrays, not "
                    f"{type(chunk).__name__}")


def _on_host(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()


def _sorted(keys, values, backend):
    """``(keys, values)`` sorted stably by the keys (values None: keys alone)."""
    if len(keys) == 0:
        return keys, values
    if values is None:
        return backend.sort(keys), None
    return backend.sort(keys, values)


def _samples(chunk, count) -> np.ndarray:
    """``count`` keys of a sorted chunk at evenly spaced ranks (the middles of ``count``
    equal runs), on the host."""
    keys = chunk[0]
    ranks = (2 * np.arange(count, dtype=np.int64) + 1) * len(keys) // (2 * count) \
        if count else np.empty(0, np.int64)
    return _on_host(keys[_array_module(keys).asarray(ranks)])


def _splitters(samples, partitions) -> np.ndarray:
    """The ``partitions - 1`` keys that cut the pooled samples into equal shares (numpy's
    order: NaN last)."""
    pooled = np.sort(np.concatenate(samples))
    return pooled[np.arange(1, partitions) * len(pooled) // partitions]


def _piece(chunk, splitters, j):
    """Piece j of a sorted chunk, the part that goes to output partition j: its keys from
    splitter j - 1 (inclusive; the first piece from the start) to splitter j (exclusive;
    the last piece to the end), so equal keys stay in one piece and keep their order. Found
    by a search of the chunk's own library for the two bounds at once."""
    keys, values = chunk
    if len(splitters) == 0:  # one partition: the whole chunk
        return keys, values
    xp = _array_module(keys)
    bounds = splitters[max(0, j - 1):j + 1]
    found = _on_host(xp.searchsorted(keys, xp.asarray(bounds, keys.dtype), side="left"))
    low = 0 if j == 0 else int(found[0])
    high = len(keys) if j == len(splitters) else int(found[-1])
    return keys[low:high], None if values is None else values[low:high]


def _partition(pieces, backend):
    """An output partition: its pieces, in chunk order, sorted stably: equal keys keep the
    order of the chunks, then their order within each."""
    xp = _array_module(pieces[0][0])
    keys = xp.concatenate([keys for keys, _ in pieces])
    values = None if pieces[0][1] is None else xp.concatenate([v for _, v in pieces])
    return _sorted(keys, values, backend)


def _delayed_chunks(array) -> list:
    """The chunks of a 1-D dask.array as dask.delayed objects under their own keys: an
    optimized graph would rename them, and a chunk that another layer reads too (argsort's
    positions read the keys' chunks) would be made twice."""
    return array.to_delayed(optimize_graph=False).ravel().tolist()


def _sample_sort(darr, values, backend, partitions, options):
    """The output partitions of a sample sort of ``darr`` (values carried along): a list of
    ``partitions`` (None: one per non-empty chunk) dask.delayed ``(keys, values)``, in
    order. Each chunk is sorted where it lives; samples of them give splitters; piece j of
    each sorted chunk lies between splitters j - 1 and j; partition j gathers piece j of
    every chunk and sorts it. Only pieces move between workers."""
    import dask

    darr, backend = _checked(darr, backend, options)
    sizes = _chunk_sizes(darr, "the samples are drawn in proportion to the chunks")
    keys = _delayed_chunks(darr)
    if values is None:
        carried = [None] * len(keys)
    else:
        if values.shape != darr.shape:
            raise ValueError(f"values must have the keys' shape {darr.shape}, not "
                             f"{values.shape}")
        carried = _delayed_chunks(values.rechunk(darr.chunks))
    delayed = dask.delayed
    chunks = [delayed(_sorted)(k, v, backend) for k, v in zip(keys, carried)]
    if partitions is None:
        partitions = max(1, sum(1 for size in sizes if size))
    partitions = as_int("partitions", partitions)
    if partitions < 1:
        raise ValueError(f"partitions={partitions}: give a positive number of output "
                         "partitions")
    total = max(1, sum(sizes))
    counts = [min(size, -(-size * partitions * SAMPLES_PER_PARTITION // total))
              for size in sizes]
    splitters = delayed(_splitters)([delayed(_samples)(c, k) for c, k in zip(chunks, counts)],
                                    partitions)
    # each piece finds its own bounds: no layer of tasks that cut each chunk first
    return [delayed(_partition)([delayed(_piece)(chunk, splitters, j) for chunk in chunks],
                                backend)
            for j in range(partitions)]


def _gathered(parts, index, like):
    """One dask.array of every partition's ``index``-th result (lengths known on compute)."""
    da = _dask_array()
    return da.concatenate([da.from_delayed(part[index], (np.nan,), dtype=like.dtype,
                                           meta=like._meta) for part in parts])


def sort(darr, values=None, *, partitions=None, backend=None):
    """The keys of a 1-D dask.array sorted stably across its chunks, as
    ``numpy.sort(kind="stable")`` (NaN last), and ``values`` (a dask.array of the keys'
    shape) carried along: ``keys`` or ``(keys, values)``, lazy dask.arrays of
    ``partitions`` output partitions (default: one per non-empty input chunk), of sizes
    known once computed.

    A sample sort: each chunk is sorted where it lives (scangen.radix_sort on its GPU, for
    CuPy chunks and for numpy chunks copied there), splitters are drawn from samples of the
    sorted chunks, and output partition j gathers the keys between splitters j - 1 and j
    from every chunk and sorts them; equal keys never split, so the sort is stable. Keys:
    the dtypes of scangen.radix_sort. Each (chunk, partition) pair is a task of its own
    (the piece of the chunk that goes there): fewer partitions than chunks (a few per
    worker) make far fewer tasks, and larger partitions. ``backend`` as for
    scangen.dask.inclusive_scan.
    """
    parts = _sample_sort(darr, values, backend, partitions, {})
    keys = _gathered(parts, 0, darr)
    return keys if values is None else (keys, _gathered(parts, 1, values))


def argsort(darr, *, partitions=None, backend=None):
    """The int64 positions that sort a 1-D dask.array stably across its chunks, as
    ``numpy.argsort(kind="stable")`` (NaN last): a lazy dask.array (see sort, and its
    ``partitions``)."""
    darr, _ = _checked(darr, backend, {})
    sizes = _chunk_sizes(darr, "each position counts from its chunk's start")
    starts = tuple(int(start) for start in np.cumsum((0,) + sizes[:-1]))
    positions = darr.map_blocks(_chunk_positions, starts, dtype=np.int64,
                                meta=darr._meta.astype(np.int64), token="scangen-positions")
    return sort(darr, positions, partitions=partitions, backend=backend)[1]


def _chunk_positions(chunk, starts, block_info=None):
    """A chunk's positions in the whole array (int64, of its kind)."""
    start = starts[block_info[0]["chunk-location"][0]]
    return _array_module(chunk).arange(start, start + len(chunk), dtype=np.int64)


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
