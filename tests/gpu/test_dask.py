"""scangen.dask on one GPU: CuPy chunks and numpy chunks, scanned by the GPU backend, equal to
the single-GPU scan (and the reference) with non-commutative operators; the chunk kernels
on their own; and where the host has two GPUs or more, a scan spread over two workers (one
per GPU) equal to the single-GPU one. The chunk / carry composition itself is tested on the
CPU (tests/cpu/test_dask.py); two GPUs are measured by benchmarks/dask_scan.py."""
import numpy as np
import pytest

import scangen
from scangen.chunked import CarryScan, ChunkTotal, GPUBackend
from tests.support import (AFFINE, assert_scan_equal, operator, random_chunks, random_input,
                           run_readme_block, scan_reference)
from tests.support import require_gpus, require_module

dask = require_module("dask")
da = require_module("dask.array")
import scangen.dask as sd  # noqa: E402

CASES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float32", "add")]


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("dtype,op_name", CASES)
def test_cupy_chunks_equal_the_single_gpu_scan(gpu, rng, scheduler, mode, dtype, op_name):
    cp = require_module("cupy")
    n = int(rng.integers(100_000, 3_000_000))
    x = random_input(rng, dtype, op_name, n)
    chunks = random_chunks(rng, n, most=n // 3)
    op = operator(op_name)
    darr = da.from_array(cp.asarray(x), chunks=(chunks,), asarray=False)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    result = scan(darr, op)
    assert result.chunks == (chunks,)
    with dask.config.set(scheduler=scheduler):
        got = result.compute()
    assert isinstance(got, cp.ndarray)
    one_gpu = getattr(scangen, f"{mode}_scan")(cp.asarray(x), op)
    if dtype == "float32":  # another association of the sums: close, not equal
        assert_scan_equal(cp.asnumpy(got), scan_reference(x, op, mode), dtype, n)
    else:
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(one_gpu))
        np.testing.assert_array_equal(cp.asnumpy(got), scan_reference(x, op, mode))


@pytest.mark.parametrize("mode", scangen.MODES)
def test_numpy_chunks_go_through_the_gpu(gpu, rng, mode):
    n = 200_001
    x = random_input(rng, "uint64", "affine_then", n)
    chunks = random_chunks(rng, n)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    got = scan(da.from_array(x, chunks=(chunks,)), AFFINE).compute(scheduler="threads")
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))


def test_select_on_cupy_chunks(gpu, rng):
    cp = require_module("cupy")
    x = rng.normal(size=500_000).astype(np.float32)
    darr = da.from_array(cp.asarray(x), chunks=(random_chunks(rng, x.size),), asarray=False)
    got = sd.select(darr, "x > 0.25f").compute(scheduler="synchronous")
    np.testing.assert_array_equal(cp.asnumpy(got), x[x > 0.25])


@pytest.mark.parametrize("mode", scangen.MODES)
def test_carry_scan_reads_and_writes_its_carry(gpu, rng, mode):
    n = 1_000_003
    x = random_input(rng, "uint64", "affine_then", n)
    carry = random_input(rng, "uint64", "affine_then", 1)
    kernel = CarryScan(np.uint64, AFFINE, mode)
    out, carry_out = gpu.empty(n, np.uint64), gpu.to_gpu(np.zeros(1, np.uint64))
    kernel(gpu.to_gpu(x), out, gpu.to_gpu(carry), carry_out)
    np.testing.assert_array_equal(out.get(), scan_reference(x, AFFINE, mode, initial=carry[0]))
    np.testing.assert_array_equal(carry_out.get(),
                                  scan_reference(x, AFFINE, initial=carry[0])[-1:])
    total = ChunkTotal(np.uint64, AFFINE)(gpu.to_gpu(x))
    np.testing.assert_array_equal(total.get(), scan_reference(x, AFFINE)[-1:])
    np.testing.assert_array_equal(GPUBackend().total(x, AFFINE), scan_reference(x, AFFINE)[-1:])


def test_readme_dask_block_runs(gpu):
    require_module("cupy")
    namespace = run_readme_block("scangen.dask.inclusive_scan", "More than one GPU (Dask)")
    values = namespace["values"]
    np.testing.assert_array_equal(namespace["y"].compute().get(),
                                  scan_reference(values, scangen.LAST_NONZERO, "inclusive"))
    assert namespace["kept"].compute().size == np.count_nonzero(values > 0)


def _make_chunk(block, block_id=None):
    """Chunk k of a test array, made on the worker's GPU (values 0..3, so last-non-zero
    carries reach across chunks)."""
    import cupy

    return cupy.random.default_rng(block_id[0]).integers(0, 4, len(block), dtype=np.int32)


def _device_of(block):
    """The worker's GPU by its full PCI address (domain:bus:device.function; the bus number
    alone can be the same for two GPUs of a virtual machine)."""
    import cupy

    return np.array([cupy.cuda.Device(0).pci_bus_id], dtype="U32")


@pytest.mark.parametrize("dtype,op_name", [("int32", "last_nonzero"), ("uint64", "affine_then")])
def test_two_gpus_equal_one(gpu, rng, dtype, op_name):
    """Chunks on two GPUs (one worker each, scangen.dask.gpu_cluster): the scan equals the
    single-GPU scan of the whole array, for operators that are not commutative."""
    require_gpus(2)
    cp = require_module("cupy")
    require_module("distributed")
    from distributed import wait

    n, chunk = 3_000_017, 250_000
    op = operator(op_name)
    with sd.gpu_cluster(2) as client:
        x = da.empty(n, chunks=chunk, dtype=np.uint8).map_blocks(
            _make_chunk, dtype=np.int32, meta=cp.empty(0, np.int32))
        if dtype != "int32":
            x = x.astype(dtype)
        x = client.persist(x)
        wait(x)
        gpus = set(x.map_blocks(_device_of, chunks=(1,), dtype="U32",
                                meta=np.empty(0, "U32")).compute().tolist())
        assert len(gpus) == 2, f"the chunks are not on two GPUs: {gpus}"
        got = sd.inclusive_scan(x, op).map_blocks(cp.asnumpy, meta=np.empty(0, dtype)).compute()
        host = x.map_blocks(cp.asnumpy, meta=np.empty(0, dtype)).compute()
    one_gpu = scangen.inclusive_scan(cp.asarray(host), op)
    np.testing.assert_array_equal(got, cp.asnumpy(one_gpu))
    np.testing.assert_array_equal(got, scan_reference(host, op))
