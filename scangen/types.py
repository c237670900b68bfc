"""The one table of element types: numpy dtype -> C type, literals and limits; and struct
types, built from numpy structured dtypes, whose fields are such types.

Everything that needs to know about a dtype (validation, operators, templates, the CLI)
asks this module, so adding a scalar type means adding one row.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass

import numpy as np

from .usercode import reserved_name_reason


@dataclass(frozen=True)
class ElementType:
    """How one numpy dtype is spelled and bounded in CUDA C."""

    dtype: np.dtype
    c_name: str
    #: Unsigned type wide enough to do wrapping add/mul in; signed overflow is undefined
    #: behaviour in C++, and 8/16-bit operands would otherwise promote to (signed) int.
    wrap_c_name: str | None
    #: Headers the type needs (float16: cuda_fp16.h).
    includes: tuple = ()
    #: C declarations the type needs before use (complex: its struct).
    declarations: str = ""
    #: 16-bit floats are structs in CUDA C, with no literal syntax: the function that makes
    #: one from its bits (__ushort_as_half).
    from_bits: str = ""
    #: The package that defines the dtype, where numpy does not (ml_dtypes' bfloat16); its
    #: dtypes are kind "V" to numpy, so ``kind`` says what scangen takes them for.
    package: str = ""
    kind_override: str = ""

    @property
    def kind(self) -> str:
        """numpy's kind letter, "f" for the floats another package defines."""
        return self.kind_override or self.dtype.kind

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def part(self) -> "ElementType":
        """A complex type's real and imaginary parts' type (complex64: float32)."""
        return ELEMENT_TYPES[np.dtype(f"float{4 * self.itemsize}")]

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_half(self) -> bool:
        """A 16-bit float (__half, __nv_bfloat16): a struct in C, compared with its own type."""
        return bool(self.from_bits)

    def finfo(self):
        """np.finfo of a float or complex type; the defining package's own finfo for the
        types np.finfo refuses (that package is imported already: its dtype exists)."""
        if self.package:
            return importlib.import_module(self.package).finfo(self.dtype)
        return np.finfo(self.dtype)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def name(self) -> str:
        return self.dtype.name

    @property
    def alignment(self) -> int:
        return self.dtype.alignment

    is_struct = False

    def numpy_value(self, value):
        """``value`` as a numpy scalar of this type (for references and poison)."""
        return self.dtype.type(value)

    def _number(self, value):
        if isinstance(value, self.dtype.type):  # ml_dtypes' scalars are no np.number
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, complex, np.number)):
            raise TypeError(f"{value!r} is not a number")
        if isinstance(value, (complex, np.complexfloating)) and not self.is_complex:
            raise TypeError(f"{value!r} is complex; {self.name} is not")
        return value

    def to_bytes(self, value) -> bytes:
        """``value`` as this type's bytes in memory: how a by-value kernel argument of a type
        the struct module has no code for (complex, bfloat16) is passed."""
        return np.array(self._number(value), self.dtype).tobytes()

    def literal(self, value) -> str:
        """A C literal of this type holding ``value`` exactly (inf included for floats)."""
        value = self._number(value)
        if self.is_complex:
            part = self.part
            value = complex(value)
            return f"{self.c_name}{{{part.literal(value.real)}, {part.literal(value.imag)}}}"
        if self.is_half:
            value = float(value)
            with np.errstate(over="ignore"):
                half = self.dtype.type(value)
            if np.isnan(value):
                raise ValueError("NaN cannot be an identity")
            if float(half) != value:
                raise ValueError(f"{value!r} is not exactly representable as {self.name}")
            bits = int(np.array(half, self.dtype).view(np.uint16))
            return f"{self.from_bits}((unsigned short)0x{bits:04X})"
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


