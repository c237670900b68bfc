"""Differential GPU tests: every algorithm x mode x built-in operator x dtype (hierarchical
strategy), against a CPU reference that applies the operator in order
(tests.support.reference). Single-pass strategies: test_strategies.py.

Skips visibly without PyCUDA or a device; SCANGEN_REQUIRE_GPU=1 turns skips into failures.
"""
import itertools

import numpy as np
import pytest

import scangen
from scangen import LAST_NONZERO, compile as scan_compile
from scangen.spec import ALGORITHMS, MODES

from tests.support import (assert_guard_untouched, assert_scan_equal, boundary_sizes, expected,
                           guarded_output, operator, precompile, random_input, reference,
                           type_operator_pairs)

#: The full matrix uses small sections so section^2 and three-level sizes stay cheap.
MATRIX_SECTION = 64

MATRIX = [(algorithm, mode, dtype, op_name)
          for algorithm, mode, (dtype, op_name) in itertools.product(
              ALGORITHMS, MODES, type_operator_pairs())]


SECTION_CASES = [
    ("naive", 1024, None), ("kogge_stone", 1024, None),
    ("kogge_stone_double_buffered", 1024, None), ("brent_kung", 2048, None),
    ("coarsened", 4096, 8), ("warp_shuffle", 1024, None),
    ("warp_shuffle", 32, None), ("coarsened", 4, 4), ("brent_kung", 2, None),
]


SECTION_TYPES = [("int32", "add"), ("float64", "last_nonzero"), ("uint8", "max")]


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    """nvcc every spec of this file up front in parallel threads (scangen's cubin cache keeps
    them), instead of one at a time as the tests first touch them."""
    scans = [scangen.Scan(d, operator(o), mode=m, algorithm=a, section_size=MATRIX_SECTION,
                          strategy="hierarchical")
             for a, m, d, o in MATRIX]
    scans += [scangen.Scan(d, operator(o), mode=m, algorithm=a, section_size=s,
                           items_per_thread=i, strategy="hierarchical")
              for (a, s, i), m, (d, o) in itertools.product(SECTION_CASES, MODES, SECTION_TYPES)]
    precompile(scans)


@pytest.mark.parametrize("algorithm,mode,dtype,op_name", MATRIX)
def test_matrix(gpu, rng, algorithm, mode, dtype, op_name):
    op = operator(op_name)
    scan = scangen.Scan(dtype, op, mode=mode, algorithm=algorithm, section_size=MATRIX_SECTION,
                        strategy="hierarchical")
    for n in boundary_sizes(MATRIX_SECTION, rng):
        x = random_input(rng, dtype, op_name, n)
        out = guarded_output(gpu, rng, n, dtype)
        result = scan(gpu.to_gpu(x), out=out.out)
        assert result is out.out
        assert_scan_equal(assert_guard_untouched(out), expected(x, op, mode), dtype, n, op=op)


