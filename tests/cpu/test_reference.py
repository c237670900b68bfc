"""The CPU reference scans every GPU test trusts: scangen.reference_scan (ufunc accumulate, or
recursive doubling for other operators) against scangen.reference.sequential_scan (the
definition, one element at a time), and both against hand-checked values."""
import numpy as np
import pytest

from scangen import BUILTIN_OPERATORS, LAST_NONZERO, MODES, Operator, reference_scan
from scangen.ops import AFFINE_THEN
from scangen.reference import sequential_scan

INTEGER_NAMES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOAT_NAMES = ["float32", "float64"]
SIZES = [0, 1, 2, 7, 1000]

_MASK32 = np.uint64(0xFFFFFFFF)
#: Strongly non-commutative (function composition), with a reference that is not a ufunc.
AFFINE = AFFINE_THEN

#: Saturating add on uint8: associative on non-negatives, and its reference is not a ufunc.
SATURATING_ADD = Operator(
    "sat_add(a, b)", 0, name="sat_add",
    reference=lambda a, b: np.minimum(np.asarray(a, np.int64) + b, 255).astype(np.uint8))


def random_values(rng, dtype, n, op_name):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if op_name == "mul":
            # log-normal near 1: products stay finite and non-zero over 1000 factors
            return np.exp(rng.normal(scale=0.05, size=n)).astype(dtype)
        return rng.normal(scale=100.0, size=n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def with_zeros(rng, values, fraction=0.7):
    values = values.copy()
    values[rng.random(values.size) < fraction] = 0
    return values


BUILTIN_CASES = [(op, dtype) for op in BUILTIN_OPERATORS for dtype in INTEGER_NAMES + FLOAT_NAMES
                 if not (op.startswith("bit_") and dtype in FLOAT_NAMES)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_name,dtype", BUILTIN_CASES)
def test_builtin_reference_equals_the_definition(op_name, dtype, mode, rng):
    for n in SIZES:
        x = random_values(rng, dtype, n, op_name)
        before = x.copy()
        got = reference_scan(x, op_name, mode)
        want = sequential_scan(x, op_name, mode)
        assert got.dtype == want.dtype == np.dtype(dtype)
        assert got.shape == (n,)
        # Both fold left in the element type, so even float results agree bit for bit.
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, before)  # the input is left alone


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", INTEGER_NAMES + FLOAT_NAMES)
def test_last_nonzero_by_recursive_doubling_equals_the_definition(dtype, mode, rng):
    sizes = list(range(0, 40)) + [63, 64, 65, 127, 128, 129, 255, 257, 1000, 1023, 1025]
    for n in sizes:
        x = with_zeros(rng, random_values(rng, dtype, n, "last_nonzero"))
        got = reference_scan(x, LAST_NONZERO, mode)
        want = sequential_scan(x, LAST_NONZERO, mode)
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}")
        assert got.dtype == np.dtype(dtype)


def _last_nonzero_by_hand(x, mode):
    out, last = [], 0
    for value in x:
        if mode == "exclusive":
            out.append(last)
        last = value if value != 0 else last
        if mode == "inclusive":
            out.append(last)
    return np.array(out, dtype=x.dtype)


@pytest.mark.parametrize("mode", MODES)
def test_last_nonzero_matches_its_meaning(mode, rng):
    for n in (1, 5, 33, 300):
        x = with_zeros(rng, rng.integers(-50, 50, n).astype(np.int16), fraction=0.8)
        np.testing.assert_array_equal(reference_scan(x, LAST_NONZERO, mode),
                                      _last_nonzero_by_hand(x, mode))


@pytest.mark.parametrize("mode", MODES)
def test_non_commutative_affine_composition(mode, rng):
    for n in [0, 1, 2, 3, 5, 8, 13, 100, 129, 1000]:
        x = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
        got = reference_scan(x, AFFINE, mode)
        np.testing.assert_array_equal(got, sequential_scan(x, AFFINE, mode), err_msg=f"n={n}")
        if n >= 3 and mode == "inclusive":
            # Applying the scanned map is applying the maps one after another.
            point = np.uint64(12345)
            step = point
            for k in range(n):
                m, c = x[k] >> np.uint64(32), x[k] & _MASK32
                step = (m * step + c) & _MASK32
                gm, gc = got[k] >> np.uint64(32), got[k] & _MASK32
                assert (gm * point + gc) & _MASK32 == step
    # the reversed order gives a different answer: the test can see operand-order mistakes
    x = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64, endpoint=True)
    assert reference_scan(x, AFFINE)[-1] != reference_scan(x[::-1].copy(), AFFINE)[-1]


