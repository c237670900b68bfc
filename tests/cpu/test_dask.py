"""scangen.dask without a GPU: the chunk / carry composition on local Dask schedulers with the
CPU reference backend, non-commutative operators, random chunkings with empty and
one-element chunks; and the two chunk kernels rendering (and compiling, with nvcc)."""
import contextlib
import gc
import importlib.util
import math
import threading
import types

import numpy as np
import pytest

import scangen
from scangen.chunked import CarryScan, ChunkTotal, ReferenceBackend
from tests.support import (AFFINE, assert_scan_equal, axis_reference, operator,
                           random_chunks, random_input, scan_reference, twin)
from tests.support import needs_nvcc

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
import scangen.dask as sd  # noqa: E402  (after the skip: it needs Dask to be useful)

#: (dtype, operator name): two non-commutative operators, and float addition.
CASES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "add")]


def _compute(array, scheduler):
    with dask.config.set(scheduler=scheduler):
        return array.compute()


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("dtype,op_name", CASES)
def test_chunked_scan_equals_whole_array_scan(rng, scheduler, mode, dtype, op_name):
    n = int(rng.integers(200, 3000))
    x = random_input(rng, dtype, op_name, n)
    chunks = random_chunks(rng, n)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    result = scan(da.from_array(x, chunks=(chunks,)), operator(op_name),
                  backend=ReferenceBackend())
    assert result.chunks == (chunks,) and result.dtype == x.dtype
    assert_scan_equal(_compute(result, scheduler), scan_reference(x, operator(op_name), mode),
                      dtype, n)


@pytest.mark.parametrize("mode", scangen.MODES)
def test_many_chunks_share_one_carries_task(rng, mode):
    """Past DIRECT_CARRIES_MAX_CHUNKS one task makes every carry: a non-commutative scan
    through it, empty chunks among the others."""
    chunks = [int(c) for c in rng.integers(0, 9, sd.DIRECT_CARRIES_MAX_CHUNKS + 7)]
    chunks[:3] = [0, 5, 0]
    x = random_input(rng, "uint64", "affine_then", sum(chunks))
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    got = _compute(scan(da.from_array(x, chunks=(tuple(chunks),)), AFFINE,
                        backend=ReferenceBackend()), "threads")
    np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))


@pytest.mark.parametrize("chunks", [(0,), (0, 0, 0), (1,), (1, 1, 1, 1, 1), (0, 5, 0)])
def test_edge_chunkings(rng, chunks):
    x = random_input(rng, "uint64", "affine_then", sum(chunks))
    for mode, scan in (("inclusive", sd.inclusive_scan), ("exclusive", sd.exclusive_scan)):
        got = _compute(scan(da.from_array(x, chunks=(chunks,)), AFFINE,
                            backend=ReferenceBackend()), "synchronous")
        np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("shape,axis", [((37, 50), 0), ((37, 50), -1), ((6, 41, 5), 1),
                                        ((6, 41, 5), 0), ((6, 41, 5), -1)])
def test_n_d_arrays_scan_along_any_axis(rng, scheduler, mode, shape, axis):
    """Every line along the axis scanned on its own across its chunks, by a
    non-commutative operator, with random chunks (empty ones among them) on every axis."""
    x = random_input(rng, "uint64", "affine_then", math.prod(shape)).reshape(shape)
    chunks = tuple(random_chunks(rng, size) for size in shape)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    result = scan(da.from_array(x, chunks=chunks), AFFINE, axis=axis,
                  backend=ReferenceBackend())
    assert result.chunks == chunks and result.dtype == x.dtype
    np.testing.assert_array_equal(_compute(result, scheduler),
                                  axis_reference(x, AFFINE, mode, axis))


