"""flatnonzero: the int64 indices of the nonzero elements, in order (numpy.flatnonzero,
cupy.flatnonzero). One counting ScanKernel, as a compaction's (scangen.primitives.
compaction): it counts the nonzero elements and writes each one's index to its count."""
from __future__ import annotations

import functools

import numpy as np

from ..interop import ONE_SHOT_ARRAYS, Call, check_array, dtype_of, host_round_trip
from ..kernel import MaskInput, counting_condition
from ..types import MASK_C_TYPES, as_dtype, element_type
from .compaction import _Compaction, _counting_scan, _leading
from .registry import command_line

__all__ = ["FlatNonzero", "flatnonzero"]

#: A nonzero element takes the next place in out with its index; the last element writes
#: the count.
_SCATTER_INDEX = ("if (item != prev_item) out[prev_item] = i;"
                  " if (i == n - 1) *count = item;")


#: The element types a FlatNonzero takes, for its refusals.
_TAKES = ("bool, int8 .. uint64, float16, float32, float64, complex64, complex128 or "
          "bfloat16 (from ml_dtypes) elements")


def _nonzero(etype, value: str) -> str:
    """A C bool expression: ``value`` (an element of a float or complex ``etype``) is
    nonzero as numpy says: NaN is, -0.0 is not, a complex number is where either part is.
    The 16-bit floats compare through float (exact)."""
    if etype.is_complex:
        return f"{value}.re != 0 || {value}.im != 0"
    if etype.is_half:
        return f"(float){value} != 0.0f"
    return f"{value} != 0"


class FlatNonzero(_Compaction):
    """The indices of the nonzero elements of x, in order, as numpy.flatnonzero: call
    ``nz(x)`` -> a new int64 array of x's kind holding them (a view of ``out``'s first
    ones when given).

    Parameters
    ----------
    dtype:
        The element type of x: bool, int8 .. uint64, float16, float32, float64, complex64,
        complex128 or ml_dtypes' bfloat16. Nonzero as numpy says: NaN is nonzero, -0.0 is
        zero, a complex number is nonzero where either part is. A structured dtype has no
        one zero and is refused (Select with a predicate on its fields does the same).
    **scan_options:
        algorithm, section_size, items_per_thread, strategy, tuning as for Scan.

    Notes
    -----
    Call ``nz(x, *, out=None, stream=None, count_on_device=False)``: ``out`` an int64 array
    of x's kind with room for len(x) indices (nothing past the count is written);
    ``count_on_device=True`` returns ``(out, count)`` with the count in a new one-element
    int64 array of x's kind and no host synchronisation. ``stream`` defaults to the array
    library's current stream. Bool and integer elements are counted as Select counts a mask
    (reduce_then_scan's first pass loads them 16 bytes a lane).
    """

    def __init__(self, dtype, **scan_options):
        key = as_dtype(dtype)
        if key.fields is not None:
            raise TypeError(f"flatnonzero takes {_TAKES}, not a structured dtype ({key}): it "
                            f"has no one zero; select by its fields instead, e.g. "
                            f"scangen.Select(dtype, 'x.field != 0')")
        if key in MASK_C_TYPES:
            etype, c_type = None, MASK_C_TYPES[key]
            given = dict(_input=MaskInput("x"))
        else:
            try:
                etype = element_type(key)
            except TypeError:
                if not key.isnative:
                    raise  # element_type's message names the byte order to use
                raise TypeError(f"flatnonzero takes {_TAKES}, not {key}") from None
            c_type = etype.c_name
            given = dict(input_expr=counting_condition(_nonzero(etype, "x[i]")))
        super().__init__(key, _counting_scan(
            etype, arguments=f"const {c_type} *__restrict__ x, long long *__restrict__ out, "
                             "long long *count",
            output_statement=_SCATTER_INDEX, title="flatnonzero", **given, **scan_options))

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        call = Call(stream, {"x": x, "out": out}, writes=("out",))
        check_array("x", call.views["x"], self.dtype)
        n = call.views["x"].size
        out, out_view = self._output(call, out, n, dtype=np.dtype(np.int64))
        count, _ = self._launch(call, [call.views["x"], out_view], n, count_on_device)
        if count_on_device:
            return call.returned((out, count))
        return call.returned(_leading(out, self._read(count, call.stream)))


@functools.lru_cache(maxsize=32)
def _flatnonzero(dtype):
    return FlatNonzero(dtype)


def flatnonzero(x, *, stream=None):
    """The int64 indices of the nonzero elements of x, in order (numpy.flatnonzero): a new
    array. {arrays}"""
    kernel = _flatnonzero(dtype_of(x))
    return host_round_trip(lambda x: kernel(x, stream=stream), {"x": x}, stream)


flatnonzero.__doc__ = flatnonzero.__doc__.format(arrays=ONE_SHOT_ARRAYS)
command_line("flatnonzero", lambda dtype, options: FlatNonzero(dtype, **options))
