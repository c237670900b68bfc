"""Time the linear recurrence and its gradients of the current checkout against another
one (a baseline commit checked out beside it), in one run on one GPU.

    git worktree add .baseline <commit>      # here; name .baseline in the device call's carry
    python3 benchmarks/recurrence_before_after.py --baseline .baseline \
        [--shapes 8x4096x1024:1 4096x8192:0]

Each side runs in its own process (its package first on sys.path), the two alternating
``--rounds`` times (benchmarks/sides.py). A process times, for each float32 shape and
axis, queued (scangen.bench.Timer: the GPU's time a call, median of 9): a copy of three
arrays' bytes and linear_recurrence(a, b, axis, h0=<an array of one value per line>);
a copy of five arrays' bytes and linear_recurrence_gradients, with h0 0 and with h0 that
array. Each result is checked against torch's sequential loop on a few lines first; a
wrong one prints WRONG. One line a shape and side, in microseconds and shares of the copy.
"""
import sys

import sides


def time_side(label: str, args) -> None:
    """The line of each shape for the scangen first on sys.path."""
    import torch

    import scangen

    timer = sides.queued_timer()
    torch.manual_seed(5)
    for case in args.cases:
        dims, axis = case.split(":")
        shape, axis = tuple(int(d) for d in dims.split("x")), int(axis)
        a = torch.rand(shape, device="cuda") * 0.5 + 0.5
        b = torch.rand(shape, device="cuda") - 0.5
        h0 = torch.rand(shape[:axis] + shape[axis + 1:], device="cuda")
        h, grad_h = torch.empty_like(a), torch.rand_like(a)
        grad_a, grad_b = torch.empty_like(a), torch.empty_like(a)
        right = _right(scangen, a, b, h0, grad_h, axis)

        def copy_of(arrays):  # a copy that reads and writes ``arrays`` arrays' bytes
            source = torch.empty(a.numel() * arrays // 2, device="cuda")
            target = torch.empty_like(source)
            return timer.seconds_per_call(lambda: target.copy_(source), 20 * a.numel())

        def seconds(call):
            return timer.seconds_per_call(call, 20 * a.numel())

        copy3, copy5 = copy_of(3), copy_of(5)
        forward = seconds(lambda: scangen.linear_recurrence(a, b, axis, h0=h0, out=h))
        gradients = {name: seconds(lambda: scangen.linear_recurrence_gradients(
            a, h, grad_h, axis=axis, h0=start, grad_a=grad_a, grad_b=grad_b))
            for name, start in (("gradients", None), ("gradients(h0 array)", h0))}
        line = [f"{label} {case}{'' if right else ' WRONG'}",
                f"copy3 {copy3 * 1e6:.1f} forward(h0 array) {forward * 1e6:.1f} "
                f"({100 * copy3 / forward:.0f}%)", f"copy5 {copy5 * 1e6:.1f}"]
        line += [f"{name} {t * 1e6:.1f} ({100 * copy5 / t:.0f}%)"
                 for name, t in gradients.items()]
        print(" | ".join(line), flush=True)


def _right(scangen, a, b, h0, grad_h, axis) -> bool:
    """Whether the forward pass and the gradients agree with torch's autograd through a
    sequential loop over the first lines (float64)."""
    import torch

    lines = [slice(None)] * a.dim()
    for k in range(a.dim()):
        if k != axis:
            lines[k] = slice(0, 2)
    a, b, grad_h = (x[tuple(lines)].contiguous() for x in (a, b, grad_h))
    h0 = h0[tuple(s for k, s in enumerate(lines) if k != axis)].contiguous()
    got_h = scangen.linear_recurrence(a, b, axis, h0=h0)
    got_a, got_b = scangen.linear_recurrence_gradients(a, got_h, grad_h, axis=axis, h0=h0)
    a64, b64 = (x.double().requires_grad_() for x in (a, b))
    state, steps = h0.double(), []
    for t in range(a.shape[axis]):
        state = a64.select(axis, t) * state + b64.select(axis, t)
        steps.append(state)
    want_h = torch.stack(steps, axis)
    want_a, want_b = torch.autograd.grad(want_h, (a64, b64), grad_h.double())
    return all(torch.allclose(got.double(), want, rtol=1e-3, atol=1e-3)
               for got, want in ((got_h, want_h), (got_a, want_a), (got_b, want_b)))


def main(argv=None) -> int:
    made = sides.parser(__doc__, "--shapes", ["8x4096x1024:1", "4096x8192:0"])
    return sides.run(__file__, made.parse_args(argv), made, time_side)


if __name__ == "__main__":
    sys.exit(main())
