"""Kernel arguments: one description yields the C parameter list, the launch format and the
conversion of each Python value, so the three can never disagree.

A ScanKernel's ``arguments`` string ("const float *x, float *out, long long *count") is
parsed here into :class:`Argument` objects; scangen's own kernel parameters (totals, tile
status, n) are the same objects, written in Python.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from .usercode import C_RESERVED_WORDS

#: C scalar types a kernel argument may have, and the numpy dtype a value is converted to.
#: Pointers may point to any type (a scalar, scan_t, or a type the preamble declares).
C_SCALARS: dict[str, np.dtype] = {
    name: np.dtype(dtype) for name, dtype in (
        ("char", "int8"), ("signed char", "int8"), ("unsigned char", "uint8"),
        ("short", "int16"), ("unsigned short", "uint16"),
        ("int", "int32"), ("unsigned", "uint32"), ("unsigned int", "uint32"),
        ("long long", "int64"), ("long long int", "int64"),
        ("unsigned long long", "uint64"), ("unsigned long long int", "uint64"),
        ("size_t", "uint64"), ("ptrdiff_t", "int64"),
        ("int8_t", "int8"), ("uint8_t", "uint8"), ("int16_t", "int16"), ("uint16_t", "uint16"),
        ("int32_t", "int32"), ("uint32_t", "uint32"), ("int64_t", "int64"),
        ("uint64_t", "uint64"),
        ("float", "float32"), ("double", "float64"), ("bool", "bool"), ("__half", "float16"),
    )
}

#: Names the generated code gives a meaning of its own where user code runs (the methods of
#: UserIO in templates/io.cuh.j2, whose members the arguments become).
RESERVED_NAMES = frozenset({
    "i", "n", "item", "prev_item", "last_item", "pair", "item_acc", "prev_acc", "last_acc",
    "position", "step", "line", "input", "output", "output_in_line", "value_at", "index_at",
    "is_segment_start", "restarts_at",
    "scan_t", "acc_t", "combine", "value_combine", "scan_identity", "acc_combine",
    "acc_identity",
})

#: The argument a ScanKernel built with ``initial=`` appends: it carries the initial value
#: (the scangen_ prefix is refused in user arguments). Messages call it ``initial``.
INITIAL_ARGUMENT = "scangen_initial"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIERS = ("const", "volatile", "__restrict__", "restrict")


class ArgumentError(ValueError):
    """An ``arguments`` string that does not parse, with the piece that does not."""


@dataclass(frozen=True)
class Argument:
    """One kernel parameter.

    ``c_type`` is the type without qualifiers and without the ``*``; ``pointer`` says
    whether the parameter is a pointer to it.
    """

    name: str
    c_type: str
    pointer: bool = False
    const: bool = False
    #: A pointer declared ``__restrict__`` (after the ``*``): it shares no memory with the
    #: other arguments, so the compiler may move its loads past stores through them.
    restrict: bool = False
    #: The element type (scangen.types) of a by-value argument whose C type is no C scalar:
    #: a struct, complex or bfloat16 initial value. It is passed as its bytes.
    value_type: object = None

    @property
    def declaration(self) -> str:
        """The C declaration, e.g. ``const float *x``."""
        const = "const " if self.const else ""
        restrict = "__restrict__ " if self.restrict else ""
        return f"{const}{self.c_type} *{restrict}{self.name}" if self.pointer else \
            f"{const}{self.c_type} {self.name}"

    @property
    def described(self) -> str:
        """The argument as messages name it: ``argument 'x' (const float *x)``, or
        ``initial (int8)`` for the argument that carries ``initial=``, which the user never
        declared."""
        if self.name == INITIAL_ARGUMENT:
            dtype = self.value_type.dtype if self.value_type is not None else self.scalar_dtype
            return f"initial ({dtype})"
        return f"argument {self.name!r} ({self.declaration})"

    @property
    def launch_format(self) -> str:
        """PyCUDA's prepared-call format character (struct module codes)."""
        if self.pointer:
            return "P"
        if self.value_type is not None:
            return f"{self.value_type.itemsize}s"
        return C_SCALARS[self.c_type].char

    @property
    def scalar_dtype(self) -> np.dtype | None:
        """The numpy dtype of a scalar argument, or of what a pointer points to, if known."""
        return C_SCALARS.get(self.c_type)


