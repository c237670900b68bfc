"""scangen.dask without a GPU: the chunk / carry composition on local Dask schedulers with the
CPU reference backend, non-commutative operators, random chunkings with empty and
one-element chunks; and the two chunk kernels rendering (and compiling, with nvcc)."""
import importlib.util

import numpy as np
import pytest

import scangen
from scangen.chunked import CarryScan, ChunkTotal, ReferenceBackend
from tests.support import (AFFINE, assert_scan_equal, operator, random_chunks, random_input,
                           scan_reference, twin)
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


@pytest.mark.parametrize("chunks", [(0,), (0, 0, 0), (1,), (1, 1, 1, 1, 1), (0, 5, 0)])
def test_edge_chunkings(rng, chunks):
    x = random_input(rng, "uint64", "affine_then", sum(chunks))
    for mode, scan in (("inclusive", sd.inclusive_scan), ("exclusive", sd.exclusive_scan)):
        got = _compute(scan(da.from_array(x, chunks=(chunks,)), AFFINE,
                            backend=ReferenceBackend()), "synchronous")
        np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))


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


def test_refusals(rng):
    x = da.from_array(random_input(rng, "int32", "last_nonzero", 100), chunks=10)
    with pytest.raises(TypeError, match="dask.array"):
        sd.inclusive_scan(np.arange(4))
    with pytest.raises(ValueError, match="1-D"):
        sd.inclusive_scan(x.reshape(10, 10))
    with pytest.raises(TypeError, match="GPUBackend"):
        sd.inclusive_scan(x, backend=ReferenceBackend(), algorithm="brent_kung")
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        sd.inclusive_scan(x[x > 0])
    with pytest.raises(ValueError, match="index within a chunk"):
        sd.select(x, "x > 0 && i % 2 == 0")
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
