"""The tests' own checks, fed wrong answers: the float comparison, the reference fold and
the operator twins, the guard past an output, and what a run may skip."""
import numpy as np
import pytest

import scangen
from tests.support import (AFFINE, AFFINE_PAIRS, ARGMAX, BFLOAT16, OPERATORS, RUNNING_STATS,
                           SATURATING_ADD, STATS, TWINS, assert_guard_untouched,
                           assert_scan_equal, exact_affine_pairs, expected, flipped,
                           guarded_output, left_fold, reference, reference_fold, require_gpus,
                           require_module, require_nvcc, random_input, scan_reference, twin,
                           value_index_input)

SIZES = [4097, 262_147, 1_000_003]
FLOATS = ["float16", "float32", "float64", "complex64", "complex128"] + \
    (["bfloat16"] if BFLOAT16 is not None else [])


def _dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def _in_another_order(x, op_name):
    """The scan as a GPU might compute it: pairs of neighbours combined first, in a wider
    type (long double for the 64-bit types), then each running total rounded to x's
    type."""
    if x.dtype.kind == "c":
        wide = np.clongdouble if x.dtype == np.complex128 else np.complex128
    else:
        wide = np.longdouble if x.dtype == np.float64 else np.float64
    values = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64).astype(wide)
    ufunc = np.add if op_name == "add" else np.multiply
    pairs = ufunc(values[0::2][: values.size // 2], values[1::2])
    prefix = ufunc.accumulate(pairs)
    out = np.empty_like(values)
    out[1::2] = prefix
    out[0] = values[0]
    out[2::2] = ufunc(prefix[: out[2::2].size], values[2::2])
    narrow = np.complex128 if x.dtype.kind == "c" else np.float64
    return out.astype(narrow).astype(x.dtype) if wide in (np.longdouble, np.clongdouble) \
        else out.astype(x.dtype)


def _wrong_answers(rng, x, right, op_name):
    """Wrong results a tolerance must not let through."""
    identity = 0 if op_name == "add" else 1
    distance = np.abs(x.astype(np.complex128) - identity)
    moving = np.flatnonzero(distance >= distance.max() / 2)
    j = int(moving[rng.integers(moving.size)])
    without_one = x.copy()
    without_one[j] = identity
    shifted = np.concatenate([np.array([identity], x.dtype), right[:-1]])
    return {"zeros": np.zeros_like(right), "ones": np.ones_like(right), "negated": -right,
            f"x[{j}] dropped": _in_another_order(without_one, op_name),
            "shifted by one": shifted}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op_name", ["add", "mul"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_float_comparison_passes_right_and_fails_wrong_answers(rng, dtype, op_name, n):
    """random_input builds float inputs whose scans are exact in any order: a right answer
    from another order passes, and every wrong one fails, at every size."""
    dtype = _dtype(dtype)
    x = random_input(rng, dtype, op_name, n)
    op = OPERATORS[op_name]
    want = expected(x, op, "inclusive")
    right = _in_another_order(x, op_name)
    assert_scan_equal(right, want, dtype, n, op=op)
    assert_scan_equal(right, want, dtype, n)  # without op= too
    # without op= the bound is the running sum of |steps|: loose for complex products
    ops = (op,) if (op_name, dtype.kind) == ("mul", "c") else (op, None)
    for what, wrong in _wrong_answers(rng, x, right, op_name).items():
        for op_given in ops:
            with pytest.raises(AssertionError):
                assert_scan_equal(wrong, want, dtype, n, op=op_given)
                pytest.fail(f"{what} passed (op={op_given})")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_inexact_sums_are_bounded_by_the_running_sum(rng, dtype, n):
    """Inputs that do not sum exactly: another order passes; zeros, ones and the negation
    fail at every size; a dropped element or a shift by one fails where its size is above
    the rounding the bound allows (64 eps times the running sum of |x|)."""
    dtype = np.dtype(dtype)
    x = rng.uniform(0.5, 1.0, n).astype(dtype)
    if dtype.kind == "c":
        x = (x + 1j * rng.uniform(0.5, 1.0, n)).astype(dtype)
    want = expected(x, OPERATORS["add"], "inclusive")
    right = _in_another_order(x, "add")
    assert_scan_equal(right, want, dtype, n, op="add")
    assert_scan_equal(right, want, dtype, n)
    eps = np.finfo(dtype).eps
    for what, wrong in _wrong_answers(rng, x, right, "add").items():
        if what in ("zeros", "ones", "negated") or 64 * eps * n < 0.25:
            with pytest.raises(AssertionError):
                assert_scan_equal(wrong, want, dtype, n, op="add")
                pytest.fail(f"{what} passed")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["complex64", "complex128", "float32"])
def test_inexact_products_are_bounded_by_the_running_product(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        x = random_input(rng, dtype, "mul", n)  # on the unit circle, not exact
    else:
        x = rng.uniform(0.999, 1.001, n).astype(dtype)
    want = expected(x, OPERATORS["mul"], "inclusive")
    right = _in_another_order(x, "mul")
    assert_scan_equal(right, want, dtype, n, op="mul")
    for what, wrong in _wrong_answers(rng, x, right, "mul").items():
        with pytest.raises(AssertionError):
            assert_scan_equal(wrong, want, dtype, n, op="mul")
            pytest.fail(f"{what} passed")


def test_selecting_operators_compare_exactly(rng):
    x = rng.normal(size=5000).astype(np.float32)
    want = reference(x, "max")
    assert_scan_equal(want.copy(), want, np.float32, x.size, op="max")
    nudged = want.copy()
    nudged[-1] = np.nextafter(nudged[-1], np.float32(np.inf))
    with pytest.raises(AssertionError):
        assert_scan_equal(nudged, want, np.float32, x.size, op="max")


def test_reverse_scans_bound_from_their_start(rng):
    x = rng.uniform(0.5, 1.0, 20_000)
    want = scan_reference(x, OPERATORS["add"], reverse=True)
    assert_scan_equal(want.astype(np.float64), want, np.float64, x.size, op="add",
                      reverse=True)
    dropped = want.astype(np.float64)
    dropped[-10:] -= x[-20]
    with pytest.raises(AssertionError):
        assert_scan_equal(dropped, want, np.float64, x.size, op="add", reverse=True)


# --- the reference fold and the twins --------------------------------------------------------

NON_COMMUTATIVE = [("uint64", AFFINE, lambda rng, n: random_input(rng, "uint64", "affine_then",
                                                                   n)),
                   ("int32", OPERATORS["last_nonzero"],
                    lambda rng, n: random_input(rng, "int32", "last_nonzero", n)),
                   (None, AFFINE_PAIRS, exact_affine_pairs),
                   (None, ARGMAX, value_index_input)]


@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 1000, 4099])
@pytest.mark.parametrize("case", NON_COMMUTATIVE, ids=lambda c: c[1].name)
def test_reference_fold_is_the_left_fold(rng, case, n):
    _, op, make = case
    x = make(rng, n)
    want = left_fold(x, twin(op))
    np.testing.assert_array_equal(reference_fold(x, twin(op)), want)
    np.testing.assert_array_equal(reference(x, op), want)
    if n > 1000:  # the operands in the other order give another answer: the check can fail
        swapped = left_fold(x, lambda a, b: twin(op)(b, a))
        assert np.any(swapped != want)


