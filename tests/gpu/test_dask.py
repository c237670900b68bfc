"""scangen.dask on one GPU: CuPy chunks and numpy chunks, scanned by the GPU backend, equal to
the single-GPU scan (and the reference) with non-commutative operators; the chunk kernels
on their own; and where the host has two GPUs or more, a scan spread over two workers (one
per GPU) equal to the single-GPU one. The chunk / carry composition itself is tested on the
CPU (tests/cpu/test_dask.py); two GPUs are measured by benchmarks/dask_scan.py."""
from pathlib import Path

import numpy as np
import pytest

import scangen
from scangen.chunked import CarryScan, ChunkTotal, GPUBackend
from tests.support import (AFFINE, assert_scan_equal, axis_reference, operator,
                           random_chunks, random_input, run_docs_block, scan_reference)
from tests.support import require_gpus, require_module

dask = require_module("dask")
da = require_module("dask.array")
import scangen.dask as sd  # noqa: E402

CASES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float32", "add")]
ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("chunk_kind", ["cupy", "numpy"])
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("shape,axis", [((300, 700), 0), ((300, 700), 1), ((9, 5000, 7), 1),
                                        ((9, 500, 70), -1)])
def test_n_d_chunks_scan_along_an_axis(gpu, rng, chunk_kind, mode, shape, axis):
    """Every line along the axis on its own across CuPy or numpy chunks (random, empty ones
    among them, on every axis), by a non-commutative operator, against the tests' fold."""
    x = random_input(rng, "uint64", "affine_then", int(np.prod(shape))).reshape(shape)
    chunks = tuple(random_chunks(rng, size) for size in shape)
    if chunk_kind == "cupy":
        cp = require_module("cupy")
        darr = da.from_array(cp.asarray(x), chunks=chunks, asarray=False)
    else:
        darr = da.from_array(x, chunks=chunks)
    scan = sd.inclusive_scan if mode == "inclusive" else sd.exclusive_scan
    got = scan(darr, AFFINE, axis=axis).compute(scheduler="threads")
    got = got if isinstance(got, np.ndarray) else got.get()
    np.testing.assert_array_equal(got, axis_reference(x, AFFINE, mode, axis))


def test_select_on_cupy_chunks(gpu, rng):
    cp = require_module("cupy")
    x = rng.normal(size=500_000).astype(np.float32)
    darr = da.from_array(cp.asarray(x), chunks=(random_chunks(rng, x.size),), asarray=False)
    got = sd.select(darr, "x > 0.25f").compute(scheduler="synchronous")
    np.testing.assert_array_equal(cp.asnumpy(got), x[x > 0.25])