@pytest.mark.parametrize("algorithm,section,items", SECTION_CASES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,op_name", SECTION_TYPES)
def test_section_sizes(gpu, rng, algorithm, section, items, mode, dtype, op_name):
    """Large and tiny sections, in place, across every boundary of that section."""
    op = operator(op_name)
    scan = scangen.Scan(dtype, op, mode=mode, algorithm=algorithm, section_size=section,
                        items_per_thread=items, strategy="hierarchical")
    sizes = {0, 1, section - 1, section, section + 1, section * section - 1,
             section * section, section * section + 1, 3 * section * section + 7}
    # Past 2^22 only for one type and mode: enough for 2048- and 4096-element sections to
    # reach their second (and third) level, without tripling the file's run time.
    largest = 3 * section * section + 7 if (dtype, mode) == ("int32", "inclusive") else 1 << 22
    for n in sorted(s for s in sizes if 0 <= s <= largest):
        x = random_input(rng, dtype, op_name, n)
        x_gpu = gpu.to_gpu(x)
        assert scan(x_gpu, out=x_gpu) is x_gpu  # in place
        assert_scan_equal(x_gpu.get(), expected(x, op, mode), dtype, n, op=op)


def test_new_output_and_stream(gpu, rng):
    import pycuda.driver as driver

    scan = scangen.Scan(np.float32, "max", mode="exclusive", algorithm="kogge_stone")
    x = rng.normal(size=100_003).astype(np.float32)
    stream = driver.Stream()
    y = scan(gpu.to_gpu(x), stream=stream)
    stream.synchronize()
    assert y.dtype == np.float32 and y.shape == x.shape
    assert_scan_equal(y.get(), expected(x, scangen.BUILTIN_OPERATORS["max"], "exclusive"),
                      np.float32, x.size, op="max")


def test_two_streams_at_once(gpu, rng):
    """Calls in flight on two streams must not share scratch space."""
    import pycuda.driver as driver

    scan = scangen.Scan(np.int64, LAST_NONZERO, algorithm="brent_kung", section_size=256)
    inputs = [random_input(rng, np.int64, "last_nonzero", 3_000_001 + k) for k in range(2)]
    streams = [driver.Stream() for _ in inputs]
    outs = [scan(gpu.to_gpu(x), stream=s) for x, s in zip(inputs, streams)]
    for x, out, s in zip(inputs, outs, streams):
        s.synchronize()
        np.testing.assert_array_equal(out.get(), reference(x, LAST_NONZERO))


def test_identical_scan_compiles_once(gpu):
    op = scangen.Operator("a ^ (b << 1)", identity=0, name="compile_once_probe",
                          reference=lambda a, b: a ^ (b << 1))
    before = scan_compile.compile_count
    for _ in range(3):
        scangen.Scan(np.uint32, op, algorithm="coarsened")(gpu.to_gpu(np.arange(5, dtype=np.uint32)))
    assert scan_compile.compile_count == before + 1


def test_compile_error_shows_numbered_source(gpu):
    op = scangen.Operator("a +* b", identity=0, name="typo")
    scan = scangen.Scan(np.int32, op)
    with pytest.raises(scangen.ScanCompileError) as info:
        scan(gpu.to_gpu(np.arange(4, dtype=np.int32)))
    message = str(info.value)
    assert "error" in message and "a +* b" in message
    assert "in your operator" in message


def test_call_time_validation(gpu):
    scan = scangen.Scan(np.int32, "add")
    x = gpu.to_gpu(np.arange(10, dtype=np.int32))
    with pytest.raises(TypeError, match="dtype float32.*built for int32"):
        scan(gpu.to_gpu(np.zeros(10, np.float32)))
    with pytest.raises(TypeError, match="GPUArray.*to_gpu"):
        scan(np.arange(10, dtype=np.int32))
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        scan(gpu.to_gpu(np.zeros((2, 5, 2), np.int32)), axis=3)
    with pytest.raises(ValueError, match="contiguous"):
        scan(gpu.to_gpu(np.arange(20, dtype=np.int32))[::2])
    with pytest.raises(ValueError, match="shape"):
        scan(x, out=gpu.empty(9, np.int32))
    with pytest.raises(TypeError, match="out has dtype"):
        scan(x, out=gpu.empty(10, np.int64))
    big = gpu.to_gpu(np.arange(20, dtype=np.int32))
    with pytest.raises(ValueError, match="overlaps"):
        scan(big[:10], out=big[5:15])


def test_more_than_2_to_the_31_bytes(gpu):
    """64-bit indexing: one-byte elements past 2^31, checked in full (tail included), for
    the hierarchical plan and the default single-pass one."""
    import pycuda.driver as driver

    n = (1 << 31) + 4099
    if driver.mem_get_info()[0] < 3 * n:
        pytest.fail("not enough free device memory for the 2^31-element test")
    rng = np.random.default_rng(31)
    x = np.frombuffer(rng.bytes(n), dtype=np.uint8)
    want = np.add.accumulate(x, dtype=np.uint8)
    for strategy in ("hierarchical", "auto"):
        scan = scangen.Scan(np.uint8, "add", strategy=strategy)
        x_gpu = gpu.to_gpu(x)
        scan(x_gpu, out=x_gpu)
        got = x_gpu.get()
        del x_gpu
        np.testing.assert_array_equal(got[-(1 << 20):], want[-(1 << 20):], err_msg=strategy)
        np.testing.assert_array_equal(got, want, err_msg=strategy)
