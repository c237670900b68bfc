"""The dtype table (scangen.types) and the operators (scangen.ops), without a GPU.

Literals are checked by value: a small parser reads back the C text the table emits, so a
literal that is spelled differently but means the same passes, and one that means something
else (or would overflow in C) fails.
"""
import pickle
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scangen
from scangen import BUILTIN_OPERATORS, ELEMENT_TYPES, LAST_NONZERO, Operator
from scangen.ops import resolve_operator
from scangen.types import element_type
from tests.support import BFLOAT16, needs_bfloat16

INTEGER_NAMES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOAT_NAMES = ["float32", "float64"]
ALL_NAMES = INTEGER_NAMES + FLOAT_NAMES

#: Sizes of the C types on every CUDA target (LP64 host, and the device follows the host).
C_SIZES = {"signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "int": 4,
           "unsigned int": 4, "long long": 8, "unsigned long long": 8, "float": 4, "double": 8}
C_SIGNED = {"signed char", "short", "int", "long long"}


# --- reading C literals back ------------------------------------------------------------

_CAST = re.compile(r"\(\s*(signed char|unsigned char|short|unsigned short|int|unsigned int|"
                   r"long long|unsigned long long)\s*\)")
_INT_TOKEN = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)([uU]?[lL]{0,2}|[lL]{0,2}[uU]?)\b")


def c_int_value(literal: str, c_name: str) -> int:
    """The value of an integer literal the table emitted, checking it is well-formed C.

    Every decimal token must fit the type C gives it (no negated literal that overflows, no
    unsigned value without a U suffix): that is what makes INT64_MIN and UINT64_MAX tricky.
    """
    casts = set(_CAST.findall(literal))
    assert casts <= {c_name}, f"{literal!r} casts to {casts}, not {c_name}"

    def token(match):
        digits, suffix = match.group(1), match.group(2).lower()
        value = int(digits, 0)
        if "u" in suffix:
            assert value <= 2**64 - 1, literal
        elif "ll" in suffix or value > 2**31 - 1:
            # A decimal literal without U that does not fit long long is ill-formed.
            assert value <= 2**63 - 1 or digits.lower().startswith("0x"), \
                f"{literal!r}: {digits} does not fit long long; it needs a U suffix"
        return digits if not digits.lower().startswith("0x") else str(value)

    python = _INT_TOKEN.sub(token, _CAST.sub("", literal))
    assert re.fullmatch(r"[\d\s()+\-]+", python), f"unexpected C in literal {literal!r}"
    value = eval(python)  # only digits, parentheses, + and - remain
    if c_name not in C_SIGNED:
        assert 0 <= value, f"{literal!r} is negative for unsigned {c_name}"
    return value


def c_float_value(literal: str, itemsize: int) -> float:
    """The value of a float literal: a plain literal, or an infinity spelled through its bits."""
    bits = re.fullmatch(r"__int_as_float\((0x[0-9A-Fa-f]+)[uU]?\)", literal)
    if bits:
        assert itemsize == 4, f"{literal!r} is a float32 spelling used for float64"
        return struct.unpack("<f", struct.pack("<I", int(bits.group(1), 16)))[0]
    bits = re.fullmatch(r"__longlong_as_double\((0x[0-9A-Fa-f]+)(?:[uU]?[lL]{2}|[lL]{2}[uU])?\)",
                        literal)
    if bits:
        assert itemsize == 8, f"{literal!r} is a float64 spelling used for float32"
        return struct.unpack("<d", struct.pack("<Q", int(bits.group(1), 16)))[0]
    if itemsize == 4:
        assert re.fullmatch(r"-?[\d.]+(e[+-]?\d+)?[fF]", literal), \
            f"float32 literal {literal!r} needs an f suffix (else it is a double)"
        return float(literal[:-1])
    assert re.fullmatch(r"-?[\d.]+(e[+-]?\d+)?", literal), f"bad float64 literal {literal!r}"
    return float(literal)


# --- the table ----------------------------------------------------------------------------