#: complex64/complex128: two floats, numpy's layout.
_COMPLEX = """// numpy {name}: real and imaginary parts
struct {c_name}
{{
    {part} re;
    {part} im;
}};"""

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
ELEMENT_TYPES[np.dtype("float16")] = ElementType(np.dtype("float16"), "__half", None,
                                                 includes=("cuda_fp16.h",),
                                                 from_bits="__ushort_as_half")
for _name, _part in (("complex64", "float"), ("complex128", "double")):
    ELEMENT_TYPES[np.dtype(_name)] = ElementType(
        np.dtype(_name), f"scangen_{_name}", None,
        declarations=_COMPLEX.format(name=_name, c_name=f"scangen_{_name}", part=_part))

#: The unsigned C type of each size in bytes (1, 2, 4, 8): the word a value's bits are read
#: or counted in. From the rows above, so the spelling is written once.
UNSIGNED_C_TYPES = {t.dtype.itemsize: t.c_name for t in ELEMENT_TYPES.values()
                    if t.dtype.kind == "u"}


@dataclass(frozen=True)
class StructField:
    name: str
    type: object  # ElementType or StructType
    offset: int
    #: Sub-array shape (a C array of the field type), () for one value.
    shape: tuple = ()
    #: Whether an explicit padding array precedes the field (numpy's offset is past where C
    #: would put it).
    padded: bool = False

    @property
    def count(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True)
class StructType:
    """A C struct laid out exactly as a numpy structured dtype: the same field names, offsets
    and size, with the padding written out as byte arrays, and checked by static_assert in
    the generated code."""

    dtype: np.dtype
    c_name: str
    fields: tuple
    alignment: int
    #: The struct declarations (nested ones first) to emit before the struct is used.
    declarations: str
    #: Whether an explicit padding array ends the struct.
    tail_padded: bool = False
    #: Headers its fields need.
    includes: tuple = ()

    is_struct = True
    is_float = False
    is_integer = False
    is_complex = False
    is_half = False
    wrap_c_name = None

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def name(self) -> str:
        """The fields and their types, as numpy writes a packed struct's dtype (an aligned or
        padded one's offsets left out: numpy would write them as a dict)."""
        return str(np.dtype([(field, self.dtype.fields[field][0]) for field in self.dtype.names]))

    def _field_values(self, value) -> tuple:
        """A tuple (or np.void) of one value per field, or an error saying what is wrong."""
        if isinstance(value, np.void):
            value = value.item()
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"{value!r} is not a tuple of field values")
        if len(value) != len(self.fields):
            names = ", ".join(f.name for f in self.fields)
            raise ValueError(f"{len(value)} values for {len(self.fields)} fields ({names})")
        return tuple(value)

    def to_bytes(self, value) -> bytes:
        """``value`` (a tuple or np.void) as the struct's bytes: how a struct is passed by
        value to a kernel."""
        value = self._field_values(value)
        try:
            return np.array(value, self.dtype).tobytes()
        except (TypeError, ValueError) as err:
            raise ValueError(f"{value!r} does not fit {self.name}: {err}") from None

    def literal(self, value) -> str:
        """An aggregate initializer from a tuple (or np.void) of field values."""
        value = self._field_values(value)
        parts = []
        for field, item in zip(self.fields, value):
            if field.padded:
                parts.append("{}")  # a padding array, zeroed
            if field.shape:
                try:
                    items = _elements(item, field.shape)
                except ValueError as err:
                    raise ValueError(f"field {field.name!r}: {err}") from None
                if len(items) != field.count:
                    raise ValueError(f"field {field.name!r} holds {field.count} values, "
                                     f"got {len(items)}")
                parts.append("{" + ", ".join(_field_literal(field, v) for v in items) + "}")
            else:
                parts.append(_field_literal(field, item))
        if self.tail_padded:
            parts.append("{}")
        return f"{self.c_name}{{{', '.join(parts)}}}"

    def numpy_value(self, value):
        return np.array(value.item() if isinstance(value, np.void) else tuple(value),
                        dtype=self.dtype)[()]


