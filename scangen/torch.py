"""Differentiable scans of torch tensors: ``cumsum``, ``cumprod``, ``cummax``, ``cummin`` and
``linear_recurrence(a, b, dim, h0=0.0, reverse=False)`` run scangen's kernels forward and
backward, as torch custom operators (``torch.ops.scangen.*``, with fake implementations and
gradients registered), so ``torch.compile`` keeps each as one opaque call in its graph.

* cumsum: the gradient of a prefix sum is the suffix sum of the incoming gradient. float16
  and bfloat16 sums (and products) accumulate in float32 and are rounded once, as torch's.
* linear_recurrence, ``h[t] = a[t] h[t-1] + b[t]``: with ``g[t]`` the whole gradient of the
  loss at ``h[t]``, ``g[t] = grad_h[t] + conj(a[t+1]) g[t+1]``, a linear recurrence in the
  other direction over the multipliers shifted by one step; then ``grad_b = g`` and
  ``grad_a[t] = g[t] conj(h[t-1])`` (``h[-1] = h0``): one scan writes both
  (scangen.linear_recurrence_gradients, its own operator). Complex tensors follow torch's
  convention (the conjugate Wirtinger gradient). Gradients are first derivatives only: the
  gradients' operator has none of its own.
* cumprod is the recurrence with ``a = x``, ``b = 0`` and ``h0 = 1``, so its gradient is the
  recurrence's: no division, exact where ``x`` has zeros.
* cummax and cummin scan (value, index) pairs, the later of equal values winning and NaN
  above every number, as torch's do; the gradient of each value goes to the index it came
  from.

torch is imported when a function is first called, so ``import scangen`` needs none. The
operators are registered when this module is imported after torch, as a model's code imports
them; imported before torch, at the first call, which must then come before torch.compile
traces one (tracing cannot register an operator).
"""
from __future__ import annotations

import functools
import sys
import types

import numpy as np

from .one_shot import inclusive_scan
from .operands import associative_scan
from .operands import linear_recurrence as _linear_recurrence
from .operands import linear_recurrence_gradients as _linear_recurrence_gradients
from .ops import Operator
from .runtime.contexts import in_a_borrowed_thread

__all__ = ["cummax", "cummin", "cumprod", "cumsum", "linear_recurrence"]


def cumsum(x, dim: int):
    """``torch.cumsum(x, dim)`` on a CUDA tensor by scangen's kernels, differentiable;
    float16 and bfloat16 accumulate in float32, as torch's does."""
    return _call("cumsum", _on_gpu(x, "x"), dim, False)


def cumprod(x, dim: int):
    """``torch.cumprod(x, dim)`` on a CUDA tensor (float or complex) by scangen's kernels,
    differentiable; the gradient is exact where ``x`` has zeros (no division). float16 and
    bfloat16 multiply in float32, as torch's does."""
    return _call("cumprod", _on_gpu(x, "x"), dim)


def cummax(x, dim: int):
    """``torch.cummax(x, dim)`` on a real CUDA tensor by scangen's kernels: ``(values,
    indices)``, the index (int64) of the element each running maximum is, the later of
    equal ones, NaN above every number; differentiable in ``x``."""
    return _call("cumulative_extreme", _real(_on_gpu(x, "x"), "cummax"), dim, ">=")


def cummin(x, dim: int):
    """``torch.cummin(x, dim)`` as ``cummax`` is ``torch.cummax``: ``(values, indices)``."""
    return _call("cumulative_extreme", _real(_on_gpu(x, "x"), "cummin"), dim, "<=")


def linear_recurrence(a, b, dim: int, h0=0.0, reverse: bool = False):
    """``h[t] = a[t] * h[t-1] + b[t]`` along ``dim`` (``h[-1] = h0``; ``reverse``: ``h[t] =
    a[t] * h[t+1] + b[t]`` from the end) of CUDA tensors of one shape and dtype (float or
    complex), differentiable in ``a`` and ``b``. ``h0`` is a number, or a tensor of their
    dtype with one value per line (their shape without ``dim``: the state a previous chunk
    ended in), differentiable too."""
    import torch

    if isinstance(h0, torch.Tensor):
        return _call("linear_recurrence_from", _on_gpu(a, "a"), _on_gpu(b, "b"),
                     _on_gpu(h0, "h0"), dim, reverse)
    h0 = complex(h0)
    return _call("linear_recurrence", _on_gpu(a, "a"), _on_gpu(b, "b"), dim, h0.real,
                 h0.imag, reverse)