def test_table_covers_exactly_the_supported_types():
    assert sorted(np.dtype(d).name for d in ELEMENT_TYPES) == sorted(
        ALL_NAMES + ["float16", "complex64", "complex128"])
    for key, etype in ELEMENT_TYPES.items():
        assert key == etype.dtype
        assert etype.name == key.name


@pytest.mark.parametrize("name", ALL_NAMES)
def test_c_names_match_size_signedness_and_kind(name):
    etype = element_type(name)
    dtype = np.dtype(name)
    assert C_SIZES[etype.c_name] == dtype.itemsize == etype.itemsize
    assert etype.is_float == (dtype.kind == "f")
    assert etype.is_integer == (dtype.kind in "iu")
    if etype.is_float:
        assert etype.c_name == ("float" if dtype.itemsize == 4 else "double")
        assert etype.wrap_c_name is None
    else:
        assert (etype.c_name in C_SIGNED) == (dtype.kind == "i")
        # The wrapping type: unsigned, no narrower than the element and than int (so 8/16-bit
        # operands are not promoted to signed int, where overflow is undefined).
        wrap = etype.wrap_c_name
        assert wrap.startswith("unsigned")
        assert C_SIZES[wrap] >= max(4, dtype.itemsize)


@pytest.mark.parametrize("spelling,name", [
    ("int8", "int8"), (np.uint16, "uint16"), ("i4", "int32"), (np.dtype("u8"), "uint64"),
    ("f4", "float32"), (np.float64, "float64"), ("=i2", "int16"),
])
def test_element_type_accepts_every_numpy_spelling(spelling, name):
    assert element_type(spelling).name == name


@pytest.mark.parametrize("bad,message", [
    ("int128", "not a numpy dtype"), ("clongdouble", "unsupported dtype complex"),
    (bool, "unsupported dtype bool"), (object, "unsupported dtype object"),
    ("longdouble", "unsupported dtype float"), ("U4", "unsupported dtype"),
])
def test_element_type_rejects_others_and_lists_supported(bad, message):
    with pytest.raises(TypeError, match=message) as info:
        element_type(bad)
    if "unsupported" in message:
        assert "int8" in str(info.value) and "float64" in str(info.value)


@pytest.mark.parametrize("name", INTEGER_NAMES)
def test_integer_limits_and_all_ones(name):
    etype = element_type(name)
    info = np.iinfo(name)
    assert etype.lowest() == info.min and etype.highest() == info.max
    # all_ones is a value of the type whose bit pattern is all ones.
    assert np.array(etype.all_ones()).astype(name).view(f"u{info.bits // 8}") == 2**info.bits - 1
    assert info.min <= etype.all_ones() <= info.max


@pytest.mark.parametrize("name", FLOAT_NAMES)
def test_float_limits_are_infinities(name):
    etype = element_type(name)
    assert etype.lowest() == -np.inf and etype.highest() == np.inf


@pytest.mark.parametrize("name", INTEGER_NAMES)
def test_integer_literals_read_back_exactly(name, rng):
    etype = element_type(name)
    info = np.iinfo(name)
    values = {info.min, info.max, 0, 1, info.min + 1, info.max - 1}
    if info.min < 0:
        values |= {-1, -2**(info.bits - 1) + 7}
    values |= {int(v) for v in rng.integers(info.min, info.max, 20, dtype=name, endpoint=True)}
    for value in values:
        assert c_int_value(etype.literal(value), etype.c_name) == value, value
        # numpy integers are accepted like Python ints.
        assert etype.literal(np.dtype(name).type(value)) == etype.literal(value)


def test_extreme_64_bit_literals():
    int64, uint64 = element_type("int64"), element_type("uint64")
    assert c_int_value(int64.literal(-2**63), "long long") == -2**63
    assert "9223372036854775808" not in int64.literal(-2**63)  # -(2^63) overflows long long
    assert c_int_value(uint64.literal(2**64 - 1), "unsigned long long") == 2**64 - 1
    assert re.search(r"18446744073709551615[uU]", uint64.literal(2**64 - 1))
    assert c_int_value(int64.literal(2**63 - 1), "long long") == 2**63 - 1


