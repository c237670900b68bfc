"""One-shot scans: ``inclusive_scan(x)`` and ``exclusive_scan(x)`` without building a Scan.

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

__all__ = ["inclusive_scan", "exclusive_scan"]


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


def _one_shot(mode, x, operator, out, result_dtype, identity, reverse, initial, stream,
              options):
    key = tuple(sorted(options.items()))
    for name, value in key:
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"scan option {name}={value!r} must be hashable (the options key "
                            "the cache of compiled scans)") from None
    scan = _scan(dtype_of(x), _operator(operator, identity), mode,
                 None if result_dtype is None else as_dtype(result_dtype, "result_dtype"),
                 as_flag("reverse", reverse), initial is not None, key)
    return host_round_trip(lambda x, out: scan(x, out, stream=stream, initial=initial),
                           {"x": x, "out": out}, stream)


_DOC = """The {mode} scan of ``x`` with ``operator``: a new array (or ``out``).

    {formula}

    Parameters
    ----------
    x:
        A 1-D (or 2-D: every row on its own) C-contiguous array: a CuPy array, a torch
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


def inclusive_scan(x, operator="add", *, out=None, result_dtype=None, identity=None,
                   reverse=False, initial=None, stream=None, **options):
    return _one_shot("inclusive", x, operator, out, result_dtype, identity, reverse, initial,
                     stream, options)


def exclusive_scan(x, operator="add", *, out=None, result_dtype=None, identity=None,
                   reverse=False, initial=None, stream=None, **options):
    return _one_shot("exclusive", x, operator, out, result_dtype, identity, reverse, initial,
                     stream, options)


inclusive_scan.__doc__ = _DOC.format(
    mode="inclusive", formula="``y[i] = x[0] op x[1] op ... op x[i]``")
exclusive_scan.__doc__ = _DOC.format(
    mode="exclusive", formula="``y[0] = identity``, ``y[i] = x[0] op ... op x[i-1]``")
