"""Scan's reverse, initial (per construction and per call), result_dtype and 2-D rows on
the GPU, every strategy, non-commutative operators, against tests.support.scan_reference."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES, STRATEGIES

from tests.support import (assert_scan_equal, operator, poisoned, precompile, random_input,
                           scan_reference)

SECTION = 64
TYPES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "add")]
CASES = list(itertools.product(STRATEGIES, MODES, TYPES))
SIZES = [1, 2, SECTION - 1, SECTION, SECTION + 1, SECTION**2 + 1, 3 * SECTION**2 + 7]


def options_scan(strategy, mode, dtype, op_name, **options):
    return scangen.Scan(dtype, operator(op_name), mode=mode, strategy=strategy,
                        section_size=SECTION, **options)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    scans = []
    for strategy, mode, (dtype, op_name) in CASES:
        scans += [options_scan(strategy, mode, dtype, op_name, reverse=True),
                  options_scan(strategy, mode, dtype, op_name, initial=1),
                  options_scan(strategy, mode, dtype, op_name, reverse=True, initial=1)]
        scans.append(options_scan(strategy, mode, dtype, op_name, reverse=True).rows_kernel)
        scans.append(options_scan(strategy, mode, dtype, op_name).rows_kernel)
    precompile(scans)


def initial_value(rng, dtype, op_name):
    return random_input(rng, dtype, op_name, 1)[0]


@pytest.mark.parametrize("strategy,mode,types", CASES)
def test_reverse_and_initial(gpu, rng, strategy, mode, types):
    dtype, op_name = types
    op = operator(op_name)
    for reverse, with_initial in itertools.product((False, True), (False, True)):
        if not (reverse or with_initial):
            continue
        init = initial_value(rng, dtype, op_name) if with_initial else None
        scan = options_scan(strategy, mode, dtype, op_name, reverse=reverse,
                            initial=1 if with_initial else None)
        for n in SIZES:
            x = random_input(rng, dtype, op_name, n)
            out = poisoned(gpu, rng, n, dtype)
            scan(gpu.to_gpu(x), out=out, initial=init)  # the per-call value wins
            want = scan_reference(x, op, mode, reverse=reverse, initial=init)
            assert_scan_equal(out.get(), want, dtype, n)


def test_constructor_initial_is_the_default(gpu, rng):
    scan = scangen.Scan(np.int64, "add", initial=1000)
    x = rng.integers(-50, 50, 10_001)
    np.testing.assert_array_equal(scan(gpu.to_gpu(x)).get(), 1000 + np.cumsum(x))
    np.testing.assert_array_equal(scan(gpu.to_gpu(x), initial=-3).get(), -3 + np.cumsum(x))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype,result", [("uint8", "int64"), ("int16", "int32"),
                                          ("float32", "float64"), ("uint32", "float64")])
def test_result_dtype(gpu, rng, strategy, dtype, result):
    scan = scangen.Scan(dtype, "add", result_dtype=result, strategy=strategy)
    for n in (1, 4097, 1_000_003):
        x = random_input(rng, dtype, "add", n)
        got = scan(gpu.to_gpu(x)).get()
        assert got.dtype == np.dtype(result)
        assert_scan_equal(got, scan_reference(x.astype(result), operator("add")), result, n)


@pytest.mark.parametrize("strategy,mode,types", CASES)
@pytest.mark.parametrize("reverse", [False, True])
def test_rows(gpu, rng, strategy, mode, types, reverse):
    dtype, op_name = types
    op = operator(op_name)
    scan = options_scan(strategy, mode, dtype, op_name, reverse=reverse)
    for rows, length in ((1, 1000), (7, SECTION + 3), (4096, 5), (3, SECTION**2 + 1), (5, 1)):
        x = random_input(rng, dtype, op_name, rows * length).reshape(rows, length)
        out = gpu.to_gpu(random_input(rng, dtype, op_name, rows * length).reshape(rows, length))
        scan(gpu.to_gpu(x), out=out)
        want = np.stack([scan_reference(row, op, mode, reverse=reverse) for row in x])
        assert_scan_equal(out.get().ravel(), want.ravel(), dtype, length)


def test_rows_validation(gpu):
    scan = scangen.Scan(np.float32, "add")
    with pytest.raises(ValueError, match="1-D \\(or 2-D, scanned row by row\\)"):
        scan(gpu.to_gpu(np.zeros((2, 2, 2), np.float32)))
    with pytest.raises(ValueError, match="initial= with 2-D"):
        scan(gpu.to_gpu(np.zeros((2, 3), np.float32)), initial=1.0)