@pytest.mark.parametrize("mode", scangen.MODES)
def test_many_chunks_along_an_axis_share_a_carries_task_per_line(rng, mode):
    """Past DIRECT_CARRIES_MAX_CHUNKS chunks along the axis, one task per line of chunks
    makes its carries: a non-commutative scan of a 2-D array through them."""
    along = [int(c) for c in rng.integers(0, 4, sd.DIRECT_CARRIES_MAX_CHUNKS + 5)]
    along[:3] = [0, 3, 0]
    chunks = ((4, 0, 7), tuple(along))
    x = random_input(rng, "uint64", "affine_then", 11 * sum(along)).reshape(11, sum(along))
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    result = scan(da.from_array(x, chunks=chunks), AFFINE, backend=ReferenceBackend())
    (optimized,) = dask.optimize(result)
    carries = [k for k in dict(optimized.__dask_graph__())
               if isinstance(k, tuple) and str(k[0]).startswith("scangen-carries-")]
    assert len(carries) == 3  # a task per line of chunks along the axis
    np.testing.assert_array_equal(_compute(result, "threads"),
                                  axis_reference(x, AFFINE, mode, 1))


def test_c_expression_operator_with_identity(rng):
    x = random_input(rng, "int32", "last_nonzero", 500)
    op = scangen.Operator("b != 0 ? b : a", 0, reference=lambda a, b: np.where(b != 0, b, a))
    got = _compute(sd.inclusive_scan(da.from_array(x, chunks=37), op,
                                     backend=ReferenceBackend()), "threads")
    np.testing.assert_array_equal(got, scan_reference(x, op, "inclusive"))
    with pytest.raises(ValueError, match="identity="):
        sd.inclusive_scan(da.from_array(x, chunks=37), "b != 0 ? b : a")


@pytest.mark.parametrize("mode", scangen.MODES)
def test_reference_backend_carry_is_scans_initial(rng, mode):
    """A carry means what Scan's initial= means: one more element before the first."""
    x = random_input(rng, "uint64", "affine_then", 50)
    carry = random_input(rng, "uint64", "affine_then", 1)
    combine = twin(AFFINE)
    # element by element: the carry first, then each x on the right of what came before
    inclusive, acc = [], carry
    for value in x:
        acc = combine(acc, value)
        inclusive.append(acc[0])
    want = inclusive if mode == "inclusive" else [carry[0]] + inclusive[:-1]
    np.testing.assert_array_equal(ReferenceBackend().scan(x, AFFINE, mode, carry),
                                  np.array(want, np.uint64))
    total = x[:1]
    for value in x[1:]:
        total = combine(total, value)
    np.testing.assert_array_equal(ReferenceBackend().total(x, AFFINE), total)


def test_select_keeps_order_across_chunks(rng):
    x = rng.normal(size=1000)
    chunks = random_chunks(rng, x.size)
    kept = sd.select(da.from_array(x, chunks=(chunks,)), lambda c: c > 0.3,
                     backend=ReferenceBackend())
    assert len(kept.chunks[0]) == len(chunks)
    np.testing.assert_array_equal(_compute(kept, "threads"), x[x > 0.3])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
def test_histogram_equals_numpys_across_chunks(rng, dtype):
    """Counts summed over chunks (empty ones among them) equal numpy.histogram of the whole
    array, values on the edges, outside the range and NaN included; edges are numpy's."""
    x = (rng.normal(size=2000) * 3).astype(dtype)
    x[:40] = np.linspace(-2, 2, 40).astype(dtype)  # on and near the edges
    if x.dtype.kind == "f":
        x[100:105] = np.nan
    chunks = random_chunks(rng, x.size)
    for bins, range in [(7, (-2, 2)), (1, (0, 1)), (50, (-1.5, 4.25)), (3, (1, 1))]:
        counts, edges = sd.histogram(da.from_array(x, chunks=(chunks,)), bins, range,
                                     backend=ReferenceBackend())
        want, want_edges = np.histogram(x, bins, range)
        got = _compute(counts, "threads")
        assert got.dtype == np.int64 and counts.chunks == ((bins,),)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(edges, want_edges)
        assert edges.dtype == want_edges.dtype


