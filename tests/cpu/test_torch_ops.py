"""scangen.torch's custom operators without a GPU (where torch is installed): on meta
tensors their fake implementations give the results' shapes and dtypes and their gradients
run, and a trace (make_fx, as torch.compile's) keeps each scan as one torch.ops.scangen call,
forward and backward. The values and gradients themselves are checked on the GPU
(tests/gpu/test_autograd.py)."""
import contextlib

import pytest

import scangen.torch as differentiable

torch = pytest.importorskip("torch")
make_fx = pytest.importorskip("torch.fx.experimental.proxy_tensor").make_fx

SHAPE = (3, 40, 5)


def meta(dtype=None, requires_grad=True):
    return torch.empty(SHAPE, device="meta", dtype=dtype or torch.float32,
                       requires_grad=requires_grad)


def scangen_calls(graph) -> list:
    """The names of the torch.ops.scangen operators a traced graph calls, in order."""
    return [node.target.name().split("::")[1] for node in graph.graph.nodes
            if node.op == "call_function" and
            getattr(node.target, "namespace", None) == "scangen"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.float64])
def test_results_and_gradients_have_the_input_shape(dtype):
    x, b = meta(dtype), meta(dtype)
    results = [differentiable.cumsum(x, 1), differentiable.cumprod(x, -1),
               differentiable.linear_recurrence(x, b, 0, h0=0.5, reverse=True)]
    if not dtype.is_complex:
        values, indices = differentiable.cummax(x, 1)
        assert indices.dtype == torch.int64 and not indices.requires_grad
        results += [values, differentiable.cummin(x, 2)[0]]
    for result in results:
        assert result.shape == SHAPE and result.dtype == dtype and result.is_contiguous()
        assert result.requires_grad
    sum(r.sum() for r in results).abs().backward()
    assert x.grad.shape == SHAPE and x.grad.dtype == dtype
    assert b.grad.shape == SHAPE


@pytest.mark.parametrize("function,forward,backward", [
    (lambda x, b: differentiable.cumsum(x, 1), ["cumsum"], ["cumsum"]),
    (lambda x, b: differentiable.cumprod(x, 1), ["cumprod"], ["linear_recurrence_gradients"]),
    (lambda x, b: differentiable.cummax(x, 1)[0], ["cumulative_extreme"], []),
    (lambda x, b: differentiable.linear_recurrence(x, b, 1, h0=0.5), ["linear_recurrence"],
     ["linear_recurrence_gradients"]),
])
def test_a_trace_keeps_each_scan_one_opaque_call(function, forward, backward):
    """What torch.compile sees: one scangen operator per scan forward, and the gradient by
    scangen's operators too (cummax's by a scatter)."""
    def step(x, b):
        y = function(x, b)
        return (y,) + torch.autograd.grad(y.sum(), (x,))

    graph = make_fx(step)(meta(), meta())
    assert scangen_calls(graph) == forward + backward
    assert scangen_calls(make_fx(lambda x, b: function(x, b))(meta(), meta())) == forward


def test_host_tensors_and_complex_orders_are_refused():
    with pytest.raises(TypeError, match="x must be a CUDA tensor, not a cpu tensor"):
        differentiable.cumsum(torch.ones(4), 0)
    with pytest.raises(TypeError, match="a must be a CUDA tensor, not a list"):
        differentiable.linear_recurrence([1.0], torch.ones(1, device="meta"), 0)
    with pytest.raises(TypeError, match="cummin orders real numbers, not torch.complex64"):
        differentiable.cummin(torch.ones(4, dtype=torch.complex64, device="meta"), 0)