def parse_arguments(text: str) -> tuple[Argument, ...]:
    """Parse a C parameter list such as ``"const float *x, float *out, int k"``.

    Accepts pointers to any type and scalars of the types in C_SCALARS; rejects anything
    else with an ArgumentError naming the piece.
    """
    if not isinstance(text, str):
        raise TypeError(f"arguments must be a string of C parameters, not {type(text).__name__}")
    arguments = []
    seen = set()
    pieces = [p.strip() for p in text.split(",")] if text.strip() else []
    for piece in pieces:
        argument = _parse_one(piece)
        if argument.name in seen:
            raise ArgumentError(f"argument {argument.name!r} is declared twice in {text!r}")
        seen.add(argument.name)
        arguments.append(argument)
    return tuple(arguments)


def _parse_one(piece: str) -> Argument:
    if not piece:
        raise ArgumentError("an empty argument (two commas in a row, or a trailing comma)")
    if any(ch in piece for ch in "[]()=;{}"):
        raise ArgumentError(f"cannot parse argument {piece!r}: write 'type name' or "
                            "'type *name' (arrays are passed as pointers)")
    stars = piece.count("*")
    if stars > 1:
        raise ArgumentError(f"argument {piece!r}: pointers to pointers are not supported")
    words = piece.replace("*", " * ").split()
    if len(words) < 2 or not _IDENTIFIER.match(words[-1]):
        raise ArgumentError(f"cannot parse argument {piece!r}: it needs a type and a name")
    name = words[-1]
    if name in RESERVED_NAMES or name.startswith("scangen_"):
        raise ArgumentError(f"argument name {name!r} is reserved (scangen uses it inside the "
                            f"kernel); reserved: {', '.join(sorted(RESERVED_NAMES))}")
    if name in C_RESERVED_WORDS:
        raise ArgumentError(f"argument {piece!r}: {name!r} is a C++ keyword or a macro of "
                            "CUDA's headers, not a name")
    restrict = False
    if stars:
        after_star = words[words.index("*") + 1:-1]
        if any(w not in ("restrict", "__restrict__") for w in after_star):
            raise ArgumentError(f"cannot parse argument {piece!r}")
        restrict = bool(after_star)
        words = words[:words.index("*") + 1] + words[-1:]
    type_words = [w for w in words[:-1] if w != "*"]
    const = "const" in type_words
    c_type = " ".join(w for w in type_words if w not in _QUALIFIERS)
    if not c_type or not all(_IDENTIFIER.match(w) for w in c_type.split()):
        raise ArgumentError(f"cannot parse argument {piece!r}: no type before {name!r}")
    if not stars and c_type not in C_SCALARS:
        raise ArgumentError(
            f"argument {piece!r}: scalar arguments must have one of the types "
            f"{', '.join(C_SCALARS)}; pass other data through a pointer")
    return Argument(name, c_type, pointer=bool(stars), const=const, restrict=restrict)


def c_parameters(arguments) -> str:
    """The C parameter list of ``arguments``."""
    return ", ".join(a.declaration for a in arguments)


def launch_format(arguments) -> str:
    """PyCUDA's prepared-call format string of ``arguments``. The struct module aligns its
    number codes as C aligns parameters, but not bytes: a by-value type's bytes get 'x'
    padding up to its C alignment."""
    text = ""
    for argument in arguments:
        if argument.value_type is not None and not argument.pointer:
            text += "x" * (-struct.calcsize(text) % argument.value_type.alignment)
        text += argument.launch_format
    return text


def convert_scalar(argument, value):
    """A scalar argument's value as the numpy scalar of its C type, or a clear error naming
    the argument as the user knows it (Argument.described)."""
    if argument.value_type is not None:  # a struct, complex or bfloat16 value: its bytes
        try:
            return argument.value_type.to_bytes(value)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{argument.described}: {err}") from None
    dtype = argument.scalar_dtype
    if dtype.kind in "iu":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{argument.described} needs an int, not {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{argument.described}: {value} does not fit {dtype} "
                             f"[{info.min}, {info.max}]")
        return dtype.type(value)
    if dtype.kind == "b":
        return np.uint8(bool(value))
    if not isinstance(value, (int, float, np.integer, np.floating)) or \
            isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{argument.described} needs a number, not {value!r}")
    return dtype.type(value)