@pytest.mark.parametrize("chunk_kind", ["cupy", "numpy"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_histogram_on_device_and_host_chunks(gpu, rng, chunk_kind, dtype):
    """Each chunk counted where it lives (CuPy chunks on the device, numpy chunks through
    it), the counts summed: numpy.histogram of the whole array, counts of the chunks'
    kind."""
    cp = require_module("cupy")
    x = (rng.normal(size=300_001) * 40).astype(dtype)
    chunks = (random_chunks(rng, x.size),)
    darr = da.from_array(cp.asarray(x), chunks=chunks, asarray=False) \
        if chunk_kind == "cupy" else da.from_array(x, chunks=chunks)
    counts, edges = sd.histogram(darr, 33, (-50, 70.5))
    got = counts.compute(scheduler="threads")
    assert isinstance(got, cp.ndarray if chunk_kind == "cupy" else np.ndarray)
    want, want_edges = np.histogram(x, 33, (-50, 70.5))
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    np.testing.assert_array_equal(edges, want_edges)


@pytest.mark.parametrize("chunk_kind", ["cupy", "numpy"])
@pytest.mark.parametrize("dtype", ["uint32", "float32", "int64"])
def test_sort_and_argsort_on_device_and_host_chunks(gpu, rng, chunk_kind, dtype):
    """The sample sort with scangen.radix_sort per chunk and per partition: numpy's stable
    sort of the whole array, values carried along and argsort included, ties and (float32)
    NaN among the keys; results of the chunks' kind."""
    cp = require_module("cupy")
    n = 200_003
    keys = rng.integers(0, 1000, n).astype(dtype)
    if dtype == "float32":
        keys[::101] = np.nan
    values = rng.integers(0, 1 << 30, n).astype(np.int32)
    chunks = (random_chunks(rng, n),)

    def dask_array(host):
        return da.from_array(cp.asarray(host), chunks=chunks, asarray=False) \
            if chunk_kind == "cupy" else da.from_array(host, chunks=chunks)

    order = np.argsort(keys, kind="stable")
    got_keys, got_values = sd.sort(dask_array(keys), dask_array(values))
    got_keys, got_values = dask.compute(got_keys, got_values, scheduler="threads")
    assert isinstance(got_keys, cp.ndarray if chunk_kind == "cupy" else np.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got_keys), keys[order])
    np.testing.assert_array_equal(cp.asnumpy(got_values), values[order])
    positions = sd.argsort(dask_array(keys)).compute(scheduler="threads")
    np.testing.assert_array_equal(cp.asnumpy(positions), order)
    # into three partitions, whatever the chunks
    positions = sd.argsort(dask_array(keys), partitions=3).compute(scheduler="threads")
    np.testing.assert_array_equal(cp.asnumpy(positions), order)


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
    namespace = run_docs_block("scangen.dask.inclusive_scan", "More than one GPU (Dask)")
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


# --- every scheduler, in a fresh process each ---------------------------------------------

#: A program scanning a Dask array on one scheduler (argv: scheduler, chunk kind, what the
#: main thread did on the GPU before, the input .npz, the result .npy). A file, with its
#: work under ``__main__``: spawned worker processes import it again.
CHILD = '''
import sys

import numpy as np


def main(scheduler, chunk_kind, prior, data, result):
    if prior == "autoinit":
        import pycuda.autoinit  # noqa: F401  (a context of its own, current in this thread)
    import dask
    import dask.array as da

    import scangen
    import scangen.dask as sd

    if prior == "scangen":
        scangen.current_context()
        assert scangen.inclusive_scan(np.arange(5, dtype=np.int32)).tolist() == [0, 1, 3, 6, 10]
    saved = np.load(data)
    x, chunks = saved["x"], tuple(int(c) for c in saved["chunks"])
    darr = da.from_array(x, chunks=(chunks,))
    if chunk_kind == "cupy":
        import cupy

        # Made and brought back by tasks, in the scheduler's threads or processes: CuPy
        # arrays live in the context current where they are made.
        darr = darr.map_blocks(cupy.asarray, meta=cupy.empty(0, x.dtype))
    scans = [scan(darr, scangen.LAST_NONZERO) for scan in (sd.inclusive_scan, sd.exclusive_scan)]
    if chunk_kind == "cupy":
        scans = [s.map_blocks(cupy.asnumpy, meta=np.empty(0, x.dtype)) for s in scans]
    if scheduler.startswith("distributed"):
        from distributed import Client, LocalCluster

        processes = scheduler == "distributed"
        with LocalCluster(n_workers=2 if processes else 1, threads_per_worker=2,
                          processes=processes, dashboard_address=None) as cluster, \\
                Client(cluster):
            got = dask.compute(*scans)
    else:
        try:
            got = dask.compute(*scans, scheduler=scheduler)
        except RuntimeError as error:  # the refusal of a context switched behind PyCUDA
            if "pycuda.autoprimaryctx" not in str(error):
                raise
            np.save(result, np.array([]))
            return
    np.save(result, np.stack(got))


if __name__ == "__main__":
    main(*sys.argv[1:])
'''

SCHEDULERS = ["threads", "synchronous", "processes", "distributed", "distributed-in-process"]
#: What the main thread did on the GPU before the scan: nothing, a scangen scan, or
#: pycuda.autoinit (a context of its own, current in the main thread).
PRIOR_USE = ["none", "scangen", "autoinit"]
#: What a PyCUDA object freed in the wrong thread, or after its context was popped, says.
CONTEXT_ERRORS = ("terminate called", "out-of-thread", "could not be cleaned up",
                  "PyCUDA ERROR", "PyCUDA WARNING")


def _missing(chunks, scheduler):
    """The optional library a case needs and this machine lacks, or None."""
    import importlib.util

    for name, needed in (("cupy", chunks == "cupy"),
                         ("distributed", scheduler.startswith("distributed"))):
        if needed and importlib.util.find_spec(name) is None:
            return name
    return None


class Children:
    """The programs of every collected case of the scheduler matrix, run once: the first
    alone (it compiles the kernels into scangen's cubin cache, once), then the others a
    few at a time."""

    def __init__(self, request, folder):
        self.folder, self.results = folder, None
        self.cases = [tuple(item.callspec.params[k] for k in ("scheduler", "chunks", "prior"))
                      for item in request.session.items
                      if getattr(item, "originalname", "") == "test_every_scheduler_in_a_fresh_"
                                                            "process"]
        rng = np.random.default_rng(20260)
        n = 20_011
        self.x = random_input(rng, "int32", "last_nonzero", n)
        np.savez(folder / "input.npz", x=self.x, chunks=random_chunks(rng, n, most=4000))
        (folder / "child.py").write_text(CHILD)

    def _run(self, case):
        import subprocess
        import sys

        result = self.folder / ("-".join(case) + ".npy")
        done = subprocess.run([sys.executable, str(self.folder / "child.py"), *case,
                               str(self.folder / "input.npz"), str(result)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        return done, result

    def result(self, case):
        if self.results is None:
            from concurrent.futures import ThreadPoolExecutor

            runnable = [c for c in self.cases if _missing(c[1], c[0]) is None]
            self.results = {runnable[0]: self._run(runnable[0])}
            with ThreadPoolExecutor(6) as pool:
                self.results.update(zip(runnable[1:], pool.map(self._run, runnable[1:])))
        return self.results[case]


@pytest.fixture(scope="module")
def children(request, tmp_path_factory):
    return Children(request, tmp_path_factory.mktemp("schedulers"))


@pytest.mark.parametrize("prior", PRIOR_USE)
@pytest.mark.parametrize("chunks", ["numpy", "cupy"])
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_every_scheduler_in_a_fresh_process(gpu, children, scheduler, chunks, prior):
    """A scan of numpy or CuPy chunks on every Dask scheduler, in a process whose main
    thread used the GPU before or not: the right result (or, for CuPy chunks brought back
    in the thread pycuda.autoinit's context is PyCUDA's, a clear refusal), and an exit with
    no PyCUDA context error (device memory freed in a thread where its context is not
    current, or after the context was popped), in the program or its worker processes."""
    missing = _missing(chunks, scheduler)
    if missing:
        pytest.skip(f"{missing} is not installed")
    done, result = children.result((scheduler, chunks, prior))
    assert done.returncode == 0, done.stderr[-4000:]
    for error in CONTEXT_ERRORS:
        assert error not in done.stderr, done.stderr[-4000:]
    got = np.load(result)
    if got.size == 0:
        # Refused, with what to do: CuPy's ndarray.get() in the main thread, where
        # pycuda.autoinit's context is PyCUDA's, makes the primary context the driver's
        # current one there (cudaSetDevice). Only there: every other case must scan.
        assert (scheduler, chunks, prior) == ("synchronous", "cupy", "autoinit")
        return
    inclusive, exclusive = got
    np.testing.assert_array_equal(inclusive,
                                  scan_reference(children.x, scangen.LAST_NONZERO, "inclusive"))
    np.testing.assert_array_equal(exclusive,
                                  scan_reference(children.x, scangen.LAST_NONZERO, "exclusive"))


#: A program whose main thread has pycuda.autoinit's context on PyCUDA's stack and brings a
#: CuPy array back (ndarray.get()), then scans CuPy arrays through GPUBackend: prints
#: "switched" or "same" (is the driver's current context still PyCUDA's?), then "refused"
#: or the scans' results checked against numpy, then the same for one-shot calls made in
#: that thread ("direct-...").
SWITCHED = '''
import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as driver
import cupy

import scangen
from scangen.chunked import GPUBackend, operator_of
from scangen.runtime.streams import driver_context

x = np.random.default_rng(1).integers(1, 9, 3000).astype(np.int32)
assert cupy.asarray(x).get().tolist() == x.tolist()
print("switched" if driver_context() != driver.Context.get_current().handle else "same")


def scanned(scan, name):
    try:
        for _ in range(50):
            assert scan(cupy.asarray(x)).get().tolist() == np.cumsum(x).tolist()
    except RuntimeError as error:
        assert "pycuda.autoprimaryctx" in str(error), error
        print(name + "refused")
    else:
        print(name + "scanned")


scanned(lambda d: GPUBackend().scan(d, operator_of("add"), "inclusive"), "")
# in this thread: where the launch fails for the switch, it says so
scanned(scangen.inclusive_scan, "direct-")
'''


def test_a_context_switched_behind_pycuda_is_refused_where_it_would_race(gpu, tmp_path):
    """Where CuPy made the primary context the driver's current one behind PyCUDA's back,
    GPUBackend refuses with what to do (scangen's work in PyCUDA's context would not be
    ordered with CuPy's); where it did not, the scans are right. One-shot calls in that
    thread give right results or the same refusal, never wrong results."""
    require_module("cupy")
    import subprocess
    import sys

    script = tmp_path / "switched.py"
    script.write_text(SWITCHED)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = done.stdout.split()
    assert seen[:2] in (["switched", "refused"], ["same", "scanned"]), done.stdout
    assert seen[2] in ("direct-refused", "direct-scanned"), done.stdout