@pytest.mark.parametrize("compare,reference", [(">=", "cummax"), ("<=", "cummin")])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_scans_each_value_with_its_index_along_dim(monkeypatch, compare, reference,
                                                          dim):
    """What cummax and cummin hand the scan: a tuple of the values and each one's int64
    index along ``dim``, on that axis; a sequential fold of the operator's rule (the later
    pair wins where it compares so, or is NaN) stands in for the kernel and must give
    torch's own results, ties and NaN included."""
    def fold(operator, operands, axis):
        assert isinstance(operands, tuple) and operator.identity == (0, -1)
        values, index = (t.movedim(axis, -1) for t in operands)
        assert index.dtype == torch.int64
        assert torch.equal(index, torch.arange(values.shape[-1]).expand_as(index))
        best_v, best_i = values.clone(), index.clone()
        for t in range(1, values.shape[-1]):
            v, earlier = values[..., t], best_v[..., t - 1]
            later = v.isnan() | (~earlier.isnan() & (v >= earlier if compare == ">="
                                                     else v <= earlier))
            best_v[..., t] = torch.where(later, v, earlier)
            best_i[..., t] = torch.where(later, index[..., t], best_i[..., t - 1])
        return best_v.movedim(-1, axis), best_i.movedim(-1, axis)

    monkeypatch.setattr(differentiable, "associative_scan", fold)
    monkeypatch.setattr(differentiable, "in_a_borrowed_thread", contextlib.nullcontext)
    x = torch.randint(-3, 4, SHAPE).to(torch.float64)
    x[1, 5, 1] = x[2, 20, 3] = x[2, 33, 3] = float("nan")
    values, indices = differentiable._cumulative_extreme(x, dim, compare)
    want = getattr(torch, reference)(x, dim)
    torch.testing.assert_close(values, want.values, equal_nan=True)
    torch.testing.assert_close(indices, want.indices)


def test_the_operators_pass_torchs_own_checks_on_meta_tensors():
    """torch.library.opcheck (schema, autograd registration, fake tensors, AOT dispatch with
    dynamic shapes) on meta tensors, where the fake implementations stand in for the CUDA
    ones; tests/gpu/test_autograd.py runs the same on the GPU."""
    ops = differentiable._ops()
    x, b = meta(torch.float64), meta(torch.float64)
    for op, args in [(ops.cumsum, (x, 1, False)), (ops.cumprod, (x, 2)),
                     (ops.cumulative_extreme, (x, 0, ">=")),
                     (ops.linear_recurrence, (x, b, 1, 0.5, 0.0, True)),
                     (ops.linear_recurrence_from,
                      (x, b, torch.empty((3, 5), dtype=torch.float64, device="meta",
                                         requires_grad=True), 1, False))]:
        torch.library.opcheck(op, args)
    # The gradients' operators (first derivatives only: no gradient of their own).
    a, h, grad_h = (meta(torch.float64, requires_grad=False) for _ in range(3))
    torch.library.opcheck(ops.linear_recurrence_gradients, (a, h, grad_h, 1, 0.5, 0.0, True))
    torch.library.opcheck(ops.linear_recurrence_gradients_from,
                          (a, h, grad_h, torch.empty((3, 5), dtype=torch.float64,
                                                     device="meta"), 1, False))


def test_a_model_compiles_whole_with_the_scans_in_it():
    """torch.compile(fullgraph=True) of a model that calls every function: no graph break
    (each scan one operator call), forward and backward, traced on meta tensors (the
    operators registered first, as importing scangen.torch after torch does)."""
    differentiable._ops()

    def model(x, b):
        h = differentiable.linear_recurrence(torch.sigmoid(x), b, 1, h0=0.25)
        peak, _ = differentiable.cummax(h, 1)
        return differentiable.cumsum(peak * x, 1) + differentiable.cumprod(x, 0)

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x, b = meta(), meta()
    y = compiled(x, b)
    y.sum().backward()
    assert y.shape == SHAPE and x.grad.shape == SHAPE and b.grad.shape == SHAPE


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_a_state_per_line_has_a_gradient_of_its_own(dtype):
    """h0 as a tensor of one value per line: its own operator, and a gradient for h0 of the
    lines' shape (the recurrence's gradient by scangen's operator, as for a and b)."""
    x, b = meta(dtype), meta(dtype)
    h0 = torch.empty((3, 5), dtype=dtype, device="meta", requires_grad=True)
    h = differentiable.linear_recurrence(x, b, 1, h0=h0, reverse=True)
    assert h.shape == SHAPE and h.dtype == dtype
    h.abs().sum().backward()
    assert h0.grad.shape == (3, 5) and x.grad.shape == SHAPE and b.grad.shape == SHAPE

    def step(x, b, h0):
        h = differentiable.linear_recurrence(x, b, 1, h0=h0)
        return (h,) + torch.autograd.grad(h.sum(), (x, b, h0))

    graph = make_fx(step)(meta(), meta(), torch.empty((3, 5), device="meta",
                                                      requires_grad=True))
    assert scangen_calls(graph) == ["linear_recurrence_from",
                                    "linear_recurrence_gradients_from"]


