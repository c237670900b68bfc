"""Operators: an associative combine written in C, its identity, and a numpy twin for testing.

Contract for every operator, built in or user defined:

* ``combine(a, b)`` is associative: ``(a op b) op c == a op (b op c)``. It need not be
  commutative: scangen keeps operand order everywhere, so element ``i`` of an inclusive
  scan is ``x0 op x1 op ... op xi`` in that order, with ``a`` always the earlier operand.
* ``identity`` is neutral on both sides: ``e op x == x op e == x``. Exclusive scans start
  from it, tails of partial sections are padded with it; no inverse is ever needed.
* Floating-point results depend on the order of evaluation, which differs between
  algorithms: they are not bit-reproducible across algorithms, section sizes or strategies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from .types import ElementType, element_type
from .usercode import check_code

#: An identity is a number, a word of IDENTITY_WORDS, or a function of the element type.
Identity = Union[int, float, str, Callable[[ElementType], Union[int, float]]]

#: Identities that depend on the element type, by the word that names them (in
#: ``Operator(..., identity="highest")`` and ``python -m scangen --identity highest``):
#: resolved per dtype when a scan is made. Floats' limits are the infinities.
IDENTITY_WORDS = {"lowest": ElementType.lowest, "highest": ElementType.highest}


def parse_identity(text: str):
    """An identity written as text (the CLI's ``--identity``, or a string given to
    Operator): a word of IDENTITY_WORDS (kept as the word, resolved per dtype), an integer
    (``0x..`` too), or a float (``inf``, ``-inf``). Raises ValueError otherwise."""
    word = text.strip().lower()
    if word in IDENTITY_WORDS:
        return word
    for parse in (int, lambda t: int(t, 0), float):
        try:
            value = parse(word)
        except ValueError:
            continue
        if value != value:  # NaN: no value is neutral under any comparison with it
            break
        return value
    raise ValueError(f"identity {text!r} is not a number or one of "
                     f"{', '.join(IDENTITY_WORDS)} (write an integer, a float, inf, -inf, "
                     f"{' or '.join(IDENTITY_WORDS)})")


@dataclass(frozen=True)
class Operator:
    """An associative binary operator for scans.

    Parameters
    ----------
    expression:
        A C expression in ``a`` (the earlier operand) and ``b`` (the later one), both of the
        scan's element type, e.g. ``"b != 0 ? b : a"``. A callable ``ElementType -> str``
        lets one operator spell itself per type (the built-ins do).
    identity:
        The neutral element: a number, a tuple of field values for a struct type, a
        callable ``ElementType -> number``, or a string as ``--identity`` takes it
        (parse_identity): ``"lowest"`` or ``"highest"`` (the dtype's limits, -inf and inf
        for floats, resolved per dtype), ``"inf"``, ``"-inf"``, an integer or a float.
    name:
        Shown in emitted source and error messages.
    preamble:
        Optional C text (device helper functions) emitted before the combine function.
    reference:
        Optional numpy function ``(a, b) -> array`` applying the operator elementwise; the
        reference scan (and so the tests) use it. ``None`` for operators with no twin.
    integer_only:
        True for bitwise operators, which C rejects on floating-point operands.
    packed:
        Optional: the same combine of 1- and 2-byte integers packed in a 32-bit word, value
        by value: a C expression in ``unsigned`` words ``a`` and ``b`` (e.g. a SIMD
        intrinsic such as ``__vadd4(a, b)``), or a callable ``ElementType -> str | None``
        that spells it per type (None for a type it has none for). The single pass then
        scans such values four or two at a time (ScanModule.packed_combine). The built-ins
        have one; an operator that gives one promises that it agrees with ``expression``
        on every value of the word, with no carry between values.

    Examples
    --------
    "Last non-zero wins": associative, not commutative, with 0 as its identity; its numpy
    twin lets ``reference_scan`` (and the tests) check it on the CPU.

    >>> last_nonzero = scangen.Operator("b != 0 ? b : a", identity=0, name="last_nonzero",
    ...                                 reference=lambda a, b: np.where(b != 0, b, a))
    >>> scangen.reference_scan(np.array([3, 0, 5, 0, 0, 2]), last_nonzero)
    array([3, 3, 5, 5, 5, 2])
    >>> scangen.Scan(np.float64, last_nonzero).spec.operator.name
    'last_nonzero'
    """

    expression: Union[str, Callable[[ElementType], str]]
    identity: Identity
    name: str = "user_op"
    preamble: str = ""
    reference: Callable | None = None
    integer_only: bool = False
    #: True for the built-ins, which spell themselves per scalar type.
    scalar_only: bool = False
    #: min, max and comparisons with 0 need real values.
    real_only: bool = False
    packed: Union[str, Callable[[ElementType], Union[str, None]], None] = None

    def __post_init__(self):
        if isinstance(self.identity, str):
            object.__setattr__(self, "identity", parse_identity(self.identity))
        if isinstance(self.identity, (np.void, list, tuple, np.ndarray)):
            # A struct identity: nested tuples keep the operator hashable (a cache key).
            object.__setattr__(self, "identity", _frozen(self.identity))
        if not isinstance(self.expression, str) and not callable(self.expression):
            raise TypeError(f"operator {self.name!r} expression must be a string of C code "
                            f"in a and b, not {type(self.expression).__name__}")
        if isinstance(self.expression, str):
            if not self.expression.strip():
                raise ValueError("operator expression is empty; write a C expression in a "
                                 "and b")
            check_code(self.expression, f"operator {self.name!r} expression", expression=True)
        check_code(self.preamble, f"operator {self.name!r} preamble", expression=False)
        if isinstance(self.packed, str):
            check_code(self.packed, f"operator {self.name!r} packed form", expression=True)
        if not self.name.isidentifier():
            raise ValueError(f"operator name {self.name!r} must be a C identifier")

    def c_expression(self, etype: ElementType) -> str:
        expr = self.expression
        return expr(etype) if callable(expr) else expr

    def packed_expression(self, etype: ElementType) -> str | None:
        """The combine of ``etype`` values packed in 32-bit words (``packed``), or None."""
        if self.packed is None or not etype.is_integer or etype.itemsize not in (1, 2):
            return None
        return self.packed(etype) if callable(self.packed) else self.packed

    def identity_for(self, etype: ElementType):
        """The identity for values of ``etype``: a word or a callable resolved for it."""
        identity = self.identity
        if isinstance(identity, str):
            if etype.is_struct or etype.is_complex:
                raise TypeError(f"identity {identity!r} of operator {self.name!r} is a limit "
                                f"of a real type; {etype.name} has none: give the value")
            identity = IDENTITY_WORDS[identity]
        return identity(etype) if callable(identity) else identity

    def identity_literal(self, etype: ElementType) -> str:
        """The identity as a C literal of ``etype``; raises ValueError if it does not fit."""
        value = self.identity_for(etype)
        try:
            return etype.literal(value)
        except (ValueError, TypeError, OverflowError) as err:
            raise ValueError(
                f"identity {value!r} of operator {self.name!r} does not fit {etype.name}: {err}"
            ) from None

    def check_dtype(self, dtype) -> ElementType:
        """Return the element type, or raise saying why this operator cannot take it."""
        etype = element_type(dtype)
        if self.scalar_only and etype.is_struct:
            raise TypeError(f"built-in operator {self.name!r} takes scalar types; for "
                            f"{etype.name} write an Operator over the fields, e.g. "
                            f"Operator('scan_t{{a.x + b.x}}', identity=(0,))")
        if self.real_only and getattr(etype, "is_complex", False):
            raise TypeError(f"operator {self.name!r} needs real values; {etype.name} is "
                            "complex")
        if self.integer_only and not etype.is_integer:
            raise TypeError(
                f"operator {self.name!r} is bitwise and needs an integer dtype, not {etype.name}"
            )
        self.identity_literal(etype)
        return etype


def _frozen(value):
    """Field values as nested tuples (np.void and arrays included)."""
    if isinstance(value, np.void):
        value = value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_frozen(v) for v in value)
    return value


#: Complex add and mul on the (re, im) struct.
_COMPLEX = {"+": "scan_t{a.re + b.re, a.im + b.im}",
            "*": "scan_t{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}"}


# The built-ins spell themselves per type through these small callables rather than
# closures: they compare and hash by value and pickle by value, so an operator copied into
# another process (a Dask worker) equals the original, and caches keyed by operator (the
# compiled kernels) find it there. A closure would come back as a new, unequal function.

@dataclass(frozen=True)
class _Wrapping:
    """Integer add/mul computed in an unsigned type: wraps like numpy, no signed overflow UB."""

    symbol: str

    def __call__(self, etype: ElementType) -> str:
        if etype.is_complex:
            return _COMPLEX[self.symbol]
        if etype.is_float:
            return f"a {self.symbol} b"
        wide = etype.wrap_c_name
        return f"({etype.c_name})(({wide})a {self.symbol} ({wide})b)"


@dataclass(frozen=True)
class _Bitwise:
    """A bitwise operator; the cast undoes C's promotion of 8/16-bit operands to int."""

    symbol: str

    def __call__(self, etype: ElementType) -> str:
        return f"({etype.c_name})(a {self.symbol} b)"


