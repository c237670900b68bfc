"""scangen.torch on the GPU: cumsum, cumprod, cummax, cummin and linear_recurrence against
torch's own results, and their gradients by torch.autograd.gradcheck (finite differences in
float64 and complex128) along every axis, forward and reverse, with h0; cumprod's gradient
at zeros and cummax's at ties against torch's own autograd."""
import itertools

import numpy as np
import pytest

import scangen
import scangen.torch as differentiable
from scangen.operands import _operand_kernels, _recurrence_kernels
from scangen.torch import _extreme

from tests.support import precompile, require_module

SHAPE = (3, 40, 5)


@pytest.fixture(scope="module")
def torch(gpu):
    torch = require_module("torch")
    differentiable._ops()  # registered, as importing scangen.torch after torch does
    return torch


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    lines = [_recurrence_kernels(np.dtype(d), reverse, "number", ())
             for d, reverse in itertools.product(("float64", "complex128"), (False, True))]
    lines += [scangen.Scan(np.float64, "add", reverse=r).lines for r in (False, True)]
    lines += [scangen.Scan(d, "mul").lines for d in (np.float64, np.complex128)]
    lines += [_operand_kernels(_extreme(compare, np.dtype(d).kind == "f"), ("f0", "f1"),
                               (np.dtype(d), np.dtype(np.int64)), "inclusive", False, False, ())
              for compare, d in itertools.product((">=", "<="), ("float64", "int32"))]
    precompile([k for each in lines
                for k in (each.kernel, each.rows_kernel, each.columns_kernel)])


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cumsum_and_its_gradient(torch, dim):
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    torch.testing.assert_close(differentiable.cumsum(x, dim), torch.cumsum(x, dim))
    assert torch.autograd.gradcheck(lambda t: differentiable.cumsum(t, dim), (x,))


def sequential(torch, a, b, dim, h0, reverse):
    """The recurrence one step at a time with torch's own operations, from h0."""
    a, b = a.movedim(dim, -1), b.movedim(dim, -1)
    steps = range(a.shape[-1] - 1, -1, -1) if reverse else range(a.shape[-1])
    # h0: a number, or a tensor of one value per line (the shape without dim)
    h, out = torch.zeros_like(a[..., 0]) + h0, [None] * a.shape[-1]
    for t in steps:
        h = a[..., t] * h + b[..., t]
        out[t] = h
    return torch.stack(out, -1).movedim(-1, dim)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, False), (2, True), (1, True)])
def test_linear_recurrence_and_its_gradient(torch, dtype, dim, reverse):
    dtype = getattr(torch, dtype)
    a = (0.5 + 0.5 * torch.rand(SHAPE, dtype=torch.float64, device="cuda")).to(dtype)
    if dtype.is_complex:
        a = a * torch.exp(1j * torch.rand(SHAPE, dtype=torch.float64, device="cuda"))
    b = torch.randn(SHAPE, dtype=dtype, device="cuda")
    a.requires_grad_(True)
    b.requires_grad_(True)
    h0 = 0.5 - 0.25j if dtype.is_complex else 0.5
    got = differentiable.linear_recurrence(a, b, dim, h0=h0, reverse=reverse)
    torch.testing.assert_close(got, sequential(torch, a, b, dim, h0, reverse))
    assert torch.autograd.gradcheck(
        lambda x, y: differentiable.linear_recurrence(x, y, dim, h0=h0, reverse=reverse),
        (a, b))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod_and_its_gradient(torch, dtype, dim):
    dtype = getattr(torch, dtype)
    x = (0.5 + torch.rand(SHAPE, dtype=torch.float64, device="cuda")).to(dtype)
    if dtype.is_complex:
        x = x * torch.exp(1j * torch.rand(SHAPE, dtype=torch.float64, device="cuda"))
    x.requires_grad_(True)
    torch.testing.assert_close(differentiable.cumprod(x, dim), torch.cumprod(x, dim))
    assert torch.autograd.gradcheck(lambda t: differentiable.cumprod(t, dim), (x,))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("dim,reverse", [(1, False), (0, True), (2, False)])
