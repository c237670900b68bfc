"""Every public entry point on pycuda GPUArrays, CuPy arrays and torch tensors: the kind that
comes back, the values (against the reference, with non-commutative operators), no copy for
out=, and ordering on non-default CuPy and torch streams with no synchronisation by hand.

CuPy and torch are optional: each kind skips where its library is missing (the GPU machine
has both). The CPU side of all this (parsing, errors, stream forms, the one-shot cache) is
tests/cpu/test_interop.py.
"""
import types

import numpy as np
import pytest

import scangen
from scangen import LAST_NONZERO

from tests.support import (AFFINE, COMPACTION, assert_scan_equal, expected, random_input,
                           run_docs_block, scan_reference, segmented_reference)
from tests.support import require_module

SIZES = [0, 1, 1000, 100_003]
KINDS = ["pycuda", "cupy", "torch"]
#: Busy-wait clock cycles put on a stream before its input is written: long enough that a
#: scan not ordered on that stream would read the input before it is there.
DELAY_CYCLES = 200_000_000


class Kind:
    """One array library, as the tests use it."""

    def __init__(self, name, gpu):
        self.name = name
        if name == "pycuda":
            self.module, self.type = gpu, gpu.GPUArray
        elif name == "cupy":
            self.module = require_module("cupy")
            self.type = self.module.ndarray
        else:
            self.module = require_module("torch")
            self.type = self.module.Tensor

    def to_device(self, host):
        host = np.ascontiguousarray(host)
        if self.name == "pycuda":
            return self.module.to_gpu(host)
        if self.name == "cupy":
            return self.module.asarray(host)
        return self.module.from_numpy(host).cuda()

    def to_host(self, array):
        assert isinstance(array, self.type), f"{type(array).__name__} is not a {self.name} array"
        if self.name == "pycuda":
            return array.get()
        if self.name == "cupy":
            return self.module.asnumpy(array)
        return array.cpu().numpy()

    def pointer(self, array):
        if self.name == "pycuda":
            return array.ptr
        if self.name == "cupy":
            return array.data.ptr
        return array.data_ptr()


@pytest.fixture(params=KINDS)
def kind(request, gpu):
    return Kind(request.param, gpu)


def poison(rng, kind, n, dtype):
    return kind.to_device(random_input(rng, dtype, "add", n) + 7)


# --- scans ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["inclusive", "exclusive"])
def test_scan(kind, rng, mode):
    scan = scangen.Scan(np.int32, LAST_NONZERO, mode=mode)
    for n in SIZES:
        x = random_input(rng, np.int32, "last_nonzero", n)
        got = scan(kind.to_device(x))
        assert_scan_equal(kind.to_host(got), expected(x, LAST_NONZERO, mode), np.int32, n)
        out = poison(rng, kind, n, np.int32)
        before = kind.pointer(out) if n else None
        assert scan(kind.to_device(x), out=out) is out
        if n:
            assert kind.pointer(out) == before  # written where it was: no copy
        assert_scan_equal(kind.to_host(out), expected(x, LAST_NONZERO, mode), np.int32, n)


def test_scan_rows_in_place_and_result_dtype(kind, rng):
    x = random_input(rng, np.int32, "last_nonzero", 4 * 1001).reshape(4, 1001)
    rows = kind.to_device(x)
    assert scangen.Scan(np.int32, LAST_NONZERO)(rows, out=rows) is rows
    np.testing.assert_array_equal(kind.to_host(rows),
                                  np.stack([expected(row, LAST_NONZERO, "inclusive")
                                            for row in x]))
    small = rng.integers(0, 255, 3000, dtype=np.uint8)
    wide = scangen.Scan(np.uint8, "add", result_dtype=np.int64)(kind.to_device(small))
    np.testing.assert_array_equal(kind.to_host(wide), np.cumsum(small, dtype=np.int64))


@pytest.mark.parametrize("function,mode", [(scangen.inclusive_scan, "inclusive"),
                                           (scangen.exclusive_scan, "exclusive")])
def test_one_shot_scans(kind, rng, function, mode):
    for n in SIZES:
        x = random_input(rng, np.float64, "last_nonzero", n)
        got = function(kind.to_device(x), "b != 0 ? b : a", identity=0)
        assert_scan_equal(kind.to_host(got), expected(x, LAST_NONZERO, mode), np.float64, n)
    x = rng.integers(-50, 50, 5000, dtype=np.int64)
    got = function(kind.to_device(x), "max", reverse=True, initial=-7)
    np.testing.assert_array_equal(kind.to_host(got), scan_reference(
        x, scangen.BUILTIN_OPERATORS["max"], mode, reverse=True, initial=-7))