@pytest.mark.parametrize("name", FLOAT_NAMES)
def test_float_literals_read_back_exactly(name, rng):
    etype = element_type(name)
    dtype = np.dtype(name)
    finfo = np.finfo(dtype)
    values = [0.0, 1.0, -1.0, 0.5, -0.0, float(finfo.max), float(-finfo.max), float(finfo.tiny),
              float(finfo.smallest_subnormal), float(finfo.eps), np.inf, -np.inf]
    values += [float(v) for v in rng.normal(scale=1e6, size=20).astype(dtype)]
    for value in values:
        literal = etype.literal(value)
        got = c_float_value(literal, dtype.itemsize)
        assert got == value and np.signbit(got) == np.signbit(value), (value, literal)
        if np.isfinite(value):
            assert dtype.type(got) == dtype.type(value)


def test_infinity_literals_by_bits():
    f32, f64 = element_type("float32"), element_type("float64")
    assert c_float_value(f32.literal(-np.inf), 4) == -np.inf
    assert c_float_value(f32.literal(np.inf), 4) == np.inf
    assert c_float_value(f64.literal(np.inf), 8) == np.inf
    assert c_float_value(f64.literal(-np.inf), 8) == -np.inf


# float32 literal(1e39) makes numpy warn about the overflowing cast before it raises.
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("name,value,message", [
    ("int8", 128, "does not fit int8"), ("int8", -129, "does not fit int8"),
    ("uint8", 256, "does not fit uint8"), ("uint8", -1, "does not fit uint8"),
    ("int16", 2**15, "does not fit int16"), ("uint16", 2**16, "does not fit uint16"),
    ("int32", -2**31 - 1, "does not fit int32"), ("uint32", -1, "does not fit uint32"),
    ("uint32", 2**32, "does not fit uint32"), ("int64", 2**63, "does not fit int64"),
    ("int64", -2**63 - 1, "does not fit int64"), ("uint64", 2**64, "does not fit uint64"),
    ("float32", 0.1, "not exactly representable as float32"),
    ("float32", 1e39, "not exactly representable as float32"),
    ("float32", 1 + 2**-30, "not exactly representable as float32"),
    ("float32", np.nan, "NaN"), ("float64", np.nan, "NaN"),
])
def test_literal_rejects_values_the_type_cannot_hold(name, value, message):
    with pytest.raises(ValueError, match=message):
        element_type(name).literal(value)


# --- operators --------------------------------------------------------------------------

EXPECTED_IDENTITY = {
    "add": lambda t: 0, "mul": lambda t: 1, "min": lambda t: t.highest(),
    "max": lambda t: t.lowest(), "bit_and": lambda t: t.all_ones(), "bit_or": lambda t: 0,
    "bit_xor": lambda t: 0,
}


def test_builtin_operator_names():
    assert set(BUILTIN_OPERATORS) == set(EXPECTED_IDENTITY)
    for name, op in BUILTIN_OPERATORS.items():
        assert op.name == name
        assert op.integer_only == name.startswith("bit_")
        assert op.reference is not None


