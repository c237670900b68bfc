"""Time training steps through scangen.torch (forward and torch.autograd.grad) of the
current checkout against another one (a baseline commit checked out beside it), in one run
on one GPU.

    git worktree add .baseline <commit>      # here; name .baseline in the device call's carry
    python3 benchmarks/torch_before_after.py --baseline .baseline \
        [--shapes 1x1024x768:1 8x4096x1024:1]

Each side runs in its own process (its package first on sys.path), the two alternating
``--rounds`` times (benchmarks/sides.py). A process times, for each float32 shape and dim,
by the host's clock around back-to-back calls (the steps of a small shape are bound by
the host, which this measures): linear_recurrence(a, b, dim) with torch.autograd.grad of
a and b, the forward alone, and cumsum with its gradient, beside torch.cumsum's. One line
a shape and side, in microseconds a step.
"""
import sys
import time

import sides


def time_side(label: str, args) -> None:
    """The line of each shape for the scangen first on sys.path."""
    import torch

    import scangen.torch as differentiable

    def us(step, calls):
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    torch.manual_seed(5)
    for case in args.cases:
        dims, dim = case.split(":")
        shape, dim = tuple(int(d) for d in dims.split("x")), int(dim)
        calls = max(20, min(300, (1 << 28) // (4 * torch.Size(shape).numel())))
        a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).requires_grad_()
        b = (torch.rand(shape, device="cuda") - 0.5).requires_grad_()
        grad = torch.rand_like(a)
        times = {
            "recurrence fwd+grad": lambda: torch.autograd.grad(
                differentiable.linear_recurrence(a, b, dim), (a, b), grad),
            "recurrence fwd": lambda: differentiable.linear_recurrence(a, b, dim),
            "cumsum fwd+grad": lambda: torch.autograd.grad(
                differentiable.cumsum(b, dim), (b,), grad),
            "torch.cumsum fwd+grad": lambda: torch.autograd.grad(
                torch.cumsum(b, dim), (b,), grad)}
        print(" | ".join([f"{label} {case}"] + [f"{name} {us(step, calls):.1f}"
                                               for name, step in times.items()]), flush=True)


def main(argv=None) -> int:
    made = sides.parser(__doc__, "--shapes", ["1x1024x768:1", "8x4096x1024:1"])
    return sides.run(__file__, made.parse_args(argv), made, time_side)


if __name__ == "__main__":
    sys.exit(main())
