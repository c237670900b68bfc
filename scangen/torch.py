"""Differentiable scans of torch tensors: ``cumsum``, ``cumprod``, ``cummax``, ``cummin`` and
``linear_recurrence(a, b, dim, h0=0.0, reverse=False)`` run scangen's kernels forward and
backward, as torch custom operators (``torch.ops.scangen.*``, with fake implementations and
gradients registered), so ``torch.compile`` keeps each as one opaque call in its graph. An
eager call (CUDA tensors, nothing tracing) runs the same implementation and gradient as a
torch.autograd.Function, without the dispatcher's cost on the host.

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
import typing

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
    """``torch.ops.scangen.<name>(*args)`` where torch traces the call (torch.compile, a
    fake or meta tensor), else the same implementation and gradient as an autograd
    Function (_eager_functions). The operators are registered when this module is imported
    after torch (else at the first call): torch.compile traces these functions, and must
    find the operators registered, not register them."""
    import torch

    if not _REGISTERED:
        _ops()
    if _eager(torch, args) and (_DEFINITIONS[name].backward is not None or
                                not _recorded(torch, args)):
        return _eager_functions()[name](*args)
    return getattr(torch.ops.scangen, name)(*args)


def _recorded(torch, args) -> bool:
    """Whether autograd records a call of these arguments. An operator without a gradient
    (the recurrence's gradients, in a backward with create_graph=True) is then called as
    the operator, whose backward says it has none: called bare, it would record nothing,
    and a second derivative would silently leave out its part."""
    return torch.is_grad_enabled() and any(
        a.requires_grad for a in args if isinstance(a, torch.Tensor))


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
        grad_a, grad_b = _call("linear_recurrence_gradients", a, h, grad_h, dim, h0.real,
                               h0.imag, reverse)
        return grad_a, grad_b, None
    grad_a, grad_b = _call("linear_recurrence_gradients_from", a, h, grad_h, h0, dim, reverse)
    first = h.shape[dim] - 1 if reverse else 0
    return grad_a, grad_b, grad_b.select(dim, first) * a.select(dim, first).conj()


# Each operator: its schema, its CUDA implementation, its fake one (the result's shape and
# dtype, for tracing) and, where it has a gradient, the setup_context and backward that
# torch.library.custom_op and torch.autograd.Function take alike. Implementations run
# in_a_borrowed_thread: torch runs backward passes in threads of its own, which end only
# with the process, after PyCUDA has gone.


def _cumsum(x, dim, reverse):
    return _accumulated(x, "add", dim, reverse)


def _cumsum_setup(ctx, inputs, output):
    ctx.dim, ctx.reverse = inputs[1] % inputs[0].dim(), inputs[2]


def _cumsum_backward(ctx, grad):
    return _call("cumsum", grad, ctx.dim, not ctx.reverse), None, None


def _cumprod(x, dim):
    return _accumulated(x, "mul", dim, False)


def _cumprod_setup(ctx, inputs, output):
    ctx.dim = inputs[1] % inputs[0].dim()
    ctx.save_for_backward(inputs[0], output)


def _cumprod_backward(ctx, grad):
    x, y = ctx.saved_tensors
    return _recurrence_gradients(x, y, grad, ctx.dim, 1 + 0j, False)[0], None


def _extreme_setup(ctx, inputs, output):
    ctx.dim = inputs[1] % inputs[0].dim()
    ctx.save_for_backward(output[1])


def _extreme_backward(ctx, grad_values, grad_indices):
    import torch

    indices, = ctx.saved_tensors
    return torch.zeros_like(grad_values).scatter_add(ctx.dim, indices, grad_values), None, \
        None


def _recur(a, b, dim, h0, reverse):
    """scangen.linear_recurrence of the tensors (made contiguous) from ``h0``, a number or
    a contiguous tensor: the two recurrence operators' one implementation."""
    with in_a_borrowed_thread():
        return _linear_recurrence(a.contiguous(), b.contiguous(), axis=dim, h0=h0,
                                  reverse=reverse)


def _recurrence(a, b, dim, h0_real, h0_imag, reverse):
    return _recur(a, b, dim, complex(h0_real, h0_imag) if h0_imag or a.is_complex() else
                  h0_real, reverse)


def _recurrence_setup(ctx, inputs, output):
    a, _, dim, h0_real, h0_imag, reverse = inputs
    ctx.dim, ctx.h0, ctx.reverse = dim % a.dim(), complex(h0_real, h0_imag), reverse
    ctx.save_for_backward(a, output)


def _recurrence_backward(ctx, grad_h):
    a, h = ctx.saved_tensors
    grad_a, grad_b, _ = _recurrence_gradients(a, h, grad_h, ctx.dim, ctx.h0, ctx.reverse)
    return grad_a, grad_b, None, None, None, None


def _recurrence_from(a, b, h0, dim, reverse):
    return _recur(a, b, dim, h0.contiguous(), reverse)


def _from_setup(ctx, inputs, output):
    a, _, h0, dim, reverse = inputs
    ctx.dim, ctx.reverse = dim % a.dim(), reverse
    ctx.save_for_backward(a, h0, output)


def _from_backward(ctx, grad_h):
    a, h0, h = ctx.saved_tensors
    grad_a, grad_b, grad_h0 = _recurrence_gradients(a, h, grad_h, ctx.dim, h0, ctx.reverse)
    return grad_a, grad_b, grad_h0, None, None


# The gradients of a recurrence, in one scan (scangen.linear_recurrence_gradients). No
# gradient of their own: a second derivative of the recurrence is not supported.
def _differentiate(a, h, grad_h, dim, h0, reverse):
    """scangen.linear_recurrence_gradients of the tensors (made contiguous) from ``h0``, a
    number or a contiguous tensor: the two gradients operators' one implementation."""
    with in_a_borrowed_thread():
        return _linear_recurrence_gradients(a.contiguous(), h.contiguous(),
                                            grad_h.contiguous(), axis=dim, h0=h0,
                                            reverse=reverse)


def _gradients(a, h, grad_h, dim, h0_real, h0_imag, reverse):
    return _differentiate(a, h, grad_h, dim, complex(h0_real, h0_imag), reverse)


def _gradients_from(a, h, grad_h, h0, dim, reverse):
    return _differentiate(a, h, grad_h, dim, h0.contiguous(), reverse)


def _like(x, *_):
    """A new C-contiguous tensor of ``x``'s shape and dtype: what each operator returns."""
    return x.new_empty(x.shape)


def _extreme_fake(x, dim, compare):
    import torch

    return x.new_empty(x.shape), x.new_empty(x.shape, dtype=torch.int64)


class _Definition(typing.NamedTuple):
    schema: str
    run: typing.Callable
    fake: typing.Callable
    setup: typing.Callable | None = None
    backward: typing.Callable | None = None


# Schemas spelled out: this module's annotations are strings (``from __future__``).
_DEFINITIONS = {
    "cumsum": _Definition("(Tensor x, int dim, bool reverse) -> Tensor", _cumsum, _like,
                          _cumsum_setup, _cumsum_backward),
    "cumprod": _Definition("(Tensor x, int dim) -> Tensor", _cumprod, _like, _cumprod_setup,
                           _cumprod_backward),
    "cumulative_extreme": _Definition("(Tensor x, int dim, str compare) -> (Tensor, Tensor)",
                                      _cumulative_extreme, _extreme_fake, _extreme_setup,
                                      _extreme_backward),
    "linear_recurrence": _Definition(
        "(Tensor a, Tensor b, int dim, float h0_real, float h0_imag, bool reverse) -> Tensor",
        _recurrence, _like, _recurrence_setup, _recurrence_backward),
    "linear_recurrence_from": _Definition(
        "(Tensor a, Tensor b, Tensor h0, int dim, bool reverse) -> Tensor", _recurrence_from,
        _like, _from_setup, _from_backward),
    "linear_recurrence_gradients": _Definition(
        "(Tensor a, Tensor h, Tensor grad_h, int dim, float h0_real, float h0_imag, "
        "bool reverse) -> (Tensor, Tensor)", _gradients, lambda a, *_: (_like(a), _like(a))),
    "linear_recurrence_gradients_from": _Definition(
        "(Tensor a, Tensor h, Tensor grad_h, Tensor h0, int dim, bool reverse) -> "
        "(Tensor, Tensor)", _gradients_from, lambda a, *_: (_like(a), _like(a))),
}

#: Whether this process has registered the operators (_ops).
_REGISTERED = False
#: _tracing_probes, found with the operators (before any tracing, and not again on every
#: call: an import costs about half a microsecond); None: every call takes the operators.
_TRACING_PROBES = None


@functools.lru_cache(maxsize=None)
def _ops():
    """The custom operators ``torch.ops.scangen.*`` of _DEFINITIONS (registered on first
    use, once per process): what torch.compile traces as opaque calls."""
    global _REGISTERED, _TRACING_PROBES
    import torch
    from torch.library import custom_op

    _REGISTERED = True
    _TRACING_PROBES = _tracing_probes(torch)
    ops = {}
    for name, definition in _DEFINITIONS.items():
        op = custom_op(f"scangen::{name}", definition.run, mutates_args=(),
                       device_types="cuda", schema=definition.schema)
        op.register_fake(definition.fake)
        if definition.backward is not None:
            op.register_autograd(definition.backward, setup_context=definition.setup)
        ops[name] = op
    return types.SimpleNamespace(**ops)


@functools.lru_cache(maxsize=None)
def _eager_functions() -> dict:
    """Each definition as torch.autograd.Function's apply, from the same implementation,
    setup_context and backward as its operator (the implementation itself where it has
    no gradient): what an eager call runs, where torch's dispatcher and the operator's
    wrappers cost tens of microseconds a call on the host."""
    import torch

    functions = {}
    for name, definition in _DEFINITIONS.items():
        if definition.backward is None:
            functions[name] = definition.run
            continue
        # forward takes the context itself and calls setup_context's code: a Function
        # with a setup_context of its own binds each call's arguments to forward's signature
        # first (inspect.signature, about 20 us a call on the build machine's host)
        function = type(f"{name}_function", (torch.autograd.Function,), {
            "forward": staticmethod(_forward_of(definition)),
            "backward": staticmethod(definition.backward)})
        functions[name] = function.apply
    return functions


def _forward_of(definition):
    """The forward of an autograd Function (with the context) doing what a definition's
    implementation and setup_context do."""
    run, setup = definition.run, definition.setup

    def forward(ctx, *inputs):
        output = run(*inputs)
        setup(ctx, inputs, output)
        return output

    return forward


def _tracing_probes(torch):
    """``(is_compiling, current_dispatch_mode, functorch_transforms_active)``: torch's calls
    that tell whether it is tracing or transforming (torch.func), or None in a torch without
    them."""
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode
        return torch.compiler.is_compiling, _get_current_dispatch_mode, \
            torch._C._are_functorch_transforms_active
    except (ImportError, AttributeError):
        return None


def _eager(torch, args) -> bool:
    """Whether a call of these arguments may skip the operators: outside torch.compile,
    any tracing mode and torch.func's transforms (whose tensors pass for plain ones, and
    which take autograd Functions with a setup_context only), with plain CUDA tensors (not
    fake, meta or subclass ones). A torch without the calls that tell takes the
    operators."""
    if _TRACING_PROBES is None:
        return False
    is_compiling, current_dispatch_mode, transforming = _TRACING_PROBES
    return not is_compiling() and current_dispatch_mode() is None and not transforming() \
        and all(type(a) is torch.Tensor and a.is_cuda for a in args
                if isinstance(a, torch.Tensor))


# Imported after torch (as a model's code does): registered now, before anything traces.
if "torch" in sys.modules:
    _ops()