def _call(name: str, *args):
    """``torch.ops.scangen.<name>(*args)``. The operators are registered when this module is
    imported after torch (else at the first call): torch.compile traces these functions,
    and must find the operators registered, not register them."""
    import torch

    if not _REGISTERED:
        _ops()
    return getattr(torch.ops.scangen, name)(*args)


def _on_gpu(x, name: str):
    """``x`` if it is a CUDA tensor (or a fake one, while torch.compile traces), else a
    TypeError naming it: the operators have CUDA kernels only."""
    import torch

    if not isinstance(x, torch.Tensor) or x.device.type not in ("cuda", "meta"):
        where = f"a {x.device.type} tensor" if isinstance(x, torch.Tensor) else \
            f"a {type(x).__name__}"
        raise TypeError(f"{name} must be a CUDA tensor, not {where}: move it with .cuda()")
    return x


def _real(x, function: str):
    if x.is_complex():
        raise TypeError(f"{function} orders real numbers, not {x.dtype}")
    return x


@functools.lru_cache(maxsize=None)
def _extreme(compare: str, floating: bool) -> Operator:
    """The running extreme of (value, index) pairs (fields ``f0`` and ``f1``, as
    associative_scan names a tuple's): the later pair wins where its value ``compare``s
    (``>=``: max, ``<=``: min) with the earlier one's, or is NaN; the identity is the pair
    of index -1, which loses to every pair on either side."""
    nan = "b.f0 != b.f0 || " if floating else ""
    earlier_number = "a.f0 == a.f0 && " if floating else ""
    return Operator(f"(b.f1 != -1 && (a.f1 == -1 || {nan}({earlier_number}b.f0 {compare} "
                    f"a.f0))) ? b : a", identity=(0, -1),
                    name=f"running_{'max' if compare == '>=' else 'min'}_with_index")


def _accumulated(x, operator: str, dim: int, reverse: bool):
    """The inclusive scan of ``x`` along ``dim`` with a built-in operator; float16 and
    bfloat16 accumulate in float32 and are rounded once at the end, as torch's cumsum and
    cumprod do (a 16-bit running sum would round at every step)."""
    import torch

    narrow = x.dtype in (torch.float16, torch.bfloat16)
    with in_a_borrowed_thread():
        result = inclusive_scan(x.contiguous(), operator, axis=dim, reverse=reverse,
                                result_dtype=np.float32 if narrow else None)
    return result.to(x.dtype) if narrow else result


def _cumulative_extreme(x, dim: int, compare: str):
    """``(values, indices)`` of the running extreme along ``dim``: one scan of the pairs of
    ``x`` and each element's index along ``dim`` (int64, as torch's indices)."""
    import torch

    x = x.contiguous()
    dim = dim % x.dim()
    where = [1] * x.dim()
    where[dim] = -1
    index = torch.arange(x.shape[dim], dtype=torch.int64, device=x.device) \
        .view(where).expand_as(x).contiguous()
    with in_a_borrowed_thread():
        return associative_scan(_extreme(compare, x.is_floating_point()), (x, index), axis=dim)