def _values(rng, dtype, n=200):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.normal(scale=100, size=n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


BUILTIN_CASES = [(op, name) for op in BUILTIN_OPERATORS for name in ALL_NAMES
                 if not (op.startswith("bit_") and name in FLOAT_NAMES)]


@pytest.mark.parametrize("op_name,name", BUILTIN_CASES)
def test_builtin_identity_is_two_sided_neutral(op_name, name, rng):
    op = BUILTIN_OPERATORS[op_name]
    etype = element_type(name)
    identity = op.identity_for(etype)
    assert identity == EXPECTED_IDENTITY[op_name](etype)
    e = np.dtype(name).type(identity)
    x = _values(rng, name)
    with np.errstate(over="ignore"):
        left, right = op.reference(e, x), op.reference(x, e)
    np.testing.assert_array_equal(left.astype(name), x)
    np.testing.assert_array_equal(right.astype(name), x)
    # and the C literal of the identity means the same value
    literal = op.identity_literal(etype)
    if etype.is_float:
        assert c_float_value(literal, etype.itemsize) == identity
    else:
        assert c_int_value(literal, etype.c_name) == identity


@pytest.mark.parametrize("op_name,name", [c for c in BUILTIN_CASES if c[1] in INTEGER_NAMES])
def test_integer_references_are_associative_with_wrapping(op_name, name, rng):
    op = BUILTIN_OPERATORS[op_name]
    a, b, c = (_values(rng, name) for _ in range(3))
    with np.errstate(over="ignore"):
        left = op.reference(op.reference(a, b), c)
        right = op.reference(a, op.reference(b, c))
    assert left.dtype == np.dtype(name)
    np.testing.assert_array_equal(left, right)


@pytest.mark.parametrize("name", INTEGER_NAMES)
def test_integer_add_and_mul_are_spelled_in_an_unsigned_type(name):
    # Signed overflow is undefined in C++ and 8/16-bit operands promote to signed int:
    # the C expression must do its arithmetic in the table's unsigned wrapping type.
    etype = element_type(name)
    for op_name in ("add", "mul"):
        expression = BUILTIN_OPERATORS[op_name].c_expression(etype)
        assert etype.wrap_c_name in expression, expression
        assert re.search(r"\ba\b", expression) and re.search(r"\bb\b", expression)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_builtin_expressions_name_both_operands_for_every_type(name):
    etype = element_type(name)
    for op in BUILTIN_OPERATORS.values():
        if op.integer_only and etype.is_float:
            continue
        expression = op.c_expression(etype)
        assert expression.strip()
        # Both operands take part (a built-in that dropped one would scan to garbage).
        assert re.search(r"\ba\b", expression) and re.search(r"\bb\b", expression), expression


@pytest.mark.parametrize("name", FLOAT_NAMES)
def test_bitwise_operators_refuse_floats(name):
    for op_name in ("bit_and", "bit_or", "bit_xor"):
        with pytest.raises(TypeError, match="bitwise and needs an integer dtype"):
            BUILTIN_OPERATORS[op_name].check_dtype(name)


def test_last_nonzero_is_non_commutative_but_associative(rng):
    op = LAST_NONZERO
    assert op.identity == 0 and not op.integer_only
    a = np.where(rng.random(500) < 0.5, 0, rng.integers(-9, 9, 500)).astype(np.int32)
    b = np.where(rng.random(500) < 0.5, 0, rng.integers(-9, 9, 500)).astype(np.int32)
    c = np.where(rng.random(500) < 0.5, 0, rng.integers(-9, 9, 500)).astype(np.int32)
    assert np.any(op.reference(a, b) != op.reference(b, a))
    np.testing.assert_array_equal(op.reference(op.reference(a, b), c),
                                  op.reference(a, op.reference(b, c)))
    # identity on both sides, and the later non-zero wins
    np.testing.assert_array_equal(op.reference(np.int32(0), a), a)
    np.testing.assert_array_equal(op.reference(a, np.int32(0)), a)
    assert op.reference(np.int32(3), np.int32(5)) == 5
    assert op.reference(np.int32(3), np.int32(0)) == 3


def test_resolve_operator():
    custom = Operator("a + b", 0, name="plus")
    assert resolve_operator(custom) is custom
    for name, op in BUILTIN_OPERATORS.items():
        assert resolve_operator(name) is op
    with pytest.raises(ValueError, match="unknown operator 'sum'; built-in operators are add"):
        resolve_operator("sum")
    with pytest.raises(ValueError, match=r"scangen\.Operator\(expression, identity="):
        resolve_operator("ADD")
    for bad in (3, None, np.add):
        with pytest.raises(TypeError, match="operator must be a name or a scangen.Operator"):
            resolve_operator(bad)


@pytest.mark.parametrize("expression", ["", "   ", "\n\t"])
def test_operator_rejects_an_empty_expression(expression):
    with pytest.raises(ValueError, match="operator expression is empty"):
        Operator(expression, 0)


@pytest.mark.parametrize("name", ["my op", "1st", "", "a-b", "x;y"])
def test_operator_rejects_a_name_that_is_not_a_c_identifier(name):
    with pytest.raises(ValueError, match="must be a C identifier"):
        Operator("a + b", 0, name=name)


def test_operator_identity_and_expression_may_depend_on_the_type():
    op = Operator(lambda t: f"({t.c_name})(a | b)", lambda t: 0 if t.is_integer else 0.0,
                  name="per_type")
    assert op.c_expression(element_type("int16")) == "(short)(a | b)"
    assert c_int_value(op.identity_literal(element_type("uint8")), "unsigned char") == 0


def test_identity_error_names_operator_value_and_type():
    op = Operator("a + b", 300, name="wide")
    with pytest.raises(ValueError, match=r"identity 300 of operator 'wide' does not fit int8"):
        op.check_dtype("int8")
    assert op.check_dtype("int16").name == "int16"


@pytest.mark.parametrize("word,dtype,value", [
    ("highest", "int8", 127), ("lowest", "int8", -128), ("highest", "uint64", 2**64 - 1),
    ("lowest", "uint16", 0), ("highest", "float32", np.inf), ("lowest", "float64", -np.inf),
    (" Highest ", "int32", 2**31 - 1), ("inf", "float16", np.inf), ("-inf", "float32", -np.inf),
    ("0x10", "int32", 16), ("-2.5", "float32", -2.5),
])
def test_identity_words_resolve_per_dtype(word, dtype, value):
    op = Operator("b < a ? b : a", word, name="smallest")
    assert op.identity_for(element_type(dtype)) == value
    op.check_dtype(dtype)
    assert op == Operator("b < a ? b : a", word.strip().lower(), name="smallest")
    assert hash(op) == hash(pickle.loads(pickle.dumps(op)))


def test_builtin_min_and_max_take_the_same_words():
    assert scangen.BUILTIN_OPERATORS["min"].identity == "highest"
    assert scangen.BUILTIN_OPERATORS["max"].identity == "lowest"


@pytest.mark.parametrize("identity,dtype,error,message", [
    ("zero", None, ValueError, r"identity 'zero' is not a number or one of lowest, highest"),
    ("nan", None, ValueError, "identity 'nan' is not a number"),
    ("", None, ValueError, "identity '' is not a number"),
    ("highest", "complex64", TypeError, r"identity 'highest' of operator 'w' is a limit of a "
                                        r"real type; complex64 has none"),
    ("lowest", np.dtype([("x", np.int32)]), TypeError, "is a limit of a real type"),
    ("inf", "int32", ValueError, "identity inf of operator 'w' does not fit int32"),
])
def test_bad_identity_words(identity, dtype, error, message):
    with pytest.raises(error, match=message):
        op = Operator("a", identity, name="w")
        scangen.Scan(dtype, op)


def test_operators_are_hashable_values():
    one = Operator("a + b", 0, name="plus")
    two = Operator("a + b", 0, name="plus")
    assert one == two and hash(one) == hash(two)
    assert one != Operator("a + b", 1, name="plus")


def test_half_and_complex_types():
    half = element_type("float16")
    assert half.c_name == "__half" and half.includes == ("cuda_fp16.h",) and half.is_float
    assert half.literal(1.0) == "__ushort_as_half((unsigned short)0x3C00)"
    assert half.literal(float("-inf")) == "__ushort_as_half((unsigned short)0xFC00)"
    with pytest.raises(ValueError, match="not exactly representable as float16"):
        half.literal(0.1)
    for name, part in (("complex64", "float"), ("complex128", "double")):
        c = element_type(name)
        assert c.is_complex and not c.is_float and c.alignment == np.dtype(name).alignment
        assert f"{part} re;" in c.declarations and f"{part} im;" in c.declarations
    assert element_type("complex64").literal(1 + 2j) == "scangen_complex64{1.0f, 2.0f}"
    with pytest.raises(TypeError, match="is complex; float32 is not"):
        element_type("float32").literal(1j)
    with pytest.raises(TypeError, match="needs real values; complex64 is complex"):
        BUILTIN_OPERATORS["max"].check_dtype("complex64")
    with pytest.raises(TypeError, match="needs real values"):
        LAST_NONZERO.check_dtype("complex128")
    assert "scan_t{a.re * b.re - a.im * b.im" in BUILTIN_OPERATORS["mul"].c_expression(
        element_type("complex64"))


@needs_bfloat16
def test_bfloat16_type_mirrors_float16():
    bf, half = element_type(BFLOAT16), element_type("float16")
    assert bf.c_name == "__nv_bfloat16" and bf.includes == ("cuda_bf16.h",)
    assert bf.is_float and bf.is_half and not bf.is_complex and bf.itemsize == 2
    assert bf.name == "bfloat16" and bf.finfo().eps == 2.0 ** -7
    assert bf.literal(1.0) == "__ushort_as_bfloat16((unsigned short)0x3F80)"
    assert bf.literal(float("-inf")) == "__ushort_as_bfloat16((unsigned short)0xFF80)"
    assert bf.literal(-3.0) == "__ushort_as_bfloat16((unsigned short)0xC040)"
    with pytest.raises(ValueError, match="not exactly representable as bfloat16"):
        bf.literal(0.1)
    with pytest.raises(ValueError, match="not exactly representable as bfloat16"):
        bf.literal(1e39)  # past bfloat16's largest finite value
    # the built-ins spell themselves for __nv_bfloat16 exactly as for __half: cuda_bf16.h
    # gives the type the same operators cuda_fp16.h gives __half
    for name in ("add", "mul", "min", "max"):
        op = BUILTIN_OPERATORS[name]
        op.check_dtype(BFLOAT16)
        assert op.c_expression(bf) == op.c_expression(half)
    assert BUILTIN_OPERATORS["min"].identity_literal(bf) == bf.literal(float("inf"))
    with pytest.raises(TypeError, match="bitwise and needs an integer dtype, not bfloat16"):
        BUILTIN_OPERATORS["bit_and"].check_dtype(BFLOAT16)
    assert LAST_NONZERO.c_expression(bf) == \
        "b != __ushort_as_bfloat16((unsigned short)0x0000) ? b : a"


def _run(script):
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_ml_dtypes_is_imported_only_for_its_own_dtypes():
    """scangen recognises bfloat16 by the dtype's name and module: other types never import
    ml_dtypes; naming "bfloat16" imports it, or says it is missing."""
    imported, = _run("import sys, numpy as np, scangen\n"
                     "scangen.Scan(np.float16, 'add'); scangen.Scan(np.complex64, 'mul')\n"
                     "scangen.Scan(np.dtype([('m', 'f8'), ('c', 'f8')]),\n"
                     "             scangen.Operator('a', (0.0, 0.0)))\n"
                     "print('ml_dtypes' in sys.modules)\n")
    assert imported == "False"
    missing, = _run("import sys\nsys.modules['ml_dtypes'] = None  # as if not installed\n"
                    "import scangen\n"
                    "try:\n    scangen.Scan('bfloat16', 'add')\n"
                    "except TypeError as err:\n    print(err)\n")
    assert missing == ("bfloat16 needs the ml_dtypes package (pip install ml_dtypes): numpy "
                       "has no bfloat16 dtype without it")


@needs_bfloat16
def test_the_name_bfloat16_is_ml_dtypes_type():
    assert element_type("bfloat16").dtype == BFLOAT16
    assert element_type("bfloat16") == element_type(BFLOAT16)


@pytest.mark.parametrize("op", [*BUILTIN_OPERATORS.values(), LAST_NONZERO,
                                Operator("b != 0 ? b : a", 0, name="user")],
                         ids=lambda op: op.name)
def test_operators_survive_pickling_equal(op):
    """A copy in another process (a Dask worker unpickling its task) equals the original
    and hashes alike, so caches keyed by operator (compiled kernels) find it again."""
    copy = pickle.loads(pickle.dumps(op))
    assert copy == op and hash(copy) == hash(op)
    for dtype in ("int8", "uint32", "float32", "complex64"):
        etype = element_type(dtype)
        if callable(op.expression) and (not op.integer_only or etype.is_integer) and \
                (not etype.is_complex or op.name in ("add", "mul")):
            assert copy.expression(etype) == op.expression(etype)