@dataclass(frozen=True)
class _Simd:
    """A built-in's packed form (Operator.packed): CUDA's SIMD intrinsic ``__v<name><s|u><4|2>``
    for 1- and 2-byte integers (a ``sign`` letter for min and max only: adds wrap alike), or
    ``symbol`` for a bitwise operator, which acts on each bit of the word whatever its
    elements."""

    name: str = ""
    signed_forms: bool = False
    symbol: str = ""

    def __call__(self, etype: ElementType) -> str:
        if self.symbol:
            return f"a {self.symbol} b"
        sign = ("s" if etype.dtype.kind == "i" else "u") if self.signed_forms else ""
        return f"__v{self.name}{sign}{4 // etype.itemsize}(a, b)"


ADD = Operator(_Wrapping("+"), 0, name="add", reference=np.add, scalar_only=True,
               packed=_Simd("add"))
MUL = Operator(_Wrapping("*"), 1, name="mul", reference=np.multiply, scalar_only=True)
MIN = Operator("b < a ? b : a", "highest", name="min", reference=np.minimum,
               scalar_only=True, real_only=True, packed=_Simd("min", signed_forms=True))
MAX = Operator("a < b ? b : a", "lowest", name="max", reference=np.maximum,
               scalar_only=True, real_only=True, packed=_Simd("max", signed_forms=True))
