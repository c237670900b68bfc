"""scangen.out_of_core on a GPU: host arrays streamed through a small device budget equal the
in-memory scan, with a non-commutative operator; memmaps in and out, in place, initial=,
progress. The schedule itself is tested on the CPU (tests/cpu/test_out_of_core.py);
throughput is benchmarks/out_of_core.py."""
import numpy as np
import pytest

import scangen
from scangen import out_of_core as ooc
from scangen.runtime.streams import is_pinned_host_memory
from tests.support import AFFINE, random_input, scan_reference


@pytest.mark.parametrize("mode", scangen.MODES)
def test_one_gib_under_a_64_mib_budget_equals_the_reference(gpu, rng, mode):
    n = 1 << 27  # uint64: 1 GiB
    x = random_input(rng, "uint64", "affine_then", n)
    seen = []
    got = getattr(ooc, f"{mode}_scan")(x, AFFINE, max_device_bytes=64 << 20,
                                      progress=lambda done, total: seen.append(done))
    assert len(seen) > 16 and seen[-1] == n  # many chunks, all landed
    # against the tests' own fold, not only scangen's in-memory scan (a bug both share)
    np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))
    in_memory = getattr(scangen, f"{mode}_scan")(gpu.to_gpu(x), AFFINE).get()
    np.testing.assert_array_equal(got, in_memory)


@pytest.mark.parametrize("slots", [2, 3])
def test_memmaps_in_place_and_initial(gpu, rng, tmp_path, slots):
    n = 3_000_017
    values = random_input(rng, "int32", "last_nonzero", n)
    path = tmp_path / "x.bin"
    values.tofile(path)
    x = np.memmap(path, np.int32, mode="r+", shape=(n,))
    ooc.exclusive_scan(x, scangen.LAST_NONZERO, out=x, initial=-5, chunk_elements=100_003,
                       slots=slots)
    x.flush()
    np.testing.assert_array_equal(np.fromfile(path, np.int32),
                                  scan_reference(values, scangen.LAST_NONZERO, "exclusive",
                                                 initial=-5))


def test_float_sum_and_a_chunk_larger_than_the_array(gpu, rng):
    x = random_input(rng, "float64", "add", 1_000_000)
    got = ooc.inclusive_scan(x, chunk_elements=1 << 24, progress=True)
    np.testing.assert_allclose(got, scan_reference(x, scangen.BUILTIN_OPERATORS["add"],
                                                   "inclusive"), rtol=1e-9)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_histogram_under_a_small_budget_equals_numpys(gpu, rng, dtype):
    """Many chunks through two input slots, each counted by scangen.Histogram on the
    device: numpy.histogram of the whole array, values on the edges and NaN included."""
    x = (rng.normal(size=3_000_017) * 60).astype(dtype)
    x[:4] = [-100, 100, -101, 101]
    if x.dtype.kind == "f":
        x[5::1001] = np.nan
    counts, edges = ooc.histogram(x, 77, (-100, 100), max_device_bytes=2 << 20)
    want, want_edges = np.histogram(x, 77, (-100, 100))
    np.testing.assert_array_equal(counts, want)
    np.testing.assert_array_equal(edges, want_edges)


@pytest.mark.parametrize("slots", [2, 3])
@pytest.mark.parametrize("dtype, predicate", [("float32", "x > 0.25f"), ("int64", "x % 3 == 0"),
                                              ("uint8", "x != 0")])