@pytest.mark.parametrize("blocks", [16, sd.ROWS_SUMMED_AT_ONCE + 1])
def test_histogram_sums_its_rows_of_counts_in_one_task(rng, blocks):
    """Up to ROWS_SUMMED_AT_ONCE chunks, one task sums every chunk's counts (no layer of
    partial sums); past it, a layer of partial sums, each of that many rows."""
    x = rng.normal(size=blocks * 50)
    counts, _ = sd.histogram(da.from_array(x, chunks=50), 9, (-2, 2),
                             backend=ReferenceBackend())
    (optimized,) = dask.optimize(counts)
    partial = [k for k in dict(optimized.__dask_graph__())
               if str(k[0] if isinstance(k, tuple) else k).startswith("sum-partial")]
    assert len(partial) == (0 if blocks <= sd.ROWS_SUMMED_AT_ONCE else 2)
    np.testing.assert_array_equal(counts.compute(), np.histogram(x, 9, (-2, 2))[0])


def test_histogram_refusals(rng):
    x = da.from_array(rng.normal(size=100), chunks=10)
    with pytest.raises(TypeError, match="range=.*required"):
        sd.histogram(x, 10, None)
    with pytest.raises(ValueError, match="at least 1"):
        sd.histogram(x, 0, (0, 1))
    with pytest.raises(TypeError, match="dask.array"):
        sd.histogram(np.arange(4), 10, (0, 1))