def _recurrence_gradients(a, h, grad_h, dim: int, h0, reverse: bool):
    """``(grad_a, grad_b, grad_h0)`` of ``h = linear_recurrence(a, b, dim, h0, reverse)``
    given the gradient ``grad_h`` of the loss at ``h`` (the module's docstring derives
    them, one scan computes grad_a and grad_b); ``h0`` a complex number or a tensor of one
    value per line, and ``grad_h0`` the gradient flowing into a tensor h0 (one value per
    line: ``conj(a)`` at each line's first step times ``g`` there), None for a number."""
    import torch

    if h.shape[dim] == 0:
        return torch.zeros_like(a), torch.zeros_like(h), \
            h.new_zeros(h.shape[:dim] + h.shape[dim + 1:])
    if not isinstance(h0, torch.Tensor):
        h0 = complex(h0)
        grad_a, grad_b = _ops().linear_recurrence_gradients(a, h, grad_h, dim, h0.real,
                                                             h0.imag, reverse)
        return grad_a, grad_b, None
    grad_a, grad_b = _ops().linear_recurrence_gradients_from(a, h, grad_h, h0, dim, reverse)
    first = h.shape[dim] - 1 if reverse else 0
    return grad_a, grad_b, grad_b.select(dim, first) * a.select(dim, first).conj()


#: Whether this process has registered the operators (_ops).
_REGISTERED = False


