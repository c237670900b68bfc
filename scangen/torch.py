"""Differentiable scans of torch tensors: ``cumsum``, ``cumprod``, ``cummax``, ``cummin`` and
``linear_recurrence(a, b, dim, h0=0.0, reverse=False)`` are torch.autograd.Functions whose
forward and backward passes run scangen's kernels.

* cumsum: the gradient of a prefix sum is the suffix sum of the incoming gradient.
* linear_recurrence, ``h[t] = a[t] h[t-1] + b[t]``: with ``g[t]`` the whole gradient of the
  loss at ``h[t]``, ``g[t] = grad_h[t] + conj(a[t+1]) g[t+1]``, a linear recurrence in the
  other direction over the multipliers shifted by one step; then ``grad_b = g`` and
  ``grad_a[t] = g[t] conj(h[t-1])`` (``h[-1] = h0``). Complex tensors follow torch's
  convention (the conjugate Wirtinger gradient).
* cumprod is the recurrence with ``a = x``, ``b = 0`` and ``h0 = 1``, so its gradient is the
  recurrence's: no division, exact where ``x`` has zeros.
* cummax and cummin scan (value, index) pairs, the later of equal values winning and NaN
  above every number, as torch's do; the gradient of each value goes to the index it came
  from.

torch is imported when a function is first called, so ``import scangen`` needs none.
"""
from __future__ import annotations

import functools
import types

from .one_shot import inclusive_scan
from .operands import associative_scan
from .operands import linear_recurrence as _linear_recurrence
from .ops import Operator
from .runtime.contexts import in_a_borrowed_thread

__all__ = ["cummax", "cummin", "cumprod", "cumsum", "linear_recurrence"]


def cumsum(x, dim: int):
    """``torch.cumsum(x, dim)`` on a CUDA tensor by scangen's kernels, differentiable."""
    return _functions().CumSum.apply(x, dim)


def cumprod(x, dim: int):
    """``torch.cumprod(x, dim)`` on a CUDA tensor (float or complex) by scangen's kernels,
    differentiable; the gradient is exact where ``x`` has zeros (no division)."""
    return _functions().CumProd.apply(x, dim)


def cummax(x, dim: int):
    """``torch.cummax(x, dim)`` on a real CUDA tensor by scangen's kernels: ``(values,
    indices)``, the index (int64) of the element each running maximum is, the later of
    equal ones, NaN above every number; differentiable in ``x``."""
    return _functions().CumExtreme.apply(x, dim, ">=")


def cummin(x, dim: int):
    """``torch.cummin(x, dim)`` as ``cummax`` is ``torch.cummax``: ``(values, indices)``."""
    return _functions().CumExtreme.apply(x, dim, "<=")


def linear_recurrence(a, b, dim: int, h0: float = 0.0, reverse: bool = False):
    """``h[t] = a[t] * h[t-1] + b[t]`` along ``dim`` (``h[-1] = h0``; ``reverse``: ``h[t] =
    a[t] * h[t+1] + b[t]`` from the end) of CUDA tensors of one shape and dtype (float or
    complex), differentiable in ``a`` and ``b``."""
    return _functions().LinearRecurrence.apply(a, b, dim, h0, reverse)


@functools.lru_cache(maxsize=None)
def _extreme(compare: str, floating: bool) -> Operator:
    """The running extreme of (value ``v``, index ``i``) pairs: the later pair wins where
    its value ``compare``s (``>=``: max, ``<=``: min) with the earlier one's, or is NaN; the
    identity is the pair of index -1, which loses to every pair on either side."""
    nan = "b.v != b.v || " if floating else ""
    earlier_number = "a.v == a.v && " if floating else ""
    return Operator(f"(b.i != -1 && (a.i == -1 || {nan}({earlier_number}b.v {compare} a.v))) "
                    f"? b : a", identity=(0, -1),
                    name=f"running_{'max' if compare == '>=' else 'min'}_with_index")


