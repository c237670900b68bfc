"""Scan's reverse, initial (per construction and per call; struct, complex and bfloat16
values too), result_dtype (conversions from half precision and into complex too) and 2-D
rows (each starting from the initial value) on the GPU, every strategy, non-commutative
operators, against tests.support.scan_reference."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES, STRATEGIES

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, ARGMAX, BFLOAT16, VALUE_INDEX,
                           assert_scan_equal, exact_affine_pairs, needs_bfloat16, operator,
                           poisoned, precompile, random_input, scan_reference,
                           value_index_input)

SECTION = 64
TYPES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "add")]
CASES = list(itertools.product(STRATEGIES, MODES, TYPES))
SIZES = [1, 2, SECTION - 1, SECTION, SECTION + 1, SECTION**2 + 1, 3 * SECTION**2 + 7]
#: Values passed by their bytes as initial=: 16-byte structs (non-commutative) and complex.
BY_BYTES = [(AFFINE_PAIR, "affine_pairs"), (VALUE_INDEX, "argmax"),
            (np.dtype(np.complex64), "mul"), (np.dtype(np.complex128), "add")]
#: result_dtype conversions beyond integer and float widening (tests/cpu/test_scan_options.py
#: shows their C); inputs whose sums the result type holds exactly or within tolerance.
CONVERSIONS = [("float16", "float32"), ("float16", "float64"), ("float32", "complex64"),
               ("int16", "complex128"), ("complex64", "complex128")]
BFLOAT16_OPERATORS = ["add", "mul", "min", "max", "last_nonzero"]


def any_operator(name):
    return {"affine_pairs": AFFINE_PAIRS, "argmax": ARGMAX}.get(name) or operator(name)


def options_scan(strategy, mode, dtype, op_name, **options):
    return scangen.Scan(dtype, any_operator(op_name), mode=mode, strategy=strategy,
                        section_size=SECTION, **options)


def exact_input(rng, dtype, op_name, n):
    """random_input, and for the structs values whose scans are exact in any order."""
    if op_name == "affine_pairs":
        return exact_affine_pairs(rng, n)
    if op_name == "argmax":
        return value_index_input(rng, n)
    return random_input(rng, dtype, op_name, n)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    scans = []
    for strategy, mode, (dtype, op_name) in CASES:
        scans += [options_scan(strategy, mode, dtype, op_name, reverse=True),
                  options_scan(strategy, mode, dtype, op_name, initial=1),
                  options_scan(strategy, mode, dtype, op_name, reverse=True, initial=1)]
        scans.append(options_scan(strategy, mode, dtype, op_name, reverse=True).rows_kernel)
        scans.append(options_scan(strategy, mode, dtype, op_name).rows_kernel)
        scans.append(options_scan(strategy, mode, dtype, op_name, initial=1).rows_kernel)
    for strategy, mode, (dtype, op_name) in itertools.product(STRATEGIES, MODES, BY_BYTES):
        built = options_scan(strategy, mode, dtype, op_name,
                             initial=exact_input(np.random.default_rng(0), dtype, op_name, 1)[0])
        scans += [built, built.rows_kernel]
    scans += [scangen.Scan(d, "add", result_dtype=r, strategy=s)
              for (d, r), s in itertools.product(CONVERSIONS, STRATEGIES)]
    if BFLOAT16 is not None:
        scans += [options_scan(s, m, BFLOAT16, o) for s, m, o in
                  itertools.product(STRATEGIES, MODES, BFLOAT16_OPERATORS)]
        scans += [scangen.Scan(BFLOAT16, operator(o), strategy=s, initial=0.5)
                  for s, o in itertools.product(STRATEGIES, BFLOAT16_OPERATORS)]
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
        assert_scan_equal(out.get().ravel(), want.ravel(), dtype, length, op=op,
                          reverse=reverse)


def test_rows_validation(gpu):
    scan = scangen.Scan(np.float32, "add")
    with pytest.raises(ValueError, match="axis -4 is out of range"):
        scan(gpu.to_gpu(np.zeros((2, 2, 2), np.float32)), axis=-4)
    with pytest.raises(TypeError, match="built without initial="):
        scan(gpu.to_gpu(np.zeros((2, 3), np.float32)), initial=1.0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype,result", CONVERSIONS)
def test_result_dtype_conversions(gpu, rng, strategy, dtype, result):
    scan = scangen.Scan(dtype, "add", result_dtype=result, strategy=strategy)
    for n in (1, 4097, 300_001):
        x = random_input(rng, dtype, "add", n)
        out = poisoned(gpu, rng, n, result)
        scan(gpu.to_gpu(x), out=out)
        assert_scan_equal(out.get(), scan_reference(x.astype(result), operator("add")), result,
                          n)


@pytest.mark.parametrize("strategy,mode,types", CASES)
def test_rows_start_from_initial(gpu, rng, strategy, mode, types):
    dtype, op_name = types
    op = operator(op_name)
    scan = options_scan(strategy, mode, dtype, op_name, initial=1)
    for rows, length in ((1, 1000), (7, SECTION + 3), (4096, 5), (3, SECTION**2 + 1), (5, 1)):
        x = random_input(rng, dtype, op_name, rows * length).reshape(rows, length)
        for initial in (None, initial_value(rng, dtype, op_name)):  # the constructor's, a call's
            out = poisoned(gpu, rng, rows * length, dtype).reshape(rows, length)
            scan(gpu.to_gpu(x), out=out, initial=initial)
            start = np.dtype(dtype).type(1) if initial is None else initial
            want = np.stack([scan_reference(row, op, mode, initial=start) for row in x])
            assert_scan_equal(out.get().ravel(), want.ravel(), dtype, length, op=op)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,op_name", BY_BYTES, ids=[name for _, name in BY_BYTES])
def test_struct_and_complex_initials(gpu, rng, strategy, mode, dtype, op_name):
    """initial= passed by its bytes: 1-D and rows, the constructor's value and a call's."""
    op = any_operator(op_name)
    default = exact_input(rng, dtype, op_name, 1)[0]
    scan = options_scan(strategy, mode, dtype, op_name, initial=default)
    for n in SIZES:
        x = exact_input(rng, dtype, op_name, n)
        for initial in (None, exact_input(rng, dtype, op_name, 1)[0]):
            start = default if initial is None else initial
            out = poisoned(gpu, rng, n, dtype)
            scan(gpu.to_gpu(x), out=out, initial=initial)
            check(out.get(), scan_reference(x, op, mode, initial=start), dtype, n, op)
    rows, length = 9, SECTION + 1
    x = exact_input(rng, dtype, op_name, rows * length)
    out = poisoned(gpu, rng, rows * length, dtype).reshape(rows, length)
    scan(gpu.to_gpu(x.reshape(rows, length)), out=out)
    want = np.concatenate([scan_reference(row, op, mode, initial=default)
                           for row in x.reshape(rows, length)])
    check(out.get().ravel(), want, dtype, length, op)


def check(got, want, dtype, n, op):
    """Structs: every field exactly (their inputs are exact); complex within the bound of
    ``op``."""
    if dtype.fields is None:
        assert_scan_equal(got, want, dtype, n, op=op)
    else:
        np.testing.assert_array_equal(got, want)


@needs_bfloat16
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("op_name", BFLOAT16_OPERATORS)
def test_bfloat16_against_numpy(gpu, rng, strategy, op_name):
    """Inputs whose scans are exact in bfloat16 (tests.support.random_input), so the GPU
    must agree with numpy's (ml_dtypes') bfloat16 exactly, in any order of combining."""
    op = operator(op_name)
    for mode in MODES:
        scan = options_scan(strategy, mode, BFLOAT16, op_name)
        for n in SIZES:
            x = random_input(rng, BFLOAT16, op_name, n)
            out = poisoned(gpu, rng, n, BFLOAT16)
            scan(gpu.to_gpu(x), out=out)
            want = scan_reference(x, op, mode).astype(np.float64)
            np.testing.assert_array_equal(out.get().astype(np.float64), want,
                                          err_msg=f"{mode} n={n}")
    scan = scangen.Scan(BFLOAT16, op, strategy=strategy, initial=0.5)  # initial by its bytes
    x = random_input(rng, BFLOAT16, op_name, 5000)
    want = scan_reference(x, op, initial=BFLOAT16.type(-2.0)).astype(np.float64)
    np.testing.assert_array_equal(scan(gpu.to_gpu(x), initial=-2.0).get().astype(np.float64),
                                  want)