@functools.lru_cache(maxsize=None)
def _ops():
    """The custom operators ``torch.ops.scangen.*`` (registered on first use, once per
    process): each a CUDA implementation by scangen's kernels, a fake one (the result's
    shape and dtype, for tracing) and its gradient."""
    global _REGISTERED
    import torch
    from torch.library import custom_op

    _REGISTERED = True
    # Each implementation runs in_a_borrowed_thread: torch runs backward passes in threads
    # of its own, which end only with the process, after PyCUDA has gone.

    # Schemas spelled out: this module's annotations are strings (``from __future__``).
    @custom_op("scangen::cumsum", mutates_args=(), device_types="cuda",
               schema="(Tensor x, int dim, bool reverse) -> Tensor")
    def cumsum_op(x, dim, reverse):
        return _accumulated(x, "add", dim, reverse)

    @custom_op("scangen::cumprod", mutates_args=(), device_types="cuda",
               schema="(Tensor x, int dim) -> Tensor")
    def cumprod_op(x, dim):
        return _accumulated(x, "mul", dim, False)

    @custom_op("scangen::cumulative_extreme", mutates_args=(), device_types="cuda",
               schema="(Tensor x, int dim, str compare) -> (Tensor, Tensor)")
    def extreme_op(x, dim, compare):
        return _cumulative_extreme(x, dim, compare)

    @custom_op("scangen::linear_recurrence", mutates_args=(), device_types="cuda",
               schema="(Tensor a, Tensor b, int dim, float h0_real, float h0_imag, "
                      "bool reverse) -> Tensor")
    def recurrence_op(a, b, dim, h0_real, h0_imag, reverse):
        h0 = complex(h0_real, h0_imag) if h0_imag or a.is_complex() else h0_real
        with in_a_borrowed_thread():
            return _linear_recurrence(a.contiguous(), b.contiguous(), axis=dim, h0=h0,
                                      reverse=reverse)

    @custom_op("scangen::linear_recurrence_from", mutates_args=(), device_types="cuda",
               schema="(Tensor a, Tensor b, Tensor h0, int dim, bool reverse) -> Tensor")
    def recurrence_from_op(a, b, h0, dim, reverse):
        with in_a_borrowed_thread():
            return _linear_recurrence(a.contiguous(), b.contiguous(), axis=dim,
                                      h0=h0.contiguous(), reverse=reverse)

    # The gradients of a recurrence, in one scan (scangen.linear_recurrence_gradients).
    # No gradient of their own: a second derivative of the recurrence is not supported.
    @custom_op("scangen::linear_recurrence_gradients", mutates_args=(), device_types="cuda",
               schema="(Tensor a, Tensor h, Tensor grad_h, int dim, float h0_real, "
                      "float h0_imag, bool reverse) -> (Tensor, Tensor)")
    def gradients_op(a, h, grad_h, dim, h0_real, h0_imag, reverse):
        with in_a_borrowed_thread():
            return _linear_recurrence_gradients(a.contiguous(), h.contiguous(),
                                                grad_h.contiguous(), axis=dim,
                                                h0=complex(h0_real, h0_imag), reverse=reverse)

    @custom_op("scangen::linear_recurrence_gradients_from", mutates_args=(),
               device_types="cuda",
               schema="(Tensor a, Tensor h, Tensor grad_h, Tensor h0, int dim, bool reverse) "
                      "-> (Tensor, Tensor)")
    def gradients_from_op(a, h, grad_h, h0, dim, reverse):
        with in_a_borrowed_thread():
            return _linear_recurrence_gradients(a.contiguous(), h.contiguous(),
                                                grad_h.contiguous(), axis=dim,
                                                h0=h0.contiguous(), reverse=reverse)

    # What each returns, for tracing: new C-contiguous tensors of the input's shape.
    cumsum_op.register_fake(lambda x, dim, reverse: x.new_empty(x.shape))
    cumprod_op.register_fake(lambda x, dim: x.new_empty(x.shape))
    extreme_op.register_fake(lambda x, dim, compare: (
        x.new_empty(x.shape), x.new_empty(x.shape, dtype=torch.int64)))
    recurrence_op.register_fake(lambda a, b, dim, h0_real, h0_imag, reverse: a.new_empty(
        a.shape))
    recurrence_from_op.register_fake(lambda a, b, h0, dim, reverse: a.new_empty(a.shape))
    for op in (gradients_op, gradients_from_op):
        op.register_fake(lambda a, *_: (a.new_empty(a.shape), a.new_empty(a.shape)))

    def cumsum_setup(ctx, inputs, output):
        ctx.dim, ctx.reverse = inputs[1] % inputs[0].dim(), inputs[2]

    def cumsum_backward(ctx, grad):
        return cumsum_op(grad, ctx.dim, not ctx.reverse), None, None

    def cumprod_setup(ctx, inputs, output):
        ctx.dim = inputs[1] % inputs[0].dim()
        ctx.save_for_backward(inputs[0], output)

    def cumprod_backward(ctx, grad):
        x, y = ctx.saved_tensors
        return _recurrence_gradients(x, y, grad, ctx.dim, 1 + 0j, False)[0], None

    def extreme_setup(ctx, inputs, output):
        ctx.dim = inputs[1] % inputs[0].dim()
        ctx.save_for_backward(output[1])

    def extreme_backward(ctx, grad_values, grad_indices):
        indices, = ctx.saved_tensors
        return torch.zeros_like(grad_values).scatter_add(ctx.dim, indices, grad_values), \
            None, None

    def recurrence_setup(ctx, inputs, output):
        a, _, dim, h0_real, h0_imag, reverse = inputs
        ctx.dim, ctx.h0, ctx.reverse = dim % a.dim(), complex(h0_real, h0_imag), reverse
        ctx.save_for_backward(a, output)

    def recurrence_backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        grad_a, grad_b, _ = _recurrence_gradients(a, h, grad_h, ctx.dim, ctx.h0, ctx.reverse)
        return grad_a, grad_b, None, None, None, None

    def from_setup(ctx, inputs, output):
        a, _, h0, dim, reverse = inputs
        ctx.dim, ctx.reverse = dim % a.dim(), reverse
        ctx.save_for_backward(a, h0, output)

    def from_backward(ctx, grad_h):
        a, h0, h = ctx.saved_tensors
        grad_a, grad_b, grad_h0 = _recurrence_gradients(a, h, grad_h, ctx.dim, h0,
                                                        ctx.reverse)
        return grad_a, grad_b, grad_h0, None, None

    cumsum_op.register_autograd(cumsum_backward, setup_context=cumsum_setup)
    cumprod_op.register_autograd(cumprod_backward, setup_context=cumprod_setup)
    extreme_op.register_autograd(extreme_backward, setup_context=extreme_setup)
    recurrence_op.register_autograd(recurrence_backward, setup_context=recurrence_setup)
    recurrence_from_op.register_autograd(from_backward, setup_context=from_setup)

    return types.SimpleNamespace(cumsum=cumsum_op, cumprod=cumprod_op,
                                 cumulative_extreme=extreme_op, linear_recurrence=recurrence_op,
                                 linear_recurrence_from=recurrence_from_op,
                                 linear_recurrence_gradients=gradients_op,
                                 linear_recurrence_gradients_from=gradients_from_op)


# Imported after torch (as a model's code does): registered now, before anything traces.
if "torch" in sys.modules:
    _ops()
