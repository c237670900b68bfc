"""Bad call-time arguments on the GPU: each is refused with a TypeError or ValueError naming
the argument, before anything is launched or written, and the CUDA context stays usable:
the next valid call in the same process gives the right result (a pointer launched as
garbage would fault and kill the context, and that call would fail)."""
import numpy as np
import pytest

import scangen

from tests.support import poison_values, record_launches

N = 1000


@pytest.fixture
def launches(monkeypatch):
    """The launches made (Runtime.launch, which every scan-based call goes through), run."""
    return record_launches(monkeypatch, run=True)


def last_nonzero_prefix(x):
    """The inclusive scan with "last non-zero wins" (b != 0 ? b : a), written here."""
    out, current = np.empty_like(x), 0
    for i, value in enumerate(x):
        current = value if value != 0 else current
        out[i] = current
    return out


def kernel():
    return scangen.ScanKernel(np.int32, scangen.LAST_NONZERO, arguments="const int *x, int *out",
                              input_expr="x[i]", output_statement="out[i] = item;", initial=0)


def input_values(rng):
    x = rng.integers(-5, 5, N).astype(np.int32)
    x[rng.random(N) < 0.5] = 0
    return x


def bad_kernel_calls(gpu, x, out):
    """(what, call, error, message) for every kind of bad ScanKernel argument."""
    short = gpu.to_gpu(np.zeros(N // 2, np.int32))
    return [
        ("a scalar for a pointer", lambda k: k(5, out), TypeError,
         r"argument 'x' \(const int \*x\) needs a device array or a scangen.DevicePointer, "
         r"not the int 5"),
        ("a raw address for a pointer", lambda k: k(x, int(out.gpudata)), TypeError,
         "argument 'out' .*not the int .*DevicePointer"),
        ("a host array for a pointer", lambda k: k(x, np.zeros(N, np.int32)), TypeError,
         "argument 'out' .*not a host numpy array"),
        ("an array of the wrong dtype", lambda k: k(gpu.to_gpu(np.zeros(N, np.int64)), out),
         TypeError, r"argument 'x' is declared const int \*x \(int32\) but the array has "
                    r"dtype int64"),
        ("a DevicePointer of the wrong dtype",
         lambda k: k(x, scangen.DevicePointer(int(out.gpudata), np.uint32, N)), TypeError,
         "argument 'out' is declared .* but the array has dtype uint32"),
        ("a too short array for n", lambda k: k(short, out, n=N), ValueError,
         f"n={N} is larger than the first array argument 'x' \\({N // 2} elements\\)"),
        ("a too short DevicePointer for n",
         lambda k: k(scangen.DevicePointer(int(x.gpudata), np.int32, 10), out, n=11),
         ValueError, "n=11 is larger than the first array argument 'x' \\(10 elements\\)"),
        ("a negative n", lambda k: k(x, out, n=-1), ValueError,
         "n must be a non-negative int, not -1"),
        ("a float n", lambda k: k(x, out, n=float(N)), ValueError, "n must be a non-negative int"),
        ("a stream of the wrong type", lambda k: k(x, out, stream="default"), TypeError,
         "stream= takes a pycuda Stream"),
        ("a negative stream handle", lambda k: k(x, out, stream=-3), ValueError,
         "stream= handle -3 is not a CUstream"),
        ("an initial value that does not fit", lambda k: k(x, out, initial=1 << 40),
         ValueError, r"initial \(int32\): 1099511627776 does not fit int32"),
        ("too few arguments", lambda k: k(x), TypeError,
         r"takes 2 argument\(s\) \(x, out\) before n= and stream=, got 1"),
    ]


CASES = ["a scalar for a pointer", "a raw address for a pointer", "a host array for a pointer",
         "an array of the wrong dtype", "a DevicePointer of the wrong dtype",
         "a too short array for n", "a too short DevicePointer for n", "a negative n",
         "a float n", "a stream of the wrong type", "a negative stream handle",
         "an initial value that does not fit", "too few arguments"]


@pytest.mark.parametrize("what", CASES)
def test_a_bad_scan_kernel_argument_launches_nothing(gpu, rng, launches, what):
    k = kernel()
    values = input_values(rng)
    x = gpu.to_gpu(values)
    poison = poison_values(rng, np.int32, N)
    out = gpu.to_gpu(poison)
    (_, call, error, message), = [c for c in bad_kernel_calls(gpu, x, out) if c[0] == what]
    with pytest.raises(error, match=message):
        call(k)
    assert launches == []
    np.testing.assert_array_equal(out.get(), poison)  # nothing was written
    # The context lives on: the next valid call, a DevicePointer call included, is right.
    k(x, out)
    np.testing.assert_array_equal(out.get(), last_nonzero_prefix(values))
    again = gpu.to_gpu(poison)
    k(scangen.DevicePointer(int(x.gpudata), np.int32, N),
      scangen.DevicePointer(int(again.gpudata), np.int32, N))
    np.testing.assert_array_equal(again.get(), last_nonzero_prefix(values))


def test_every_listed_case_is_run(gpu):
    x = gpu.empty(N, np.int32)
    assert [c[0] for c in bad_kernel_calls(gpu, x, x)] == CASES


def scan_cases(gpu, x):
    return [
        (lambda s: s(x, out=gpu.empty(N, np.int64)), TypeError,
         "out has dtype int64, but this scan writes int32"),
        (lambda s: s(x, out=gpu.empty(N - 1, np.int32)), ValueError,
         r"out has shape \(999,\), but x has shape \(1000,\)"),
        (lambda s: s(gpu.to_gpu(np.zeros(N, np.float32))), TypeError,
         "x has dtype float32, but this scan was built for int32"),
        (lambda s: s(np.zeros(N, np.int32)), TypeError, "x must be a pycuda GPUArray .*"
                                                        "copy it to the GPU first"),
        (lambda s: s(x, stream=1.5), TypeError, "stream= takes a pycuda Stream"),
        (lambda s: s(x, initial=2 ** 31), ValueError, r"initial \(int32\): 2147483648 does "
                                                       "not fit int32"),
        (lambda s: s(x, initial="0"), TypeError, r"initial \(int32\) needs an int, not '0'"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_bad_scan_argument_launches_nothing(gpu, rng, launches, case):
    scan = scangen.Scan(np.int32, scangen.LAST_NONZERO, initial=0)
    values = input_values(rng)
    x = gpu.to_gpu(values)
    call, error, message = scan_cases(gpu, x)[case]
    with pytest.raises(error, match=message):
        call(scan)
    assert launches == []
    np.testing.assert_array_equal(scan(x).get(), last_nonzero_prefix(values))


def test_bad_primitive_arguments_launch_nothing(gpu, rng, launches):
    values = rng.integers(0, 1000, N).astype(np.uint32)
    keys = gpu.to_gpu(values)
    sort = scangen.RadixSort(np.uint32)
    for call, error, message in [
            (lambda: sort(keys, descending="yes"), TypeError, "descending must be True or False"),
            (lambda: sort(keys, end_bit=33), ValueError, "end_bit=33 is outside the key's"),
            (lambda: sort(gpu.to_gpu(values.astype(np.int32))), TypeError,
             "keys has dtype int32; expected uint32"),
            (lambda: scangen.Histogram(np.uint32)(keys, 0, (0, 1000)), ValueError,
             "bins must be at least 1"),
            (lambda: scangen.Histogram(np.uint32)(keys, 10, (0, 1000, 5)), TypeError,
             "range must be a pair of numbers"),
            (lambda: scangen.Select(np.uint32, "x > 500u")(keys, out=gpu.empty(N, np.int32)),
             TypeError, "out has dtype int32"),
            (lambda: scangen.Select(np.uint32, "x > 500u")(keys, out=gpu.empty(N // 2,
                                                                              np.uint32)),
             ValueError, "out has 500 elements; it needs room for 1000")]:
        with pytest.raises(error, match=message):
            call()
    assert launches == []
    np.testing.assert_array_equal(sort(keys).get(), np.sort(values))
    kept = scangen.Select(np.uint32, "x > 500u")(keys)
    np.testing.assert_array_equal(kept.get(), values[values > 500])