def test_left_fold_by_hand():
    last_nonzero = twin("last_nonzero")
    np.testing.assert_array_equal(left_fold(np.array([0, 3, 0, 5, 0, 0, 7]), last_nonzero),
                                  [0, 3, 3, 5, 5, 5, 7])
    # x -> 3x + 1, then x -> 2x + 5: x -> 6x + 7; then x -> 1x + 0 changes nothing
    maps = np.array([3 << 32 | 1, 2 << 32 | 5, 1 << 32], np.uint64)
    np.testing.assert_array_equal(reference(maps, AFFINE), [3 << 32 | 1, 6 << 32 | 7,
                                                            6 << 32 | 7])
    np.testing.assert_array_equal(reference(maps, AFFINE, "exclusive"),
                                  [1 << 32, 3 << 32 | 1, 6 << 32 | 7])
    np.testing.assert_array_equal(reference(np.array([5, 1, 4], np.int8), "min", "exclusive"),
                                  [127, 5, 1])
    # a suffix scan: element i is x[i] op ... op x[n-1], with x[i] the earlier operand
    np.testing.assert_array_equal(scan_reference(maps[:2], AFFINE, reverse=True),
                                  [6 << 32 | 7, 2 << 32 | 5])
    assert flipped(AFFINE).reference(maps[0], maps[1]) == twin(AFFINE)(maps[1], maps[0])


def test_twins_are_the_tests_own():
    """Every operator the references use combines with code written in tests/support (or
    the test that defines the operator), never scangen's own twin."""
    for op in [*OPERATORS.values(), AFFINE, AFFINE_PAIRS]:  # the library's
        assert twin(op) is TWINS[op.name], op.name
    for op in [ARGMAX, RUNNING_STATS, SATURATING_ADD]:  # written in tests.support
        assert twin(op) is op.reference and op.reference.__module__ == "tests.support"
    assert set(TWINS) >= {"add", "mul", "min", "max", "bit_and", "bit_or", "bit_xor",
                          "last_nonzero", "affine_then", "affine_f64x2"}
    # a library operator with no twin written here is refused, not taken from the library
    stray = scangen.Operator("a", 0, name="no_twin_here",
                             reference=scangen.ops.last_nonzero_reference)
    with pytest.raises(ValueError, match="no numpy twin written in the tests"):
        twin(stray)


