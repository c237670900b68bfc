"""One-shot scans: ``inclusive_scan(x)`` and ``exclusive_scan(x)`` without building a Scan,
and numpy's cumulative functions (``cumsum``, ``cumprod``, ``cummax``, ``cummin``) on device
arrays, with numpy's dtype rules and axes.

Each call looks its Scan up in a cache keyed by everything that decides the kernels (input
dtype, operator, mode, result dtype, reverse, whether an initial value is passed, options),
so a repeated call compiles nothing; a reusable ``scangen.Scan`` still saves the lookup and
the argument checks.
"""
from __future__ import annotations

import functools

import numpy as np

from .interop import dtype_of, host_round_trip
from .ops import BUILTIN_OPERATORS, Operator
from .scan import Scan
from .spec import as_flag
from .types import as_dtype

__all__ = ["inclusive_scan", "exclusive_scan",
           "cumsum", "cumprod", "cummax", "cummin"]


@functools.lru_cache(maxsize=128)
def _scan(dtype, operator, mode, result_dtype, reverse, takes_initial, options):
    # The initial value is passed per call; any value of the scan type (a struct's too)
    # builds the kernel that takes one.
    zero = np.zeros((), dtype if result_dtype is None else result_dtype)[()]
    return Scan(dtype, operator, mode=mode, result_dtype=result_dtype, reverse=reverse,
                initial=zero if takes_initial else None, **dict(options))


def _operator(operator, identity):
    """A built-in name, a scangen.Operator, or a C expression in a and b with ``identity``."""
    if isinstance(operator, str) and operator not in BUILTIN_OPERATORS:
        if identity is None:
            raise ValueError(f"operator {operator!r} is not a built-in "
                             f"({', '.join(BUILTIN_OPERATORS)}); as a C expression in a and b "
                             "it needs identity=")
        return Operator(operator, identity)
    if identity is not None:
        raise ValueError("identity= goes with an operator written as a C expression; built-in "
                         "operators and scangen.Operator objects bring their own")
    return operator


def options_key(options: dict) -> tuple:
    """Scan options as the key of a cache of compiled scans: sorted (name, value) pairs;
    raises TypeError naming an option whose value cannot be hashed."""
    key = tuple(sorted(options.items()))
    for name, value in key:
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"scan option {name}={value!r} must be hashable (the options key "
                            "the cache of compiled scans)") from None
    return key


def _one_shot(mode, x, operator, out, axis, result_dtype, identity, reverse, initial,
              stream, options):
    key = options_key(options)
    scan = _scan(dtype_of(x), _operator(operator, identity), mode,
                 None if result_dtype is None else as_dtype(result_dtype, "result_dtype"),
                 as_flag("reverse", reverse), initial is not None, key)
    return host_round_trip(lambda x, out: scan(x, out, axis=axis, stream=stream,
                                               initial=initial),
                           {"x": x, "out": out}, stream)


_DOC = """The {mode} scan of ``x`` with ``operator``: a new array (or ``out``).

    {formula}

    Parameters
    ----------
    x:
        A C-contiguous array of any dimension, scanned along ``axis``: a CuPy array, a torch
        tensor, a pycuda GPUArray or any object with ``__cuda_array_interface__`` or
        ``__dlpack__`` (no copy; the result is of the same kind, allocated by its library),
        or a host numpy array (copied to the GPU and the result copied back: convenient,
        not fast).
    operator:
        A built-in name (add, mul, min, max, bit_and, bit_or, bit_xor), a scangen.Operator,
        or a C expression in ``a`` (the earlier operand) and ``b`` with ``identity=``. It
        must be associative and have an identity; it need not be commutative (operand order
        is kept). Floating-point results are not bit-reproducible across algorithms.
    out:
        Where to write (same kind and shape as x, of the result dtype); may be x itself.
    axis:
        The axis scanned (default: the last), every line along it on its own; no
        transposing copy is made.
    result_dtype, reverse, initial:
        As for scangen.Scan (numpy's accumulate ``dtype=``; a suffix scan; a value combined
        first).
    stream:
        A pycuda, CuPy or torch stream, or a raw CUstream handle; default: the array
        library's current stream.
    **options:
        algorithm, section_size, items_per_thread, strategy, tuning, as for scangen.Scan.

    Notes
    -----
    Each distinct (dtype, operator, options) builds a Scan once and caches it, so a
    repeated call compiles nothing; a ``scangen.Scan`` kept by the caller skips the cache
    lookup too (see docs/performance.md for the per-call cost of both).
    """


def inclusive_scan(x, operator="add", *, out=None, axis=-1, result_dtype=None, identity=None,
                   reverse=False, initial=None, stream=None, **options):
    return _one_shot("inclusive", x, operator, out, axis, result_dtype, identity, reverse,
                     initial, stream, options)


