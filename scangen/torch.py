"""Differentiable scans of torch tensors: ``scangen.torch.cumsum(x, dim)`` and
``scangen.torch.linear_recurrence(a, b, dim, h0=0.0, reverse=False)`` are
torch.autograd.Functions whose forward and backward passes both run scangen's kernels.

* cumsum: the gradient of a prefix sum is the suffix sum of the incoming gradient.
* linear_recurrence, ``h[t] = a[t] h[t-1] + b[t]``: with ``g[t]`` the whole gradient of the
  loss at ``h[t]``, ``g[t] = grad_h[t] + conj(a[t+1]) g[t+1]``, a linear recurrence in the
  other direction over the multipliers shifted by one step; then ``grad_b = g`` and
  ``grad_a[t] = g[t] conj(h[t-1])`` (``h[-1] = h0``). Complex tensors follow torch's
  convention (the conjugate Wirtinger gradient).

torch is imported when a function is first called, so ``import scangen`` needs none.
"""
from __future__ import annotations

import functools

from .one_shot import inclusive_scan
from .operands import linear_recurrence as _linear_recurrence
from .runtime.contexts import in_a_borrowed_thread

__all__ = ["cumsum", "linear_recurrence"]


def cumsum(x, dim: int):
    """``torch.cumsum(x, dim)`` on a CUDA tensor by scangen's kernels, differentiable."""
    return _functions()[0].apply(x, dim)


def linear_recurrence(a, b, dim: int, h0: float = 0.0, reverse: bool = False):
    """``h[t] = a[t] * h[t-1] + b[t]`` along ``dim`` (``h[-1] = h0``; ``reverse``: ``h[t] =
    a[t] * h[t+1] + b[t]`` from the end) of CUDA tensors of one shape and dtype (float or
    complex), differentiable in ``a`` and ``b``."""
    return _functions()[1].apply(a, b, dim, h0, reverse)


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
            dim, reverse = ctx.dim, ctx.reverse
            if h.shape[dim] == 0:
                return torch.zeros_like(a), torch.zeros_like(h), None, None, None
            # The step after t in the recurrence's own direction feeds back into t.
            # resolve_conj: torch's conj() is a lazy view; the kernels read memory.
            multipliers = _shifted(a, dim, later=not reverse, fill=0).conj().resolve_conj()
            with in_a_borrowed_thread():
                g = _linear_recurrence(multipliers, grad_h.contiguous(), axis=dim,
                                       reverse=not reverse)
            before = _shifted(h, dim, later=reverse, fill=ctx.h0)
            return g * before.conj(), g, None, None, None

    return CumSum, LinearRecurrence