BIT_AND = Operator(_Bitwise("&"), ElementType.all_ones, name="bit_and",
                   reference=np.bitwise_and, integer_only=True, scalar_only=True,
                   packed=_Simd(symbol="&"))
BIT_OR = Operator(_Bitwise("|"), 0, name="bit_or", reference=np.bitwise_or, integer_only=True,
                  scalar_only=True, packed=_Simd(symbol="|"))
BIT_XOR = Operator(_Bitwise("^"), 0, name="bit_xor", reference=np.bitwise_xor,
                   integer_only=True, scalar_only=True, packed=_Simd(symbol="^"))

BUILTIN_OPERATORS: dict[str, Operator] = {
    op.name: op for op in (ADD, MUL, MIN, MAX, BIT_AND, BIT_OR, BIT_XOR)
}


def last_nonzero_reference(a, b):
    """numpy twin of ``b != 0 ? b : a``."""
    return np.where(b != 0, b, a)


#: A non-commutative operator: "the latest non-zero value wins". Tests use it everywhere.
def _last_nonzero(etype: ElementType) -> str:
    # __half and __nv_bfloat16 compare with an int ambiguously: compare with a typed zero.
    zero = etype.literal(0) if etype.is_half else "0"
    return f"b != {zero} ? b : a"


LAST_NONZERO = Operator(_last_nonzero, 0, name="last_nonzero", real_only=True,
                        reference=last_nonzero_reference)

_MASK32 = np.uint64(0xFFFFFFFF)


def affine_then_reference(a, b):
    """numpy twin of ``affine_then(a, b)`` on uint64 arrays."""
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    ma, ca, mb, cb = a >> np.uint64(32), a & _MASK32, b >> np.uint64(32), b & _MASK32
    return (((mb * ma) & _MASK32) << np.uint64(32)) | ((mb * ca + cb) & _MASK32)


#: Another non-commutative operator, for uint64 only: affine maps x -> m*x + c (mod 2^32)
#: packed as m << 32 | c; combine(a, b) applies a, then b (function composition, so a
#: prefix combined on the wrong side gives another answer). Tests and the bench use it.
AFFINE_THEN = Operator(
    "affine_then(a, b)", 1 << 32, name="affine_then", reference=affine_then_reference,
    preamble="""
static __device__ __forceinline__ unsigned long long affine_then(unsigned long long a,
                                                                 unsigned long long b)
{
    const unsigned long long mask = 0xFFFFFFFFull;
    const unsigned long long m = ((b >> 32) * (a >> 32)) & mask;
    const unsigned long long c = ((b >> 32) * (a & mask) + (b & mask)) & mask;
    return (m << 32) | c;
}""")


def resolve_operator(op) -> Operator:
    """Accept an Operator or the name of a built-in one."""
    if isinstance(op, Operator):
        return op
    if isinstance(op, str):
        try:
            return BUILTIN_OPERATORS[op]
        except KeyError:
            names = ", ".join(BUILTIN_OPERATORS)
            raise ValueError(
                f"unknown operator {op!r}; built-in operators are {names}, "
                "or pass scangen.Operator(expression, identity=...)"
            ) from None
    raise TypeError(f"operator must be a name or a scangen.Operator, not {type(op).__name__}")