def exclusive_scan(x, operator="add", *, out=None, axis=-1, result_dtype=None, identity=None,
                   reverse=False, initial=None, stream=None, **options):
    return _one_shot("exclusive", x, operator, out, axis, result_dtype, identity, reverse,
                     initial, stream, options)


inclusive_scan.__doc__ = _DOC.format(
    mode="inclusive", formula="``y[i] = x[0] op x[1] op ... op x[i]``")
exclusive_scan.__doc__ = _DOC.format(
    mode="exclusive", formula="``y[0] = identity``, ``y[i] = x[0] op ... op x[i-1]``")


# numpy's cumulative functions, with numpy's dtype rules and axis conventions.

def accumulated_dtype(ufunc, source: np.dtype, dtype=None) -> np.dtype:
    """The type numpy's ``ufunc.accumulate`` (cumsum: np.add, cumprod: np.multiply) writes
    for input of dtype ``source``: ``dtype`` where given, else numpy's default (integers
    narrower than 64 bits widen to int64 or uint64)."""
    if dtype is not None:
        return as_dtype(dtype, "dtype")
    return ufunc.accumulate(np.zeros(1, source)).dtype


def _flattened(array, name):
    """A 1-D view of an array (``axis=None``): its library's ``reshape(-1)``."""
    if not hasattr(array, "reshape"):
        raise TypeError(f"axis=None scans {name} flattened, which needs its reshape(-1); "
                        f"{type(array).__name__} has none: pass an axis, or a 1-D array")
    return array.reshape(-1)


def _accumulate(operator, ufunc, x, axis, dtype, out, stream):
    """numpy's ``ufunc.accumulate`` by a scan with ``operator``; ``ufunc`` None keeps x's
    type (max, min), else the result type is numpy's for it (accumulated_dtype)."""
    if axis is None:
        x, axis = _flattened(x, "x"), 0
        out = None if out is None else _flattened(out, "out")
    source = dtype_of(x)
    result = source if ufunc is None else accumulated_dtype(ufunc, source, dtype)
    return _one_shot("inclusive", x, operator, out, axis, None if result == source else result,
                     None, False, None, stream, {})


_CUMULATIVE_DOC = """{what} of ``x`` along ``axis``, as ``numpy.{numpy}``: a new array (or
    ``out``).

    Parameters
    ----------
    x:
        A C-contiguous device array of any dimension (CuPy, torch, pycuda, or anything
        with ``__cuda_array_interface__`` or ``__dlpack__``; the result is of its kind), or
        a host numpy array (copied to the GPU and back).
    axis:
        The axis scanned{axis_default}.
    {dtype}out:
        Where to write: of x's kind, shape (the flattened shape with ``axis=None``) and the
        result type.
    stream:
        As for scangen.inclusive_scan.

    Notes
    -----
    A scangen.Scan ({operator}) scans it, built once per dtype and cached; floating-point
    sums and products are combined in a tree, not one by one as numpy does, so they may
    differ from numpy's in the last bits.
    """

_SUM_DTYPE = """dtype:
        The type accumulated and written. Default: numpy's (integers narrower than 64
        bits widen to int64 or uint64; others keep their type). It must hold every input
        value (see scangen.Scan's result_dtype).
    """


def cumsum(x, axis=None, dtype=None, out=None, *, stream=None):
    return _accumulate("add", np.add, x, axis, dtype, out, stream)


def cumprod(x, axis=None, dtype=None, out=None, *, stream=None):
    return _accumulate("mul", np.multiply, x, axis, dtype, out, stream)


def cummax(x, axis=0, out=None, *, stream=None):
    return _accumulate("max", None, x, axis, None, out, stream)


def cummin(x, axis=0, out=None, *, stream=None):
    return _accumulate("min", None, x, axis, None, out, stream)


_FLATTENED = " (default None: all elements, flattened in C order)"
cumsum.__doc__ = _CUMULATIVE_DOC.format(what="The cumulative sum", numpy="cumsum",
                                        axis_default=_FLATTENED, dtype=_SUM_DTYPE,
                                        operator="add")
cumprod.__doc__ = _CUMULATIVE_DOC.format(what="The cumulative product", numpy="cumprod",
                                         axis_default=_FLATTENED, dtype=_SUM_DTYPE,
                                         operator="mul")
cummax.__doc__ = _CUMULATIVE_DOC.format(what="The running maximum",
                                        numpy="maximum.accumulate",
                                        axis_default=" (default 0, as numpy's accumulate; None: "
                                                     "flattened)", dtype="", operator="max")
cummin.__doc__ = _CUMULATIVE_DOC.format(what="The running minimum",
                                        numpy="minimum.accumulate",
                                        axis_default=" (default 0, as numpy's accumulate; None: "
                                                     "flattened)", dtype="", operator="min")
