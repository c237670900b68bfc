"""The one table of element types: numpy dtype -> C type, literals and limits.

Everything that needs to know about a dtype (validation, operators, templates, the CLI)
asks this table, so adding a type means adding one row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ElementType:
    """How one numpy dtype is spelled and bounded in CUDA C."""

    dtype: np.dtype
    c_name: str
    #: Unsigned type wide enough to do wrapping add/mul in; signed overflow is undefined
    #: behaviour in C++, and 8/16-bit operands would otherwise promote to (signed) int.
    wrap_c_name: str | None

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.dtype.kind in "iu"

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def name(self) -> str:
        return self.dtype.name

    def literal(self, value) -> str:
        """A C literal of this type holding ``value`` exactly (inf included for floats)."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{value!r} is not a number")
        if self.is_float:
            value = float(value)
            if np.isnan(value):
                raise ValueError("NaN cannot be an identity")
            if np.isinf(value):
                # No #include: spell infinities through bit patterns.
                if self.itemsize == 4:
                    bits = 0xFF800000 if value < 0 else 0x7F800000
                    return f"__int_as_float(0x{bits:08X})"
                bits = 0xFFF0000000000000 if value < 0 else 0x7FF0000000000000
                return f"__longlong_as_double(0x{bits:016X}LL)"
            if self.itemsize == 4:
                with np.errstate(over="ignore"):
                    narrowed = float(np.float32(value))
                if np.isinf(narrowed) or narrowed != value:
                    raise ValueError(f"{value!r} is not exactly representable as float32")
                return f"{narrowed!r}f"
            return repr(value)
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ValueError(f"{value!r} is not an integer")
        value = int(value)
        info = np.iinfo(self.dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{value} does not fit {self.name} [{info.min}, {info.max}]")
        if self.itemsize == 8:
            if value == info.min:
                # -9223372036854775808LL is a negated literal that overflows long long.
                return f"({value + 1}LL - 1)"
            suffix = "ULL" if self.dtype.kind == "u" else "LL"
            return f"(({self.c_name}){value}{suffix})"
        return f"(({self.c_name}){value})"

    def lowest(self):
        """The smallest value of this type (-inf for floats)."""
        return -np.inf if self.is_float else int(np.iinfo(self.dtype).min)

    def highest(self):
        """The largest value of this type (+inf for floats)."""
        return np.inf if self.is_float else int(np.iinfo(self.dtype).max)

    def all_ones(self) -> int:
        """Every bit set, as a value of this type (bit_and's identity)."""
        return -1 if self.dtype.kind == "i" else int(np.iinfo(self.dtype).max)


_ROWS = [
    ("int8", "signed char", "unsigned int"),
    ("uint8", "unsigned char", "unsigned int"),
    ("int16", "short", "unsigned int"),
    ("uint16", "unsigned short", "unsigned int"),
    ("int32", "int", "unsigned int"),
    ("uint32", "unsigned int", "unsigned int"),
    ("int64", "long long", "unsigned long long"),
    ("uint64", "unsigned long long", "unsigned long long"),
    ("float32", "float", None),
    ("float64", "double", None),
]

ELEMENT_TYPES: dict[np.dtype, ElementType] = {
    np.dtype(name): ElementType(np.dtype(name), c_name, wrap) for name, c_name, wrap in _ROWS
}


def element_type(dtype) -> ElementType:
    """Look ``dtype`` up in the table, with an error that lists what is supported."""
    if dtype is None:  # np.dtype(None) would quietly mean float64
        raise TypeError("a dtype is required, e.g. np.float32")
    try:
        key = np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"not a numpy dtype: {dtype!r}") from err
    if key.fields is not None or key.subdtype is not None:
        raise TypeError(f"structured and sub-array dtypes ({key}) are not supported yet; "
                        "scangen scans one numeric value per element (a segmented scan "
                        "pairs a value with a flag: ScanKernel's is_segment_start_expr)")
    if not key.isnative:
        raise TypeError(f"dtype {key.str} is not in the machine's byte order; use "
                        f"{key.newbyteorder('=').name}")
    try:
        return ELEMENT_TYPES[key]
    except KeyError:
        supported = ", ".join(t.name for t in ELEMENT_TYPES.values())
        raise TypeError(f"unsupported dtype {key.name}; scangen supports {supported}") from None