@pytest.mark.parametrize("name", ["add", "mul", "min", "max", "bit_and", "bit_or", "bit_xor",
                                  "last_nonzero", "affine_then"])
def test_twins_agree_with_the_library_on_random_values(rng, name):
    """Written separately, the two agree (a disagreement is a bug on one side)."""
    dtype = "uint64" if name == "affine_then" else "int32"
    a, b = (random_input(rng, dtype, name, 1000) for _ in range(2))
    op = AFFINE if name == "affine_then" else OPERATORS[name]
    np.testing.assert_array_equal(twin(op)(a, b), op.reference(a, b))


def test_struct_twin_matches_the_bench_operator(rng):
    a, b = exact_affine_pairs(rng, 100), exact_affine_pairs(rng, 100)
    np.testing.assert_array_equal(twin(AFFINE_PAIRS)(a, b), AFFINE_PAIRS.reference(a, b))
    stats = np.zeros(3, STATS)
    stats["count"], stats["mean"] = 1.0, [1.0, 2.0, 3.0]
    folded = reference(stats, RUNNING_STATS)
    assert folded[-1]["count"] == 3 and folded[-1]["mean"] == 2.0 and folded[-1]["m2"] == 2.0


# --- guarded outputs -------------------------------------------------------------------------

class _HostArrays:
    """Just enough of pycuda.gpuarray on the host: to_gpu, views by slicing, get."""

    class Array:
        def __init__(self, data):
            self.data = data

        def __getitem__(self, key):
            return _HostArrays.Array(self.data[key])

        def get(self):
            return self.data.copy()

    @staticmethod
    def to_gpu(values):
        return _HostArrays.Array(np.array(values))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_guard_notices_a_write_past_n(rng, dtype):
    guarded = guarded_output(_HostArrays, rng, 100, dtype)
    assert guarded.out.data.size == 100
    guarded.out.data[:] = 1
    np.testing.assert_array_equal(assert_guard_untouched(guarded), np.ones(100, dtype))
    guarded.whole.data[100] = 1  # one element past the end
    with pytest.raises(AssertionError, match="written past its 100 elements, at n \\+ 0"):
        assert_guard_untouched(guarded)


# --- what a run may skip ---------------------------------------------------------------------

def test_missing_module_skips_or_fails(monkeypatch):
    monkeypatch.delenv("SCANGEN_REQUIRE_GPU", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require_module("scangen_no_such_module")
    monkeypatch.setenv("SCANGEN_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception, match="SCANGEN_REQUIRE_GPU=1 but"):
        require_module("scangen_no_such_module")
    monkeypatch.setenv("SCANGEN_ALLOW_SKIP", "numba, scangen_no_such_module")
    with pytest.raises(pytest.skip.Exception):
        require_module("scangen_no_such_module")
    assert require_module("numpy") is np


def test_too_few_gpus_skip_only_where_allowed(monkeypatch):
    from scangen import compile as scan_compile

    driver = type("driver", (), {"Device": type("Device", (), {"count": staticmethod(
        lambda: 1)})})
    monkeypatch.setattr(scan_compile, "require_pycuda", lambda: driver)
    monkeypatch.setenv("SCANGEN_REQUIRE_GPU", "1")
    monkeypatch.delenv("SCANGEN_ALLOW_SKIP", raising=False)
    with pytest.raises(pytest.fail.Exception, match="1 GPU\\(s\\) here: this test needs 2"):
        require_gpus(2)
    monkeypatch.setenv("SCANGEN_ALLOW_SKIP", "multi_gpu")
    with pytest.raises(pytest.skip.Exception):
        require_gpus(2)
    require_gpus(1)


def test_missing_nvcc_fails_when_required(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("SCANGEN_REQUIRE_NVCC", raising=False)
    with pytest.raises(pytest.skip.Exception, match="nvcc is not on PATH"):
        require_nvcc()
    monkeypatch.setenv("SCANGEN_REQUIRE_NVCC", "1")
    with pytest.raises(pytest.fail.Exception, match="SCANGEN_REQUIRE_NVCC=1 but nvcc"):
        require_nvcc()


def test_only_a_missing_gpu_skips(monkeypatch):
    """No PyCUDA or no device: a reason to skip. Any other error making a context current
    propagates, so the test errors instead of skipping."""
    from scangen import compile as scan_compile
    from tests.conftest import _gpu_unavailable_reason

    def missing():
        raise scan_compile.GPUUnavailableError("no usable CUDA device")

    def broken():
        raise RuntimeError("cuInit failed in a way nobody expected")

    monkeypatch.setattr(scan_compile, "current_context", missing)
    assert _gpu_unavailable_reason() == "no GPU: no usable CUDA device"
    monkeypatch.setattr(scan_compile, "current_context", broken)
    with pytest.raises(RuntimeError, match="nobody expected"):
        _gpu_unavailable_reason()
