"""A reference scan on the CPU that applies the operator itself, in order.

Tests compare every GPU result with this, never with np.cumsum alone.
"""
from __future__ import annotations

import numpy as np

from .ops import Operator, resolve_operator
from .spec import check_mode
from .types import element_type


def sequential_scan(x, op, mode="inclusive"):
    """The definition, one element at a time: y[i] = y[i-1] op x[i]. Slow; for small n."""
    op = resolve_operator(op)
    check_mode(mode)
    x = np.asarray(x)
    etype = element_type(x.dtype)
    out = np.empty_like(x)
    acc = etype.numpy_value(op.identity_for(etype))
    for i, value in enumerate(x):
        if mode == "exclusive":
            out[i] = acc
        acc = _apply(op, acc, value, x.dtype)
        if mode == "inclusive":
            out[i] = acc
    return out


def _apply(op: Operator, a, b, dtype):
    with np.errstate(over="ignore"):
        return np.asarray(op.reference(np.asarray(a, dtype), np.asarray(b, dtype))).astype(dtype)


def reference_scan(x, op, mode="inclusive"):
    """Scan ``x`` with ``op`` on the CPU, in operand order, wrapping like numpy.

    Built-in operators use their ufunc's ``accumulate`` (a sequential left fold). Other
    operators need ``Operator.reference``, applied by recursive doubling: after the step
    of width w, y[i] = x[i-2w+1] op ... op x[i], the earlier segment always on the left, so
    the result is exact for any associative operator, commutative or not.

    Examples
    --------
    >>> scangen.reference_scan(np.array([1, 2, 3, 4]), "add", "exclusive")
    array([0, 1, 3, 6])
    >>> scangen.reference_scan(np.array([3, 0, 5, 0]), scangen.LAST_NONZERO)
    array([3, 3, 5, 5])
    """
    op = resolve_operator(op)
    if op.reference is None:
        raise ValueError(f"operator {op.name!r} has no numpy reference; pass reference= to it")
    check_mode(mode)
    x = np.asarray(x)
    etype = element_type(x.dtype)
    if isinstance(op.reference, np.ufunc):
        with np.errstate(over="ignore"):
            inclusive = op.reference.accumulate(x, dtype=x.dtype) if x.size else x.copy()
    else:
        inclusive = x.copy()
        width = 1
        with np.errstate(over="ignore"):
            while width < x.size:
                combined = op.reference(inclusive[:-width], inclusive[width:])
                inclusive[width:] = combined
                width *= 2
    if mode == "inclusive":
        return inclusive
    out = np.empty_like(x)
    if x.size:
        out[0] = etype.numpy_value(op.identity_for(etype))
        out[1:] = inclusive[:-1]
    return out