def _recurrence_gradients(a, h, grad_h, dim: int, h0, reverse: bool):
    """``(grad_a, grad_b)`` of ``h = linear_recurrence(a, b, dim, h0, reverse)`` given the
    gradient ``grad_h`` of the loss at ``h`` (the module's docstring derives them)."""
    import torch

    if h.shape[dim] == 0:
        return torch.zeros_like(a), torch.zeros_like(h)
    # The step after t in the recurrence's own direction feeds back into t.
    # resolve_conj: torch's conj() is a lazy view; the kernels read memory.
    multipliers = _shifted(a, dim, later=not reverse, fill=0).conj().resolve_conj()
    with in_a_borrowed_thread():
        g = _linear_recurrence(multipliers, grad_h.contiguous(), axis=dim, reverse=not reverse)
    before = _shifted(h, dim, later=reverse, fill=h0)
    return g * before.conj(), g


def _shifted(x, dim: int, later: bool, fill):
    """``x`` moved one step along ``dim``: each position takes its later neighbour's value
    (``later``) or its earlier one's, and the position left empty takes ``fill``."""
    import torch

    steps = x.shape[dim]
    edge = torch.full_like(x.narrow(dim, 0, 1), fill)
    if later:
        return torch.cat([x.narrow(dim, 1, steps - 1), edge], dim)
    return torch.cat([edge, x.narrow(dim, 0, steps - 1)], dim)


@functools.lru_cache(maxsize=None)
def _functions():
    """The autograd Functions (made on first use: they subclass a torch class)."""
    import torch

    # Each pass runs in_a_borrowed_thread: torch runs backward passes in threads of its own,
    # which end only with the process, after PyCUDA has gone.
    class CumSum(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim):
            ctx.dim = dim
            with in_a_borrowed_thread():
                return inclusive_scan(x.contiguous(), axis=dim)

        @staticmethod
        def backward(ctx, grad):
            with in_a_borrowed_thread():
                return inclusive_scan(grad.contiguous(), axis=ctx.dim, reverse=True), None

    class CumProd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim):
            x = x.contiguous()
            with in_a_borrowed_thread():
                y = inclusive_scan(x, "mul", axis=dim)
            ctx.save_for_backward(x, y)
            ctx.dim = dim % x.dim()
            return y

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            return _recurrence_gradients(x, y, grad, ctx.dim, 1, False)[0], None

    class CumExtreme(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, compare):
            if x.is_complex():
                raise TypeError(f"cummax and cummin order real numbers, not {x.dtype}")
            x = x.contiguous()
            dim = dim % x.dim()
            steps = torch.arange(x.shape[dim], dtype=torch.int64, device=x.device)
            where = [1] * x.dim()
            where[dim] = -1
            index = steps.view(where).expand_as(x).contiguous()
            with in_a_borrowed_thread():
                values, indices = associative_scan(
                    _extreme(compare, x.is_floating_point()), {"v": x, "i": index}, axis=dim)
            ctx.save_for_backward(indices)
            ctx.mark_non_differentiable(indices)
            ctx.dim = dim
            return values, indices

        @staticmethod
        def backward(ctx, grad_values, grad_indices):
            indices, = ctx.saved_tensors
            grad = torch.zeros_like(grad_values).scatter_add_(ctx.dim, indices, grad_values)
            return grad, None, None

    class LinearRecurrence(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, dim, h0, reverse):
            a, b = a.contiguous(), b.contiguous()
            with in_a_borrowed_thread():
                h = _linear_recurrence(a, b, axis=dim, h0=h0, reverse=reverse)
            ctx.save_for_backward(a, h)
            ctx.dim, ctx.h0, ctx.reverse = dim % a.dim(), h0, reverse
            return h

        @staticmethod
        def backward(ctx, grad_h):
            a, h = ctx.saved_tensors
            grad_a, grad_b = _recurrence_gradients(a, h, grad_h, ctx.dim, ctx.h0, ctx.reverse)
            return grad_a, grad_b, None, None, None

    return types.SimpleNamespace(CumSum=CumSum, CumProd=CumProd, CumExtreme=CumExtreme,
                                 LinearRecurrence=LinearRecurrence)