def sort_input(rng, dtype, n):
    """Keys with many ties (a handful of distinct values), and for floats NaN, -0.0 and
    +0.0 among them: what a stable sort must order exactly."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        keys = rng.integers(-3, 4, n).astype(dtype)
        keys[::53] = np.nan
        keys[1::31] = -0.0
        return keys
    return rng.integers(0, 7, n).astype(dtype)


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8"])
def test_sort_equals_numpys_stable_sort(rng, scheduler, dtype):
    """Keys, values carried along and argsort across random chunkings (empty and
    one-element chunks among them): numpy's stable sort exactly, ties in array order."""
    for n, chunks in [(3001, None), (12, (1,) * 12), (500, (500,)), (0, (0,))]:
        keys = sort_input(rng, dtype, n)
        chunks = chunks or random_chunks(rng, n)
        darr = da.from_array(keys, chunks=(chunks,))
        order = np.argsort(keys, kind="stable")
        got = _compute(sd.sort(darr, backend=ReferenceBackend()), scheduler)
        np.testing.assert_array_equal(got, keys[order])
        values = rng.normal(size=n)
        sorted_keys, carried = sd.sort(darr, da.from_array(values, chunks=max(1, n // 3)),
                                       backend=ReferenceBackend())
        np.testing.assert_array_equal(_compute(carried, scheduler), values[order])
        np.testing.assert_array_equal(_compute(sorted_keys, scheduler), keys[order])
        positions = _compute(sd.argsort(darr, backend=ReferenceBackend()), scheduler)
        assert positions.dtype == np.int64
        np.testing.assert_array_equal(positions, order)


def test_sort_partitions_are_balanced_for_distinct_keys(rng):
    """One partition per non-empty chunk, each within twice its even share."""
    keys = rng.permutation(40_000).astype(np.uint32)
    chunks = (0, 10_000, 5_000, 0, 15_000, 10_000)
    result = sd.sort(da.from_array(keys, chunks=(chunks,)), backend=ReferenceBackend())
    assert result.numblocks == (4,)
    sizes = result.compute_chunk_sizes().chunks[0]
    assert sum(sizes) == keys.size and max(sizes) <= 2 * keys.size / 4
    np.testing.assert_array_equal(result.compute(), np.sort(keys))


@pytest.mark.parametrize("partitions", [1, 3, 9])
def test_sort_into_a_number_of_partitions(rng, partitions):
    """partitions=: fewer or more output partitions than chunks, each within twice its
    even share for distinct keys; values and argsort the same way; ties in array order."""
    keys = rng.permutation(30_000).astype(np.uint32)
    chunks = (0, 10_000, 5_000, 0, 15_000)
    darr = da.from_array(keys, chunks=(chunks,))
    result = sd.sort(darr, partitions=partitions, backend=ReferenceBackend())
    assert result.numblocks == (partitions,)
    sizes = result.compute_chunk_sizes().chunks[0]
    assert sum(sizes) == keys.size and max(sizes) <= 2 * keys.size / partitions
    np.testing.assert_array_equal(result.compute(), np.sort(keys))
    ties = keys % 7  # many equal keys: a run never splits, so stability shows
    order = np.argsort(ties, kind="stable")
    tied = da.from_array(ties, chunks=(chunks,))
    got = sd.argsort(tied, partitions=partitions, backend=ReferenceBackend()).compute()
    np.testing.assert_array_equal(got, order)
    values = rng.normal(size=keys.size)
    _, carried = sd.sort(tied, da.from_array(values, chunks=7_000), partitions=partitions,
                         backend=ReferenceBackend())
    np.testing.assert_array_equal(carried.compute(), values[order])


def test_sort_refusals(rng):
    darr = da.from_array(rng.normal(size=100), chunks=10)
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        sd.sort(darr[darr > 0])
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        sd.argsort(darr[darr > 0])
    with pytest.raises(ValueError, match="keys' shape"):
        sd.sort(darr, da.ones(99, chunks=10), backend=ReferenceBackend())
    with pytest.raises(TypeError, match="dask.array"):
        sd.sort(np.arange(4))
    for bad, error in ((0, ValueError), (-2, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="partitions"):
            sd.sort(darr, partitions=bad, backend=ReferenceBackend())


def test_refusals(rng):
    x = da.from_array(random_input(rng, "int32", "last_nonzero", 100), chunks=10)
    with pytest.raises(TypeError, match="dask.array"):
        sd.inclusive_scan(np.arange(4))
    with pytest.raises(ValueError, match="got a 0-D array"):
        sd.inclusive_scan(da.from_array(np.int32(5)))
    with pytest.raises(ValueError, match="axis 2 is out of range for an array of 2 dim"):
        sd.inclusive_scan(x.reshape(10, 10), axis=2)
    with pytest.raises(ValueError, match="takes 1-D arrays, got a 2-D array"):
        sd.select(x.reshape(10, 10), "x > 0")
    with pytest.raises(TypeError, match="GPUBackend"):
        sd.inclusive_scan(x, backend=ReferenceBackend(), algorithm="brent_kung")
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        sd.inclusive_scan(x[x > 0])
    with pytest.raises(ValueError, match="index within a chunk"):
        sd.select(x, "x > 0 && i % 2 == 0")
    # a field named i, or i in a comment or a character, is no use of the index
    for predicate in ("x.i > 0", "p->i > 0 /* not i */", "x > 'i'"):
        sd.select(x, predicate)
    with pytest.raises(TypeError, match="bitwise"):
        sd.inclusive_scan(x.astype(np.float32), "bit_or")


@pytest.mark.parametrize("mode", scangen.MODES)
def test_chunk_kernels_combine_the_carry_first(mode):
    carry = CarryScan(np.uint64, AFFINE, mode)
    assert "combine(carry_in[0], x[0])" in carry.kernel.source
    assert "carry_out[0] = item" in carry.kernel.source
    assert "total[0] = item" in ChunkTotal(np.uint64, AFFINE).kernel.source


@needs_nvcc
def test_chunk_kernels_compile():
    for kernel in (CarryScan(np.uint64, AFFINE, "exclusive"), CarryScan(np.float32, "add"),
                   ChunkTotal(np.int32, scangen.LAST_NONZERO)):
        kernel.kernel.check_compile()


def _visible_devices():
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize("visible,gpus,expected_devices", [(None, 2, ["0", "1"]),
                                                           ("3,5,7", np.int64(2), ["3", "5"])])
def test_gpu_cluster_gives_each_worker_one_gpu(monkeypatch, rng, visible, gpus,
                                               expected_devices):
    """Without dask-cuda: one worker process per GPU, each seeing only its GPU; a chunked
    scan over them (reference backend, no GPU here) equals the whole-array scan."""
    pytest.importorskip("distributed")
    if importlib.util.find_spec("dask_cuda") is not None:
        pytest.skip("dask-cuda is installed: gpu_cluster is its LocalCUDACluster")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with sd.gpu_cluster(gpus) as client:
        seen = client.run(_visible_devices)
        assert sorted(seen.values()) == expected_devices
        # Each worker may hold its share of the host memory before Dask spills (the default,
        # 1/cores of it, would spill device chunks through the host to disk).
        from distributed.system import MEMORY_LIMIT

        share = MEMORY_LIMIT / len(expected_devices)
        for worker in client.scheduler_info()["workers"].values():
            assert worker["memory_limit"] == pytest.approx(share, abs=1)
        x = random_input(rng, "int32", "last_nonzero", 5000)
        got = sd.inclusive_scan(da.from_array(x, chunks=613), scangen.LAST_NONZERO,
                                backend=ReferenceBackend()).compute()
        np.testing.assert_array_equal(got, scan_reference(x, scangen.LAST_NONZERO))


@pytest.mark.parametrize("gpus,error,message", [(0, ValueError, "positive number of GPUs"),
                                                 (-1, ValueError, "positive number of GPUs"),
                                                 (1.5, TypeError, "gpus must be an int"),
                                                 (True, TypeError, "gpus must be an int"),
                                                 ("2", TypeError, "gpus must be an int")])
def test_gpu_cluster_refuses_a_bad_count(gpus, error, message):
    pytest.importorskip("distributed")
    with pytest.raises(error, match=message):
        with sd.gpu_cluster(gpus):
            pass


def test_gpu_cluster_refuses_more_than_visible(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES names 1"):
        with sd.gpu_cluster(2):
            pass


def test_chunk_kernels_are_found_again_for_a_pickled_operator():
    """Dask unpickles a task's operator and backend per task (cloudpickle, in the worker):
    the copies must find the kernels already built, or every chunk builds, compiles and
    loads its own (measured on two H200s: about 15 ms a chunk)."""
    cloudpickle = pytest.importorskip("cloudpickle")
    from scangen.chunked import GPUBackend, _carry_scan, _chunk_total, operator_of

    for name in ("add", "bit_xor", "last_nonzero"):
        op = operator_of(scangen.LAST_NONZERO if name == "last_nonzero" else name)
        backend = GPUBackend()
        op_copy, backend_copy = (cloudpickle.loads(cloudpickle.dumps(v)) for v in (op, backend))
        dtype = np.dtype(np.int32)
        assert _carry_scan(dtype, op_copy, "inclusive", backend_copy.options) is \
            _carry_scan(dtype, op, "inclusive", backend.options)
        assert _chunk_total(dtype, op_copy, backend_copy.options) is \
            _chunk_total(dtype, op, backend.options)


# --- the GPU backend's thread, on a fake device --------------------------------------------

class FakeGPUArray:
    """What host_round_trip's pycuda makes of a host chunk: a device array that records the
    thread it was made in and the one it was freed in (PyCUDA frees device memory only
    where its context is current or in the thread that made the context)."""

    def __init__(self, host, log):
        self.host, self.shape, self.dtype = np.array(host), np.shape(host), np.dtype(host.dtype)
        self.life = types.SimpleNamespace(made_in=threading.get_ident(), freed_in=None)
        log.append(self.life)

    def get(self):
        return self.host.copy()

    def __del__(self):
        self.life.freed_in = threading.get_ident()


class FakeGPU:
    """The GPU backend's kernels and host copies on numpy (scangen.chunked's kernel caches,
    one-shot scans and pycuda's gpuarray replaced), and the context calls of the GPU
    thread recorded: the calling thread's context (``self.contexts``, per thread) and what
    each call made current (``self.made_current``)."""

    def __init__(self, monkeypatch):
        from scangen import chunked, interop
        from scangen.runtime import contexts, gpu as runtime_gpu

        self.arrays, self.calls, self.made_current = [], [], []  # arrays: their lives
        self.contexts, self.fail = {}, False
        gpu = self

        def device(host):
            return FakeGPUArray(host, gpu.arrays)

        monkeypatch.setattr(runtime_gpu, "gpuarray", lambda: types.SimpleNamespace(
            GPUArray=FakeGPUArray, to_gpu=device,
            empty=lambda shape, dtype: device(np.empty(shape, dtype))))

        def total(dtype, op, options):
            def run(x, stream=None):
                gpu.record("total", stream)
                return device(ReferenceBackend().total(x.host, op))
            return run

        def carry_scan(dtype, op, mode, options):
            def run(x, out, carry, carry_out=None, stream=None):
                assert out is None and carry_out is None
                gpu.record("scan", stream)
                return device(ReferenceBackend().scan(x.host, op, mode, carry.host))
            return run

        def one_shot(mode):
            def run(x, op, stream=None, axis=-1):
                return interop.host_round_trip(
                    lambda x: gpu.record("scan", stream) or
                    device(ReferenceBackend().scan(x.host, op, mode, axis=axis % len(x.shape))),
                    {"x": x}, stream)
            return run

        monkeypatch.setattr(chunked, "_chunk_total", total)
        monkeypatch.setattr(chunked, "_carry_scan", carry_scan)
        monkeypatch.setattr(chunked, "inclusive_scan", one_shot("inclusive"))
        monkeypatch.setattr(chunked, "exclusive_scan", one_shot("exclusive"))
        monkeypatch.setattr(contexts, "context_of_this_thread",
                            lambda: gpu.contexts.get(threading.get_ident()))

        @contextlib.contextmanager
        def made_current(context):
            gpu.made_current.append((threading.get_ident(), context))
            yield context

        monkeypatch.setattr(contexts, "made_current", made_current)

    def record(self, what, stream):
        if self.fail:
            raise RuntimeError("the kernel failed")
        self.calls.append((what, threading.get_ident(), stream))

    def threads(self):
        """The threads the device arrays were made in and freed in."""
        gc.collect()
        return {a.made_in for a in self.arrays} | {a.freed_in for a in self.arrays}


@pytest.fixture
def fake_gpu(monkeypatch):
    return FakeGPU(monkeypatch)


def _compute_with(result, scheduler):
    if scheduler != "distributed":
        return _compute(result, scheduler)
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=3,
                            dashboard_address=None) as client:
        return client.compute(result).result()


@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "distributed"])
def test_gpu_backend_runs_every_call_on_one_thread_of_its_own(fake_gpu, rng, scheduler):
    """Whichever thread of a scheduler runs a task (Dask's pool, distributed's workers, the
    main thread), the GPU backend's device memory is made, used and freed on scangen's GPU
    thread, never the task's: pycuda could not free it in a thread that did not make the
    context (a warning, and a leak) and ends the process where no context is current."""
    from scangen.runtime import gpu_thread

    main = threading.get_ident()
    fake_gpu.contexts[main] = "the main thread's context"
    n = 3000
    x = random_input(rng, "uint64", "affine_then", n)
    chunks = random_chunks(rng, n, most=700)
    results = [scan(da.from_array(x, chunks=(chunks,)), AFFINE) for scan in
               (sd.inclusive_scan, sd.exclusive_scan)]
    for result, mode in zip(results, ("inclusive", "exclusive")):
        np.testing.assert_array_equal(_compute_with(result, scheduler),
                                      scan_reference(x, AFFINE, mode))
    gpu = gpu_thread._thread_ident
    assert gpu != main
    # per scan: a total of each non-empty chunk but the last (whose total no carry needs),
    # a scan of each, and a fold of the totals before it for each that has more than one
    full = [bool(c) for c in chunks]
    folds = sum(1 for k, f in enumerate(full) if f and sum(full[:k]) > 1)
    calls = sum(full[:-1]) + sum(full) + folds
    assert len(fake_gpu.calls) == 2 * calls
    assert {thread for _, thread, _ in fake_gpu.calls} == {gpu}
    assert fake_gpu.threads() == {gpu} and fake_gpu.arrays
    # each call in the context of the thread that asked: the main thread's own where it
    # asked (the synchronous scheduler), else none (the GPU thread's: device 0's primary)
    asked = {context for _, context in fake_gpu.made_current}
    assert asked == ({"the main thread's context"} if scheduler == "synchronous" else {None})
    assert {thread for thread, _ in fake_gpu.made_current} == {gpu}


@pytest.mark.parametrize("mode", scangen.MODES)
def test_gpu_backend_scans_n_d_chunks_along_an_axis(fake_gpu, rng, mode):
    """The GPU backend's N-D path (a total as the last slice of a scan along the axis, a
    scan after a carry as the scan of the two joined), its kernels faked, on host chunks:
    each line along the axis on its own, by a non-commutative operator."""
    shape, axis = (5, 300, 3), 1
    x = random_input(rng, "uint64", "affine_then", math.prod(shape)).reshape(shape)
    chunks = tuple(random_chunks(rng, size) for size in shape)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    got = _compute(scan(da.from_array(x, chunks=chunks), AFFINE, axis=axis), "threads")
    np.testing.assert_array_equal(got, axis_reference(x, AFFINE, mode, axis))
    assert fake_gpu.calls  # through the faked kernels


def test_a_failed_call_frees_its_device_memory_on_the_gpu_thread(fake_gpu, rng):
    """An exception goes back to the calling thread with the locals of its frames on the
    GPU thread cleared: its traceback would otherwise carry the chunk's device copy to the
    caller, to be freed wherever the traceback is dropped."""
    from scangen.chunked import GPUBackend
    from scangen.runtime import gpu_thread

    fake_gpu.fail = True
    x = random_input(rng, "int32", "last_nonzero", 100)
    with pytest.raises(RuntimeError, match="the kernel failed") as caught:
        GPUBackend().total(x, scangen.LAST_NONZERO)
    assert caught.value.__traceback__ is not None  # still there to read
    assert all(a.freed_in == gpu_thread._thread_ident for a in fake_gpu.arrays) and \
        fake_gpu.arrays


def test_a_call_from_the_gpu_thread_runs_there_at_once(fake_gpu):
    from scangen.runtime.gpu_thread import on_gpu_thread

    seen = []

    def nested():
        seen.append(on_gpu_thread(threading.get_ident))  # would wait for itself if queued

    asker = threading.Thread(target=on_gpu_thread, args=(nested,), daemon=True)
    asker.start()
    asker.join(timeout=30)
    assert not asker.is_alive(), "a call from the GPU thread waited for itself"
    assert seen and seen[0] != threading.get_ident()


def test_device_chunks_go_on_the_callers_stream(fake_gpu, monkeypatch):
    """A device chunk's work is queued on the stream its library has current in the thread
    that asks (CuPy's and torch's are per thread), read there: the GPU thread's would be
    another. The per-thread default stream is each thread's own: the legacy default
    stream, which it waits for and is waited for by, orders the work instead."""
    from scangen import chunked

    class Chunk:
        dtype = np.dtype(np.int32)

    class Kind:
        def default_stream(self, value):
            return handles[threading.get_ident()]

    monkeypatch.setattr(chunked, "kind_of", lambda value: Kind())
    handles = {}
    for handle, expected in ((0x5000, 0x5000), (1, None), (2, None)):
        handles[threading.get_ident()] = handle
        stream = chunked._on_gpu(Chunk(), lambda stream: stream)
        assert (None if stream is None else stream.handle) == expected


@pytest.mark.parametrize("blocks", [10, sd.DIRECT_CARRIES_MAX_CHUNKS,
                                    sd.DIRECT_CARRIES_MAX_CHUNKS + 1])
def test_a_scan_is_two_tasks_a_chunk_and_makes_each_chunk_once(blocks):
    """A total per chunk but the last (no carry needs its total) and a scan per chunk that
    folds the totals before it; past DIRECT_CARRIES_MAX_CHUNKS, every chunk's total and one
    more task that makes every carry. The work that made the input chunks runs once each
    (fused into the scans and the totals alike, it would run twice)."""
    made = []

    def make(block, block_id=None):
        made.append(block_id[0])
        return np.arange(len(block), dtype=np.float64) + block_id[0]

    x = da.empty(100 * blocks, chunks=100, dtype=np.float64).map_blocks(make, dtype=np.float64)
    y = sd.inclusive_scan(x, "add", backend=ReferenceBackend())
    (optimized,) = dask.optimize(y)
    scangen_tasks = [k for k in dict(optimized.__dask_graph__())
                     if str(k[0] if isinstance(k, tuple) else k).startswith("scangen-")]
    carries_task = blocks > sd.DIRECT_CARRIES_MAX_CHUNKS
    assert len(scangen_tasks) == 2 * blocks + (1 if carries_task else -1)
    got = y.compute(scheduler="sync")
    assert sorted(made) == list(range(blocks))
    np.testing.assert_array_equal(got, np.cumsum(np.concatenate(
        [np.arange(100, dtype=np.float64) + k for k in range(blocks)])))


@pytest.mark.parametrize("function", ["argsort", "sort", "histogram"])
def test_sorts_and_histograms_make_each_input_chunk_once(function):
    """An input computed on the fly (not persisted): argsort reads its chunks twice (the
    keys and their lengths for the positions), and each chunk is still made once."""
    made = []

    def make(block, block_id=None):
        made.append(block_id[0])
        return (np.arange(len(block)) * 7919 % 1000 + block_id[0]).astype(np.float64)

    x = da.empty(10_000, chunks=1000, dtype=np.float64).map_blocks(make, dtype=np.float64)
    whole = np.concatenate([(np.arange(1000) * 7919 % 1000 + k).astype(np.float64)
                            for k in range(10)])
    if function == "histogram":
        counts, _ = sd.histogram(x, 10, (0, 1010), backend=ReferenceBackend())
        got, want = counts.compute(scheduler="sync"), np.histogram(whole, 10, (0, 1010))[0]
    else:
        got = getattr(sd, function)(x, backend=ReferenceBackend()).compute(scheduler="sync")
        want = getattr(np, function)(whole, kind="stable")
    np.testing.assert_array_equal(got, want)
    assert sorted(made) == list(range(10))


def test_a_cluster_of_worker_processes_talking_tcp(rng):
    """Worker processes that talk TCP, as separate hosts would: the scans in both layouts
    of tasks (a non-commutative operator), a sort into partitions, a histogram and a select
    computed there equal the references (the backend, operator and tasks travel pickled)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  protocol="tcp", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        backend = ReferenceBackend()
        for blocks in (9, sd.DIRECT_CARRIES_MAX_CHUNKS + 3):
            x = random_input(rng, "uint64", "affine_then", blocks * 40)
            got = client.compute(sd.exclusive_scan(da.from_array(x, chunks=40), AFFINE,
                                                   backend=backend)).result()
            np.testing.assert_array_equal(got, scan_reference(x, AFFINE, "exclusive"))
        keys = rng.integers(0, 50, 6000).astype(np.int64)
        darr = da.from_array(keys, chunks=700)
        got = client.compute(sd.argsort(darr, partitions=3, backend=backend)).result()
        np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))
        counts, _ = sd.histogram(darr, 7, (0, 50), backend=backend)
        np.testing.assert_array_equal(client.compute(counts).result(),
                                      np.histogram(keys, 7, (0, 50))[0])
        kept = client.compute(sd.select(darr, lambda c: c % 3 == 0, backend=backend))
        np.testing.assert_array_equal(kept.result(), keys[keys % 3 == 0])
