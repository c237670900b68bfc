"""scangen.torch on the GPU: cumsum and linear_recurrence against torch's own results, and
their gradients by torch.autograd.gradcheck (finite differences in float64 and complex128)
along every axis, forward and reverse, with h0."""
import itertools

import numpy as np
import pytest

import scangen
import scangen.torch as differentiable
from scangen.operands import _recurrence_kernels

from tests.support import precompile, require_module

SHAPE = (3, 40, 5)


@pytest.fixture(scope="module")
def torch(gpu):
    return require_module("torch")


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    lines = [_recurrence_kernels(np.dtype(d), reverse, True, ())
             for d, reverse in itertools.product(("float64", "complex128"), (False, True))]
    lines += [scangen.Scan(np.float64, "add", reverse=r).lines for r in (False, True)]
    precompile([k for each in lines
                for k in (each.kernel, each.rows_kernel, each.columns_kernel)])


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cumsum_and_its_gradient(torch, dim):
    x = torch.randn(SHAPE, dtype=torch.float64, device="cuda", requires_grad=True)
    torch.testing.assert_close(differentiable.cumsum(x, dim), torch.cumsum(x, dim))
    assert torch.autograd.gradcheck(lambda t: differentiable.cumsum(t, dim), (x,))


def sequential(torch, a, b, dim, h0, reverse):
    """The recurrence one step at a time with torch's own operations."""
    a, b = a.movedim(dim, -1), b.movedim(dim, -1)
    steps = range(a.shape[-1] - 1, -1, -1) if reverse else range(a.shape[-1])
    h, out = torch.full_like(a[..., 0], h0), [None] * a.shape[-1]
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