@pytest.mark.parametrize("mode", MODES)
def test_user_reference_that_is_not_a_ufunc(mode, rng):
    for n in [0, 1, 2, 31, 32, 33, 500]:
        x = rng.integers(0, 40, n).astype(np.uint8)
        np.testing.assert_array_equal(reference_scan(x, SATURATING_ADD, mode),
                                      sequential_scan(x, SATURATING_ADD, mode))
    x = np.full(20, 30, np.uint8)
    assert reference_scan(x, SATURATING_ADD)[-1] == 255
    # add through a lambda takes the doubling path and must agree with the ufunc path
    plus = Operator("a + b", 0, name="plus", reference=lambda a, b: a + b)
    x = rng.integers(-128, 127, 777, dtype=np.int8, endpoint=True)
    np.testing.assert_array_equal(reference_scan(x, plus, mode), reference_scan(x, "add", mode))


# --- hand-checked values -------------------------------------------------------------------

def test_lecture_example():
    x = np.array([3, 1, 7, 0, 4, 1, 6, 3], dtype=np.int32)
    inclusive = [3, 4, 11, 11, 15, 16, 22, 25]
    exclusive = [0, 3, 4, 11, 11, 15, 16, 22]
    for scan in (reference_scan, sequential_scan):
        np.testing.assert_array_equal(scan(x, "add", "inclusive"), inclusive)
        np.testing.assert_array_equal(scan(x, "add", "exclusive"), exclusive)
        np.testing.assert_array_equal(scan(x, "add"), inclusive)  # inclusive by default
    np.testing.assert_array_equal(reference_scan(x, "max"), [3, 3, 7, 7, 7, 7, 7, 7])
    np.testing.assert_array_equal(reference_scan(x, "min", "exclusive"),
                                  [2**31 - 1, 3, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(reference_scan(x, LAST_NONZERO), [3, 1, 7, 7, 4, 1, 6, 3])


@pytest.mark.parametrize("scan", [reference_scan, sequential_scan])
def test_integer_wrapping_matches_numpy(scan):
    x = np.full(5, 100, np.int8)
    np.testing.assert_array_equal(scan(x, "add"), [100, -56, 44, -112, -12])
    np.testing.assert_array_equal(scan(x, "add", "exclusive"), [0, 100, -56, 44, -112])
    np.testing.assert_array_equal(scan(np.array([16, 16, 16, 3], np.uint8), "mul"), [16, 0, 0, 0])
    np.testing.assert_array_equal(scan(np.array([2**64 - 1, 2], np.uint64), "add"),
                                  np.array([2**64 - 1, 1], np.uint64))
    np.testing.assert_array_equal(scan(np.array([2**63 - 1, 1], np.int64), "add"),
                                  [2**63 - 1, -2**63])
    np.testing.assert_array_equal(scan(np.array([-2**31, -1], np.int32), "add"),
                                  [-2**31, 2**31 - 1])


@pytest.mark.parametrize("scan", [reference_scan, sequential_scan])
@pytest.mark.parametrize("op,dtype,first", [
    ("max", "float32", -np.inf), ("max", "float64", -np.inf), ("min", "float32", np.inf),
    ("max", "int8", -128), ("min", "uint64", 2**64 - 1), ("max", "int64", -2**63),
    ("bit_and", "uint16", 65535), ("bit_and", "int32", -1), ("mul", "float64", 1.0),
    ("add", "uint8", 0), ("bit_or", "int16", 0), (LAST_NONZERO, "float32", 0.0),
])
def test_exclusive_starts_at_the_identity(scan, op, dtype, first, rng):
    x = random_values(rng, dtype, 9, "")
    got = scan(x, op, "exclusive")
    assert got[0] == np.dtype(dtype).type(first)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got[1:], scan(x, op, "inclusive")[:-1])


def test_float32_scan_stays_in_float32():
    x = np.full(2**12, 2.0**-12, np.float32)
    x[0] = 2.0**12
    got = reference_scan(x, "add")
    assert got.dtype == np.float32
    # In float32 every later add is lost against 4096 (the spacing there is 2^-11): a scan
    # computed in float64 and rounded at the end would not be.
    assert got[-1] == np.float32(2.0**12)


def test_operator_without_reference_is_refused_clearly():
    op = Operator("a + b", 0, name="no_twin")
    with pytest.raises(ValueError, match="operator 'no_twin' has no numpy reference; pass "
                                         "reference= to it"):
        reference_scan(np.arange(4, dtype=np.int32), op)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown mode 'both'"):
        reference_scan(np.arange(4, dtype=np.int32), "add", "both")


def test_result_is_a_new_array(rng):
    for op in ("add", LAST_NONZERO):
        for mode in MODES:
            x = rng.integers(1, 9, 10).astype(np.int32)
            got = reference_scan(x, op, mode)
            assert not np.shares_memory(got, x)