def test_linear_recurrence_from_a_state_per_line(torch, dtype, dim, reverse):
    """h0 a tensor of one value per line: values against the sequential loop started from
    each line's own state, and gradchecked in a, b and h0."""
    dtype = getattr(torch, dtype)
    a = (0.5 + 0.5 * torch.rand(SHAPE, dtype=torch.float64, device="cuda")).to(dtype)
    b = torch.randn(SHAPE, dtype=dtype, device="cuda")
    lines = SHAPE[:dim] + SHAPE[dim + 1:]
    h0 = torch.randn(lines, dtype=dtype, device="cuda")
    for t in (a, b, h0):
        t.requires_grad_(True)
    got = differentiable.linear_recurrence(a, b, dim, h0=h0, reverse=reverse)
    want = sequential(torch, a, b, dim, h0, reverse)
    torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(
        lambda x, y, z: differentiable.linear_recurrence(x, y, dim, h0=z, reverse=reverse),
        (a, b, h0))


def test_cumprod_gradient_at_zeros(torch):
    """No division: where x has zeros (one, or two in a line) the gradient is torch's."""
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda")
    x[0, 7, :] = 0
    x[1, 3, 2] = x[1, 30, 2] = 0
    x[2, 0, 4] = 0
    grad = torch.randn(SHAPE, dtype=torch.float64, device="cuda")
    ours, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (differentiable.cumprod(ours, 1) * grad).sum().backward()
    (torch.cumprod(theirs, 1) * grad).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_and_cummin_match_torch_with_ties_and_nans(torch, name, dim):
    ours, theirs = getattr(differentiable, name), getattr(torch, name)
    ties = torch.randint(-3, 4, SHAPE, device="cuda").to(torch.float64)  # many equal values
    ties[1, 5, 1] = ties[2, 20, 3] = ties[2, 33, 3] = float("nan")
    for x in (ties, torch.randint(-3, 4, SHAPE, device="cuda", dtype=torch.int32)):
        values, indices = ours(x, dim)
        want = theirs(x, dim)
        torch.testing.assert_close(values, want.values, equal_nan=True)
        assert indices.dtype == torch.int64
        torch.testing.assert_close(indices, want.indices)
    # the gradient of each running value goes to the element it is (ties included)
    x = ties.nan_to_num(0.5)
    grad = torch.randn(SHAPE, dtype=torch.float64, device="cuda")
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (ours(a, dim)[0] * grad).sum().backward()
    (theirs(b, dim).values * grad).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    distinct = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ours(t, dim)[0], (distinct,))


def test_cummax_refuses_complex(torch):
    with pytest.raises(TypeError, match="cummax orders real numbers"):
        differentiable.cummax(torch.ones(4, dtype=torch.complex64, device="cuda"), 0)


def test_an_eager_call_skips_torchs_dispatcher_and_a_compiled_one_does_not(torch):
    """CUDA tensors outside tracing take the autograd Functions (the operators' own
    implementations and gradients, without the dispatcher's cost a call); gradcheck above
    checks their values."""
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    assert differentiable._eager(torch, (x, 1, False))
    assert type(differentiable.cumsum(x, 1).grad_fn).__name__ == "cumsum_functionBackward"
    with torch.no_grad():
        torch.testing.assert_close(differentiable.cumsum(x, 1),
                                   differentiable._ops().cumsum(x, 1, False))


def test_second_derivatives_of_a_sum_and_none_of_the_recurrence(torch):
    """cumsum's backward is cumsum again, so it differentiates twice (gradgradcheck); the
    recurrence's gradients have no gradient of their own, and differentiating them raises
    rather than leaving their part out."""
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: differentiable.cumsum(t, 1), (x,))
    a = (0.5 + 0.5 * torch.rand(SHAPE, dtype=torch.float64, device="cuda")).requires_grad_(True)
    h = differentiable.linear_recurrence(a, x, 1)
    grad_a, = torch.autograd.grad(h.sum(), (a,), create_graph=True)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        grad_a.sum().backward()


def test_inside_torch_compile(torch):
    """A compiled model (fullgraph: no graph break) calls the scans as opaque operators and
    gets eager's values and gradients."""
    def model(a, b, x):
        h = differentiable.linear_recurrence(torch.sigmoid(a), b, 1, h0=0.25)
        peak, _ = differentiable.cummax(h, 1)
        return differentiable.cumsum(peak * x, 2) + differentiable.cumprod(x, 1)

    compiled = torch.compile(model, fullgraph=True)
    inputs = [torch.randn(SHAPE, dtype=torch.float64, device="cuda") for _ in range(3)]
    eager = [t.clone().requires_grad_(True) for t in inputs]
    traced = [t.clone().requires_grad_(True) for t in inputs]
    want, got = model(*eager), compiled(*traced)
    torch.testing.assert_close(got, want)
    grad = torch.randn(SHAPE, dtype=torch.float64, device="cuda")
    want.backward(grad)
    got.backward(grad)
    for e, t in zip(eager, traced):
        torch.testing.assert_close(t.grad, e.grad)