def test_one_shot_scans_from_host_numpy(gpu, rng):
    x = random_input(rng, np.int32, "last_nonzero", 10_007)
    got = scangen.inclusive_scan(x, LAST_NONZERO)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, expected(x, LAST_NONZERO, "inclusive"))
    out = np.zeros_like(x)
    assert scangen.exclusive_scan(x, LAST_NONZERO, out=out) is out
    np.testing.assert_array_equal(out, expected(x, LAST_NONZERO, "exclusive"))


@pytest.mark.parametrize("name", ["pycuda", "cupy"])  # torch has no uint64 arithmetic to trust
def test_affine_maps(gpu, rng, name):
    """Function composition: a prefix combined on the wrong side gives another answer."""
    kind = Kind(name, gpu)
    x = random_input(rng, np.uint64, "affine_then", 300_001)
    want = expected(x, AFFINE, "inclusive")
    np.testing.assert_array_equal(kind.to_host(scangen.Scan(np.uint64, AFFINE)(
        kind.to_device(x))), want)
    np.testing.assert_array_equal(kind.to_host(scangen.inclusive_scan(kind.to_device(x),
                                                                      AFFINE)), want)


def test_scan_kernel(kind, rng):
    compact = scangen.ScanKernel(np.int64, "add", **COMPACTION)
    x = rng.random(100_003).astype(np.float32)
    out = poison(rng, kind, x.size, np.float32)
    count = kind.to_device(np.full(1, -1, np.int64))
    compact(kind.to_device(x), out, count)
    kept = x[x > 0.5]
    assert kind.to_host(count)[0] == kept.size
    np.testing.assert_array_equal(kind.to_host(out)[:kept.size], kept)