def test_an_eager_call_runs_the_operators_definitions_as_autograd_functions(monkeypatch):
    """Outside tracing, a call skips torch's dispatcher: each definition's implementation,
    setup_context and backward run as a torch.autograd.Function (here on meta tensors, the
    fake implementations standing in for the CUDA ones), and no operator is called."""
    calls = []

    def recorded(name, definition):
        def run(*args):
            calls.append(name)
            return definition.fake(*args)
        return definition._replace(run=run)

    monkeypatch.setattr(differentiable, "_DEFINITIONS", {
        name: recorded(name, d) for name, d in differentiable._DEFINITIONS.items()})
    monkeypatch.setattr(differentiable, "_eager", lambda torch, args: True)
    differentiable._eager_functions.cache_clear()
    monkeypatch.setattr(torch.ops, "scangen", None)  # any operator call would fail
    try:
        x, b = meta(), meta()
        h0 = torch.empty((3, 5), device="meta", requires_grad=True)
        h = differentiable.linear_recurrence(x, b, 1, h0=0.5) + \
            differentiable.linear_recurrence(x, b, 1, h0=h0)
        y = differentiable.cumsum(h, 2) + differentiable.cumprod(x, 0) + \
            differentiable.cummax(x, 1)[0]
        assert y.shape == SHAPE and y.requires_grad
        grads = torch.autograd.grad(y.sum(), (x, b, h0))
        assert [g.shape for g in grads] == [SHAPE, SHAPE, (3, 5)]
    finally:
        differentiable._eager_functions.cache_clear()
    assert sorted(set(calls)) == sorted(differentiable._DEFINITIONS)


def test_a_traced_or_fake_call_takes_the_operators():
    """What decides between the two paths: meta tensors, fake tensors and torch.compile's
    tracing take the operators; CUDA tensors outside them (checked on the GPU) do not."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    differentiable._ops()  # finds torch's calls that tell whether it traces, once
    assert differentiable._TRACING_PROBES == (torch.compiler.is_compiling,
                                              _get_current_dispatch_mode,
                                              torch._C._are_functorch_transforms_active)
    assert not differentiable._eager(torch, (meta(), 1, False))
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.empty(3))
        assert not differentiable._eager(torch, (fake, 0, False))


def test_torch_func_transforms_take_the_operators(monkeypatch):
    """Under torch.func's transforms tensors pass for plain ones, but the eager path's
    autograd Functions (a forward that takes the context, for speed) are not for them:
    such a call takes the operators. Probed with a CUDA tensor's test of its own made true
    on the CPU."""
    differentiable._ops()
    seen = []

    def record(x):
        seen.append(differentiable._eager(torch, (x, 1, False)))
        return (x * x).sum()

    plain = torch.ones(3)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    record(plain)
    torch.func.grad(record)(plain)
    assert seen == [True, False]


def test_a_second_derivative_of_the_recurrence_is_refused_on_the_eager_path(monkeypatch):
    """The gradients' operator has no gradient of its own: with create_graph=True an eager
    backward calls it as the operator, so differentiating the gradients raises torch's
    error instead of silently leaving their part out."""
    monkeypatch.setattr(differentiable, "_DEFINITIONS", {
        name: d._replace(run=d.fake) for name, d in differentiable._DEFINITIONS.items()})
    monkeypatch.setattr(differentiable, "_eager", lambda torch, args: True)
    differentiable._eager_functions.cache_clear()
    try:
        x, b = meta(), meta()
        h = differentiable.linear_recurrence(x, b, 1, h0=0.5)
        grad_x, = torch.autograd.grad(h.sum(), (x,), create_graph=True)
        assert grad_x.requires_grad
        with pytest.raises(RuntimeError, match="no autograd formula"):
            grad_x.sum().backward()
    finally:
        differentiable._eager_functions.cache_clear()