def _elements(value, shape) -> list:
    """The elements of a sub-array value in C order, unpacking only the array's own levels
    (an element may itself be a struct's tuple)."""
    if not shape:
        return [value]
    try:
        parts = list(value)
    except TypeError:
        raise ValueError(f"{value!r} is not a sequence of {shape[0]} elements") from None
    if len(parts) != shape[0]:
        raise ValueError(f"{len(parts)} elements where the sub-array has {shape[0]}")
    return [element for part in parts for element in _elements(part, shape[1:])]


def _field_literal(field, value) -> str:
    try:
        return field.type.literal(value)
    except (ValueError, TypeError, OverflowError) as err:
        raise ValueError(f"field {field.name!r}: {err}") from None


def _struct_type(dtype: np.dtype, names: dict) -> StructType:
    """The StructType of a structured dtype; ``names`` numbers the structs of one tree."""
    if dtype.itemsize == 0:
        raise TypeError(f"structured dtype {dtype} has no data (no fields, or only empty "
                        "ones): a struct element type needs at least one field")
    declarations, fields, lines, position, alignment = [], [], [], 0, 1
    includes = []
    for name in dtype.names:
        field_dtype, offset = dtype.fields[name][:2]
        shape = ()
        if field_dtype.subdtype is not None:
            field_dtype, shape = field_dtype.subdtype
        if not name.isidentifier() or not name.isascii():
            raise TypeError(f"field {name!r} of {dtype} is not a C identifier; rename it")
        reason = reserved_name_reason(name)
        if reason:
            raise TypeError(f"field {name!r} of {dtype} {reason}; rename the field")
        if shape and not int(np.prod(shape)):
            raise TypeError(f"field {name!r} of {dtype} is an empty sub-array {shape}; C has "
                            "no arrays of no elements")
        if field_dtype.fields is not None:
            member = _struct_type(field_dtype, names)
        else:
            try:
                member = _scalar_type(field_dtype)
            except TypeError:
                raise TypeError(f"field {name!r} of {dtype} has type {field_dtype}, which "
                                "scangen cannot put in a struct; supported: "
                                + supported_names()) from None
        if member.declarations and member.declarations not in declarations:
            declarations.append(member.declarations)
        includes += [i for i in member.includes if i not in includes]
        if offset % member.alignment:
            raise TypeError(f"field {name!r} of {dtype} sits at offset {offset}, not a "
                            f"multiple of its alignment {member.alignment}: build the dtype "
                            f"with align=True")
        if offset < position:
            raise TypeError(f"field {name!r} of {dtype} overlaps the field before it")
        # C places the field at the next multiple of its alignment; numpy's explicit offsets
        # may put it further, and only then is a padding array written out.
        natural = -(-position // member.alignment) * member.alignment
        padded = offset > natural
        if padded:
            lines.append(f"    unsigned char _pad{len(lines)}[{offset - position}];")
        array = "".join(f"[{d}]" for d in shape)
        lines.append(f"    {member.c_name} {name}{array};")
        fields.append(StructField(name, member, offset, tuple(shape), padded))
        position = offset + member.itemsize * (int(np.prod(shape)) if shape else 1)
        alignment = max(alignment, member.alignment)
    if dtype.itemsize % alignment:
        raise TypeError(f"{dtype} is {dtype.itemsize} bytes, not a multiple of its alignment "
                        f"{alignment}: build it with align=True")
    tail_padded = dtype.itemsize > -(-position // alignment) * alignment
    if tail_padded:
        lines.append(f"    unsigned char _pad{len(lines)}[{dtype.itemsize - position}];")
    c_name = f"scangen_struct{len(names)}"
    names[c_name] = dtype
    checks = [f"static_assert(sizeof({c_name}) == {dtype.itemsize}, "
              f"\"{c_name} must match numpy's itemsize\");"]
    # NVRTC has no offsetof: the offsets are checked where nvcc compiles the same text (the
    # CPU tests do, for every struct they scan).
    checks += ["#ifndef __CUDACC_RTC__"]
    checks += [f"static_assert(__builtin_offsetof({c_name}, {f.name}) == {f.offset}, "
               f"\"{c_name}.{f.name} must sit at numpy's offset\");" for f in fields]
    checks += ["#endif"]
    body = "\n".join(lines)
    declarations.append(f"// numpy dtype {dtype}\nstruct {c_name}\n{{\n{body}\n}};\n"
                        + "\n".join(checks))
    return StructType(dtype, c_name, tuple(fields), alignment, "\n\n".join(declarations),
                      tail_padded, tuple(includes))


#: Element types whose dtype another package defines, by dtype name: (package, C type,
#: header, C function from bits). A dtype is recognised by its name and module, so the
#: package is never imported for it (whoever has the dtype has imported it); only a type
#: named by its string ("bfloat16", which numpy alone does not know) imports it.
OPTIONAL_TYPES = {
    "bfloat16": ("ml_dtypes", "__nv_bfloat16", "cuda_bf16.h", "__ushort_as_bfloat16"),
}


@functools.lru_cache(maxsize=None)
def _optional_type(key: np.dtype) -> ElementType | None:
    row = OPTIONAL_TYPES.get(key.name)
    if row is None or key.type.__module__.split(".")[0] != row[0]:
        return None
    package, c_name, header, from_bits = row
    return ElementType(key, c_name, None, includes=(header,), from_bits=from_bits,
                       package=package, kind_override="f")


def supported_names() -> str:
    """The scalar element types, for messages and help texts."""
    return ", ".join([t.name for t in ELEMENT_TYPES.values()] +
                     [f"{name} (from {row[0]})" for name, row in OPTIONAL_TYPES.items()])


def optional_dtype(name):
    """The dtype an OPTIONAL_TYPES name stands for, or None for another name. Here the user
    named the type, so its package is imported (np.dtype("bfloat16") alone fails)."""
    row = OPTIONAL_TYPES.get(name) if isinstance(name, str) else None
    if row is None:
        return None
    try:
        package = importlib.import_module(row[0])
    except ImportError:
        raise TypeError(f"{name} needs the {row[0]} package (pip install {row[0]}): numpy "
                        f"has no {name} dtype without it") from None
    return np.dtype(getattr(package, name))


def _scalar_type(key: np.dtype, name: str = "dtype") -> ElementType:
    if not key.isnative:
        raise TypeError(f"{name} {key.str} is not in the machine's byte order; use "
                        f"{key.newbyteorder('=').name}")
    try:
        return ELEMENT_TYPES[key]
    except KeyError:
        optional = _optional_type(key)
        if optional is not None:
            return optional
        raise TypeError(f"unsupported {name} {key.name}; scangen supports {supported_names()}, "
                        "and structured dtypes of those") from None


def prerequisites(types) -> tuple[tuple, str]:
    """``(headers, declarations)``: what must come before C code names any of ``types``
    (element types, in order; one a module scans, others its arguments hold), each header
    and declaration once. Raises a TypeError where two different structured dtypes would be
    declared under one C name (each tree of structs numbers its own)."""
    headers, declarations, named = [], [], {}
    for etype in types:
        headers += [h for h in etype.includes if h not in headers]
        if etype.declarations and etype.declarations not in declarations:
            declarations.append(etype.declarations)
        for c_name, dtype in _struct_names(etype):
            if named.setdefault(c_name, dtype) != dtype:
                raise TypeError(f"the structured dtypes {named[c_name]} and {dtype} cannot "
                                f"share a module (both would be declared as {c_name})")
    return tuple(headers), "\n\n".join(declarations)


def _struct_names(etype):
    """(C name, dtype) of a struct type and of every struct nested in it."""
    if not etype.is_struct:
        return
    yield etype.c_name, etype.dtype
    for field in etype.fields:
        yield from _struct_names(field.type)


def c_equal(etype, a: str, b: str) -> str:
    """A C bool expression: the values ``a`` and ``b`` (C lvalues of ``etype``) are equal.
    Scalars compare with ``==`` (so NaN equals nothing, and -0.0 equals 0.0), the 16-bit
    floats through float (exact), complex values part by part, structs field by field
    (every element of a sub-array; padding bytes are no part of the value): numpy's ``==``
    on each."""
    if etype.is_struct:
        parts = [c_equal(field.type, f"{a}.{field.name}{index}", f"{b}.{field.name}{index}")
                 for field in etype.fields
                 for index in ("".join(f"[{k}]" for k in where)
                               for where in np.ndindex(*field.shape))]
        return " && ".join(f"({part})" for part in parts) or "true"
    if etype.is_complex:
        return f"{a}.re == {b}.re && {a}.im == {b}.im"
    if etype.is_half:
        return f"(float){a} == (float){b}"
    return f"{a} == {b}"


def conversion(source, target, expression: str) -> str:
    """C that converts ``expression``, a value of ``source``, to ``target`` (ElementTypes):
    Scan's result_dtype. The caller checks that numpy's safe casting allows the pair; this
    says how C spells it, or raises a TypeError naming a pair it cannot spell."""
    if source == target:
        return expression
    if source.is_struct or target.is_struct:
        raise TypeError(f"no conversion from {source.name} to {target.name}: struct values "
                        "are scanned as they are (convert the input to the result type first)")
    if target.is_complex:
        part = target.part
        if source.is_complex:
            real, imaginary = (f"({part.c_name})({expression}).{p}" for p in ("re", "im"))
        else:
            real, imaginary = conversion(source, part, expression), part.literal(0)
        return f"{target.c_name}{{{real}, {imaginary}}}"
    if source.is_half or target.is_half:
        # __half and __nv_bfloat16 convert to and from float; the pairs safe casting allows
        # (to float32/float64, from 8-bit integers) are exact through it.
        through_float = f"(float)({expression})"
        return through_float if target.c_name == "float" else f"({target.c_name}){through_float}"
    return f"({target.c_name})({expression})"


#: C types of a mask or key array (flags, keys), by numpy dtype: bool and the integers.
MASK_C_TYPES = {np.dtype(np.bool_): "bool", **{
    key: etype.c_name for key, etype in ELEMENT_TYPES.items() if etype.is_integer}}


def as_dtype(dtype, name: str = "dtype") -> np.dtype:
    """``dtype`` as a numpy dtype (bfloat16 by its name too), or a TypeError naming the
    parameter ``name`` it was given as."""
    if dtype is None:  # np.dtype(None) would quietly mean float64
        raise TypeError(f"{name} is required: a numpy dtype, e.g. np.float32")
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError) as err:
        key = optional_dtype(dtype)
        if key is None:
            raise TypeError(f"{name} is not a numpy dtype: {dtype!r}") from err
        return key


def element_type(dtype, name: str = "dtype") -> ElementType:
    """Look ``dtype`` up in the table, with an error that names the parameter (``name``)
    and lists what is supported."""
    key = as_dtype(dtype, name)
    if key.subdtype is not None:
        raise TypeError(f"{name}: a sub-array dtype ({key}) is not an element type; put the "
                        "array in a structured dtype's field")
    if key.fields is not None:
        return struct_type(key)
    return _scalar_type(key, name)


@functools.lru_cache(maxsize=None)
def struct_type(dtype: np.dtype) -> StructType:
    """The StructType of a numpy structured dtype (fields of the scalar types, nested
    structured dtypes, or fixed-size sub-arrays of those)."""
    struct = _struct_type(dtype, {})
    # Marked as the user's (scangen.render.ModuleSource.user_spans): a field name that
    # passed the checks above but clashes with a macro of some header is then reported as
    # the dtype's, not as scangen's code.
    return dataclasses.replace(struct, declarations=f"// user dtype {{\n{struct.declarations}"
                                                    f"\n// }} user dtype")