@pytest.mark.parametrize("form", ["flags", "offsets", "keys"])
def test_segmented_scan(kind, rng, form):
    scan = scangen.SegmentedScan(np.int32, LAST_NONZERO, mode="exclusive")
    n = 50_001
    x = random_input(rng, np.int32, "last_nonzero", n)
    heads = rng.random(n) < 0.01
    heads[0] = True
    index = {"flags": heads.astype(np.uint8),
             "offsets": np.append(np.flatnonzero(heads), n).astype(np.int64),
             "keys": np.cumsum(heads).astype(np.int32)}[form]
    got = scan(kind.to_device(x), **{form: kind.to_device(index)})
    np.testing.assert_array_equal(kind.to_host(got),
                                  segmented_reference(x, heads, LAST_NONZERO, "exclusive"))
    if form == "offsets":  # checked on the device, on the array library's stream
        bad = index.copy()
        bad[index.size // 2] = n + 1
        with pytest.raises(ValueError, match="non-decreasing"):
            scan(kind.to_device(x), offsets=kind.to_device(bad))


# --- primitives --------------------------------------------------------------------------------

def test_compaction_primitives(kind, rng):
    n = 100_003
    x = np.repeat(rng.integers(-3, 4, n // 3 + 1), 3)[:n].astype(np.float32)
    mask = rng.random(n) < 0.5
    on, assert_kind = kind.to_device, kind.to_host  # to_host checks the kind returned
    np.testing.assert_array_equal(assert_kind(scangen.select(on(x), "x > 0.0f")), x[x > 0])
    np.testing.assert_array_equal(assert_kind(scangen.select(on(x), flags=on(mask))), x[mask])
    np.testing.assert_array_equal(assert_kind(scangen.remove_if(on(x), "x > 0.0f")),
                                  x[~(x > 0)])
    parted, n_true = scangen.partition(on(x), "x > 0.0f")
    assert n_true == int((x > 0).sum())
    np.testing.assert_array_equal(assert_kind(parted), np.concatenate([x[x > 0], x[~(x > 0)]]))
    heads = np.ones(n, bool)
    heads[1:] = x[1:] != x[:-1]
    np.testing.assert_array_equal(assert_kind(scangen.unique(on(x))), x[heads])
    values, counts = scangen.run_length_encode(on(x))
    np.testing.assert_array_equal(assert_kind(values), x[heads])
    np.testing.assert_array_equal(assert_kind(counts), np.diff(np.append(np.flatnonzero(heads),
                                                                         n)))
    # The reusable classes, with out= (no copy) and the count left on the device.
    out = poison(rng, kind, n, np.float32)
    before = kind.to_host(out).copy()
    got, count = scangen.Select(np.float32, "x > 0.0f")(on(x), out=out, count_on_device=True)
    assert got is out and isinstance(count, kind.type)
    kept = x[x > 0]
    assert assert_kind(count)[0] == kept.size
    written = kind.to_host(out)
    np.testing.assert_array_equal(written[:kept.size], kept)
    np.testing.assert_array_equal(written[kept.size:], before[kept.size:],
                                  err_msg="wrote past the kept elements")
    for empty in (scangen.unique(on(x[:0])), scangen.select(on(x[:0]), "x > 0.0f")):
        assert assert_kind(empty).size == 0


def test_compaction_from_host_numpy(gpu, rng):
    x = rng.normal(size=10_001).astype(np.float32)
    kept = scangen.select(x, "x > 0.0f")
    assert isinstance(kept, np.ndarray)
    np.testing.assert_array_equal(kept, x[x > 0])
    values, counts = scangen.run_length_encode(np.repeat(x[:100], 3))
    np.testing.assert_array_equal(values, x[:100])
    assert (counts == 3).all()


# --- streams: ordered on the array library's stream, no synchronisation by hand -----------------

def _delayed_copy_torch(torch, source, stream):
    """On ``stream``: wait a while, then copy ``source`` into a new tensor."""
    stream.wait_stream(torch.cuda.current_stream())  # source was made on the current stream
    with torch.cuda.stream(stream):
        target = torch.full_like(source, 12345)
        torch.cuda._sleep(DELAY_CYCLES)
        target.copy_(source)
    return target


def test_torch_current_stream_orders_the_work(gpu, rng):
    torch = require_module("torch")
    stream = torch.cuda.Stream()  # non-blocking towards the legacy default stream
    x = random_input(rng, np.int64, "last_nonzero", 1_000_003)
    want = expected(x, LAST_NONZERO, "inclusive")
    for strategy in ("decoupled_lookback", "reduce_then_scan"):
        scan = scangen.Scan(np.int64, LAST_NONZERO, strategy=strategy)
        source = torch.from_numpy(x).cuda()
        torch.cuda.synchronize()
        x_on_stream = _delayed_copy_torch(torch, source, stream)
        with torch.cuda.stream(stream):
            y = scan(x_on_stream)                           # no stream=: torch's current one
            z = scangen.inclusive_scan(x_on_stream, LAST_NONZERO)
            kept = scangen.select(x_on_stream, "x != 0")    # reads its count on that stream
            got, got_z = y.cpu().numpy(), z.cpu().numpy()   # copies on that stream
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_z, want)
        with torch.cuda.stream(stream):
            np.testing.assert_array_equal(kept.cpu().numpy(), x[x != 0])


def test_torch_explicit_stream_objects_and_handles(gpu, rng):
    torch = require_module("torch")
    x = random_input(rng, np.int32, "last_nonzero", 500_001)
    want = expected(x, LAST_NONZERO, "exclusive")
    scan = scangen.Scan(np.int32, LAST_NONZERO, mode="exclusive")
    for as_given in (lambda s: s, lambda s: s.cuda_stream):  # a torch stream, a raw handle
        stream = torch.cuda.Stream()
        source = torch.from_numpy(x).cuda()
        x_on_stream = _delayed_copy_torch(torch, source, stream)
        out = torch.full_like(source, -1)
        stream.wait_stream(torch.cuda.current_stream())  # out was filled on the current one
        assert scan(x_on_stream, out=out, stream=as_given(stream)) is out
        with torch.cuda.stream(stream):
            np.testing.assert_array_equal(out.cpu().numpy(), want)


def _spin_kernel(cupy):
    return cupy.RawKernel(r"""
extern "C" __global__ void scangen_test_spin(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}""", "scangen_test_spin")


def _delayed_copy_cupy(cupy, source, stream):
    """On ``stream``: wait a while, then copy ``source`` into a new array."""
    with stream:
        target = cupy.full_like(source, 12345)
        _spin_kernel(cupy)((1,), (1,), (np.int64(DELAY_CYCLES),))
        target[...] = source
    return target


def test_cupy_current_stream_orders_the_work(gpu, rng):
    cupy = require_module("cupy")
    stream = cupy.cuda.Stream(non_blocking=True)
    x = random_input(rng, np.float64, "last_nonzero", 1_000_003)
    want = expected(x, LAST_NONZERO, "inclusive")
    source = cupy.asarray(x)
    cupy.cuda.Device().synchronize()
    for strategy in ("decoupled_lookback", "reduce_then_scan"):
        scan = scangen.Scan(np.float64, LAST_NONZERO, strategy=strategy)
        x_on_stream = _delayed_copy_cupy(cupy, source, stream)
        with stream:
            y = scan(x_on_stream)
            values, counts = scangen.run_length_encode(x_on_stream)
            got = y.get()        # synchronises the current stream, then copies
            got_values = values.get()
        assert_scan_equal(got, want, np.float64, x.size)
        heads = np.ones(x.size, bool)
        heads[1:] = x[1:] != x[:-1]
        np.testing.assert_array_equal(got_values, x[heads])


def test_cupy_explicit_streams_and_two_at_once(gpu, rng):
    """Two non-default streams given as a CuPy stream and as a raw handle, both in flight:
    each gets its own scratch (keyed by handle)."""
    cupy = require_module("cupy")
    scan = scangen.Scan(np.int64, LAST_NONZERO, strategy="decoupled_lookback")
    inputs = [random_input(rng, np.int64, "last_nonzero", 2_000_003 + k) for k in range(2)]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in inputs]
    sources = [cupy.asarray(x) for x in inputs]
    cupy.cuda.Device().synchronize()
    on_streams = [_delayed_copy_cupy(cupy, s, stream) for s, stream in zip(sources, streams)]
    outs = [scan(on_streams[0], stream=streams[0]), scan(on_streams[1], stream=streams[1].ptr)]
    for x, out, stream in zip(inputs, outs, streams):
        assert isinstance(out, cupy.ndarray)
        np.testing.assert_array_equal(out.get(stream=stream), expected(x, LAST_NONZERO,
                                                                       "inclusive"))


def test_readme_streams_block_runs(gpu):
    torch = require_module("torch")
    namespace = run_docs_block("torch.cuda.Stream()", "'Array kinds and streams'")
    with torch.cuda.stream(namespace["side"]):
        x = namespace["x"].cpu().numpy()
        np.testing.assert_array_equal(namespace["y"].cpu().numpy(), np.cumsum(x, dtype=np.int32))
        np.testing.assert_array_equal(namespace["kept"].cpu().numpy(), x[x > 4])
    assert namespace["total"] == int(x.sum())


# --- other producers -------------------------------------------------------------------------------

class ArrayInterfaceOnly:
    """A producer scangen does not know by name (as Numba's arrays are): the interface only."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = array.__cuda_array_interface__


class DLPackOnly:
    """A producer that speaks DLPack only."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly])
def test_other_producers_get_gpuarrays(gpu, rng, wrap):
    torch = require_module("torch")
    x = random_input(rng, np.int32, "last_nonzero", 100_003)
    got = scangen.inclusive_scan(wrap(torch.from_numpy(x).cuda()), LAST_NONZERO)
    assert isinstance(got, gpu.GPUArray)
    np.testing.assert_array_equal(got.get(), expected(x, LAST_NONZERO, "inclusive"))
    out = torch.full((x.size,), -1, dtype=torch.int32, device="cuda")
    scangen.Scan(np.int32, LAST_NONZERO)(wrap(torch.from_numpy(x).cuda()), wrap(out))
    np.testing.assert_array_equal(out.cpu().numpy(), expected(x, LAST_NONZERO, "inclusive"))


class NamesItsLibrary:
    """Makes a producer name its library (``__array_namespace__``), as JAX's arrays do:
    torch's tensors behind the array API's door, torch.from_dlpack the library's."""

    def __array_namespace__(self, api_version=None):
        return types.SimpleNamespace(from_dlpack=require_module("torch").from_dlpack)


class DLPackLibraryArray(NamesItsLibrary, DLPackOnly):
    pass


class InterfaceLibraryArray(NamesItsLibrary, ArrayInterfaceOnly):
    pass


@pytest.mark.parametrize("wrap", [DLPackLibraryArray, InterfaceLibraryArray])
def test_results_go_back_to_the_producers_library(gpu, rng, wrap):
    """torch's tensors, sharing scangen's memory (no copy), correct when read at once on
    torch's current stream, a non-blocking one (the scan runs on the legacy stream, behind a
    delay), and the memory let go when torch lets go of the tensors."""
    import gc
    from scangen import dlpack

    torch = require_module("torch")
    held_before = len(dlpack._held)
    x = random_input(rng, np.int64, "last_nonzero", 1_000_003)
    source = torch.from_numpy(x).cuda()
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    torch.cuda._sleep(DELAY_CYCLES)  # on the legacy default stream, ahead of the scan
    with torch.cuda.stream(stream):
        y = scangen.Scan(np.int64, LAST_NONZERO)(wrap(source))
        got = y.cpu().numpy()  # on torch's current stream, at once
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.int64
    np.testing.assert_array_equal(got, expected(x, LAST_NONZERO, "inclusive"))
    kept, count = scangen.Select(np.int64, "x != 0")(wrap(source), count_on_device=True)
    assert isinstance(kept, torch.Tensor) and int(count.item()) == int((x != 0).sum())
    np.testing.assert_array_equal(kept[:int(count.item())].cpu().numpy(), x[x != 0])
    a = torch.rand(8, 300, device="cuda") * 0.5 + 0.5
    b = torch.rand(8, 300, device="cuda") - 0.5
    h = scangen.linear_recurrence(wrap(a), wrap(b), axis=1)
    want = torch.empty_like(b)
    want[:, 0] = b[:, 0]
    for t in range(1, b.shape[1]):
        want[:, t] = a[:, t] * want[:, t - 1] + b[:, t]
    torch.testing.assert_close(h, want, rtol=1e-5, atol=1e-5)
    assert len(dlpack._held) == held_before + 4  # y, kept, count and h: torch holds them
    del y, kept, count, h
    gc.collect()
    assert len(dlpack._held) == held_before


def test_numba_arrays(gpu, rng):
    cuda = require_module("numba.cuda")
    x = random_input(rng, np.int32, "last_nonzero", 10_001)
    got = scangen.inclusive_scan(cuda.to_device(x), LAST_NONZERO)
    np.testing.assert_array_equal(got.get(), expected(x, LAST_NONZERO, "inclusive"))


# --- bad input on real arrays ----------------------------------------------------------------

def test_errors_before_launch(gpu):
    torch = require_module("torch")
    cupy = require_module("cupy")
    scan = scangen.Scan(np.float32, "add")
    with pytest.raises(TypeError, match=r"torch tensor on cpu.*x.cuda\(\)"):
        scan(torch.zeros(10))
    with pytest.raises(TypeError, match="out is a torch tensor but x is a CuPy array"):
        scan(cupy.zeros(10, np.float32), torch.zeros(10, device="cuda"))
    with pytest.raises(ValueError, match=r"x.contiguous\(\)"):
        scan(torch.zeros(10, 2, device="cuda").t())
    with pytest.raises(ValueError, match=r"cupy.ascontiguousarray\(x\)"):
        scan(cupy.zeros(20, np.float32)[::2])
    # (named torch.bfloat16, or bfloat16 where ml_dtypes gives numpy the type)
    with pytest.raises(TypeError, match="dtype (torch.)?bfloat16"):
        scan(torch.zeros(10, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(TypeError, match="x must be a pycuda GPUArray or another CUDA array"):
        scan("not an array")


def test_pycuda_results_come_from_a_pool_per_stream(gpu, rng):
    """A freed result's memory serves the next result on its stream (no cuMemAlloc), never
    one on another stream, and every result is right; free_pooled_memory lets it go."""
    import pycuda.driver as driver

    keys = rng.integers(0, 1000, 100_003).astype(np.int32)
    device_keys = gpu.to_gpu(keys)
    first = scangen.radix_sort(device_keys)
    address = first.ptr
    del first
    again = scangen.radix_sort(device_keys)
    assert again.ptr == address  # the freed block came back
    stream = driver.Stream()
    other = scangen.radix_sort(device_keys, stream=stream)
    stream.synchronize()
    del again
    assert scangen.radix_sort(device_keys, stream=stream).ptr != address
    np.testing.assert_array_equal(other.get(), np.sort(keys, kind="stable"))
    scangen.free_pooled_memory()
    np.testing.assert_array_equal(scangen.radix_sort(device_keys).get(),
                                  np.sort(keys, kind="stable"))