def test_inside_torch_compile_with_cuda_graphs(torch):
    """mode="reduce-overhead": the compiled model's scans are captured into CUDA graphs
    and replayed; each replay's values are eager's for that call's inputs. The columns
    kernel along dim 1 of many tiles keeps scratch (its tile status), which a capture takes
    from the graph's own."""
    def model(a, b):
        h = differentiable.linear_recurrence(torch.sigmoid(a), b, 1)
        return differentiable.cumsum(h, 1) + differentiable.cumprod(torch.sigmoid(b), 2)

    shape = (2, 3000, 40)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(5):  # warm-up, recording, then replays
            a, b = (torch.randn(shape, dtype=torch.float64, device="cuda") for _ in range(2))
            torch.testing.assert_close(compiled(a, b).clone(), model(a, b))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sixteen_bit_recurrence_matches_float32_and_differentiates(torch, dtype):
    """16-bit tensors recur in float32 (the state is never rounded to 16 bits): forward and
    both gradients agree with the float32 computation to the 16-bit type's rounding."""
    dtype = getattr(torch, dtype)
    eps = torch.finfo(dtype).eps
    a = (0.5 + 0.5 * torch.rand(SHAPE, device="cuda")).to(dtype).requires_grad_(True)
    b = torch.randn(SHAPE, device="cuda").to(dtype).requires_grad_(True)
    wide_a, wide_b = (t.detach().float().requires_grad_(True) for t in (a, b))
    h = differentiable.linear_recurrence(a, b, 1, h0=0.5)
    wide = differentiable.linear_recurrence(wide_a, wide_b, 1, h0=0.5)
    assert h.dtype == dtype
    scale = wide.abs().max().item()
    torch.testing.assert_close(h.float(), wide, rtol=2 * eps, atol=2 * eps * scale)
    grad = torch.randn(SHAPE, device="cuda")
    h.backward(grad.to(dtype))
    wide.backward(grad.to(dtype).float())
    for narrow, full in ((a, wide_a), (b, wide_b)):
        # the backward's own inputs (g, h) are 16-bit: a few units of rounding more
        limit = 8 * eps * full.grad.abs().max().item()
        torch.testing.assert_close(narrow.grad.float(), full.grad, rtol=8 * eps, atol=limit)


def test_the_custom_operators_pass_torchs_own_checks(torch):
    """torch.library.opcheck on each operator: its schema, fake implementation (shapes and
    strides of the real results), autograd registration and AOT dispatch agree."""
    from scangen.torch import _ops

    ops = _ops()
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    b = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    a = (0.5 + 0.5 * torch.rand(SHAPE, dtype=torch.float64, device="cuda")).requires_grad_(True)
    for op, args in [(ops.cumsum, (x, 1, False)), (ops.cumprod, (a, 2)),
                     (ops.cumulative_extreme, (x, 0, ">=")),
                     (ops.linear_recurrence, (a, b, 1, 0.5, 0.0, True))]:
        torch.library.opcheck(op, args)
    plain = [t.detach() for t in (a, x, b)]
    torch.library.opcheck(ops.linear_recurrence_gradients, (*plain, 2, 0.5, 0.0, False))
    torch.library.opcheck(ops.linear_recurrence_gradients_from,
                          (*plain, torch.randn(SHAPE[:2], dtype=torch.float64, device="cuda"),
                           2, True))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_sixteen_bit_sums_and_products_accumulate_in_float32(torch, dtype, name):
    """As torch's: the running value kept in float32 and rounded once, so a long sum of
    16-bit values stays within a unit of the 16-bit type of the float32 result (a 16-bit
    running sum drifts by many), gradients included."""
    dtype = getattr(torch, dtype)
    eps = torch.finfo(dtype).eps
    shape = (4, 3000) if name == "cumsum" else (4, 60)
    x = (torch.rand(shape, device="cuda") + (0.5 if name == "cumsum" else 0.6)).to(dtype)
    ours = getattr(differentiable, name)(x.requires_grad_(True), 1)
    wide = getattr(torch, name)(x.detach().float(), 1)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours.float(), wide, rtol=eps, atol=eps * wide.abs().max().item())
    ours.sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad.float()).all()