def test_select_under_a_small_budget_equals_numpys(gpu, rng, dtype, predicate, slots):
    """Many chunks through the slots, each compacted on the device: x[predicate] of the
    whole array in order, with chunks that keep all and none of theirs; nothing written past
    the kept elements of a given out."""
    n = 3_000_017
    x = (rng.normal(size=n) * 10).astype(dtype) if dtype == "float32" else \
        rng.integers(0, 7, n).astype(dtype)
    x[:300_000] = 0  # whole chunks that keep none (0 % 3 == 0 keeps all of int64's)
    x[300_000:400_000] = 3  # and whole chunks that keep all
    keep = {"x > 0.25f": x > 0.25, "x % 3 == 0": x % 3 == 0, "x != 0": x != 0}[predicate]
    out = np.full(n, 5, dtype)
    got = ooc.select(x, predicate, max_device_bytes=1 << 20, out=out, slots=slots)
    np.testing.assert_array_equal(got, x[keep])
    assert got.base is out and (out[got.size:] == 5).all()


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("mode", scangen.MODES)
def test_arrays_pinned_in_place(gpu, rng, mode, in_place):
    """pin_in_place=True: chunks go between the registered host arrays and the device
    directly; a non-commutative scan, x and out apart or one array, a poisoned out; then a
    histogram and a select of x pinned the same way. The arrays are unpinned after each
    call: pinning x again does not fail."""
    n = 5_000_011
    x = random_input(rng, "uint64", "affine_then", n)
    want = scan_reference(x, AFFINE, mode)
    out = x if in_place else np.full_like(x, 0xDEAD)
    scan = ooc.inclusive_scan if mode == "inclusive" else ooc.exclusive_scan
    got = scan(x, AFFINE, out=out, max_device_bytes=8 << 20, pin_in_place=True)
    assert got is out
    np.testing.assert_array_equal(got, want)
    values = rng.normal(size=n).astype(np.float32) * 60
    counts, _ = ooc.histogram(values, 50, (-100, 100), max_device_bytes=4 << 20,
                              pin_in_place=True)
    np.testing.assert_array_equal(counts, np.histogram(values, 50, (-100, 100))[0])
    got = ooc.select(values, "x > 0.5f", max_device_bytes=4 << 20, pin_in_place=True)
    np.testing.assert_array_equal(got, values[values > 0.5])


def test_arrays_allocated_pinned_are_scanned_in_place_of_staging(gpu, rng):
    """x allocated pinned (pycuda's pagelocked_empty) is seen as pinned, pageable memory is
    not; the scan of the pinned array, out a second pinned array or x itself, with and
    without pin_in_place (which then pins nothing), equals the reference."""
    import pycuda.driver as cuda

    n = 2_000_003
    values = random_input(rng, "uint64", "affine_then", n)
    assert not is_pinned_host_memory(values.ctypes.data)
    for pin_in_place in (False, True):
        x = cuda.pagelocked_empty(n, np.uint64)
        x[:] = values
        assert is_pinned_host_memory(x.ctypes.data)
        assert is_pinned_host_memory(x.ctypes.data + x.nbytes - 1)
        out = cuda.pagelocked_empty(n, np.uint64)
        out[:] = 0xDEAD
        got = ooc.inclusive_scan(x, AFFINE, out=out, max_device_bytes=4 << 20,
                                 pin_in_place=pin_in_place)
        np.testing.assert_array_equal(got, scan_reference(values, AFFINE, "inclusive"))
        ooc.exclusive_scan(x, AFFINE, out=x, max_device_bytes=4 << 20,
                           pin_in_place=pin_in_place)
        np.testing.assert_array_equal(x, scan_reference(values, AFFINE, "exclusive"))


def test_a_memmap_pinned_in_place_is_scanned_or_refused_clearly(gpu, rng, tmp_path):
    """The driver may refuse to pin file-backed memory: the scan is then refused with a
    RuntimeError saying what to do, before any chunk moves; where it pins, the result is
    right."""
    n = 1_000_003
    values = random_input(rng, "int32", "last_nonzero", n)
    path = tmp_path / "x.bin"
    values.tofile(path)
    x = np.memmap(path, np.int32, mode="r+", shape=(n,))
    try:
        ooc.inclusive_scan(x, scangen.LAST_NONZERO, out=x, chunk_elements=100_003,
                           pin_in_place=True)
    except RuntimeError as error:
        assert "pin_in_place=False" in str(error)
        np.testing.assert_array_equal(np.fromfile(path, np.int32), values)  # untouched
        return
    x.flush()
    np.testing.assert_array_equal(np.fromfile(path, np.int32),
                                  scan_reference(values, scangen.LAST_NONZERO, "inclusive"))
