"""Time scans of N-D arrays along one axis next to torch.cumsum along the same dimension and
a copy of the same bytes.

    python benchmarks/axis.py [--shapes 8x4096x1024:1 4096x8192:0 ... | --model-shapes]
                              [--json out.json] [--tiles 128x32 256x16 ...] [--queued]
                              [--recurrence [--backward]]

Each case is ``SHAPE:AXIS`` (float32 add); ``--model-shapes`` takes the shapes of models'
sequences instead: (B, L, D) along L and (B, D, L) along the last axis, for B in 1, 8, 16,
L in 1024, 4096, 16384 and D in 768, 2048, 5120. Every contender is timed as ``python -m
scangen bench`` times scans (scangen.bench.Timer: CUDA events around back-to-back calls,
warm-up first, median of the trials) on torch tensors in and out, and cupy.cumsum on CuPy
views of the same memory where CuPy is installed. "copy" is one device-to-device copy of
the array, the floor of any scan that reads it once and writes it once. Along an
axis other than the last, scangen takes its columns kernel (``Scan.plan(shape, axis=)``
says so); along the last, its rows kernel. ``--tiles BLOCKxITEMS ...`` adds a scangen row per
tile shape (block size x items per thread; a column tile is 32 columns by block / 32 x items
rows, whatever the table's columns_max_items_per_thread), the sweep a tuning choice comes
from. ``--recurrence`` times
``scangen.linear_recurrence(a, b, axis)`` (float32 a, b, h) on the same shapes instead, against
a copy of the bytes it must move (two arrays read, one written) and, where torch.compile
works here, torch's associative_scan compiled with the same combine; ``--backward`` adds
its gradients (scangen.linear_recurrence_gradients, against a copy of the five arrays they
move) and forward plus backward through scangen.torch and torch.compile. ``--queued``
queues a call ahead of each timed batch: the GPU's time, without the host's work before a
call's first kernel (a batch at these sizes is one call).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scangen  # noqa: E402
from scangen.bench import Timer  # noqa: E402

DEFAULT_CASES = ["8x4096x1024:1", "4096x8192:0", "64x64x8192:1", "1024x64x512:1",
                 "8192x4096:1", "2x8388608x4:1"]


def model_cases() -> list[str]:
    """(B, L, D) along L, and (B, D, L) along the last axis, for the shapes of models'
    sequences."""
    shapes = [(b, length, d) for b in (1, 8, 16) for length in (1024, 4096, 16384)
              for d in (768, 2048, 5120)]
    return [f"{b}x{length}x{d}:1" for b, length, d in shapes] + \
        [f"{b}x{d}x{length}:2" for b, length, d in shapes]


def parse_case(text: str) -> tuple[tuple[int, ...], int]:
    shape, _, axis = text.partition(":")
    return tuple(int(extent) for extent in shape.split("x")), int(axis or -1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_CASES, metavar="SHAPE:AXIS")
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--tiles", nargs="+", default=[], metavar="BLOCKxITEMS",
                        help="also time scangen with these tiles")
    parser.add_argument("--recurrence", action="store_true",
                        help="time linear_recurrence instead of a sum")
    parser.add_argument("--backward", action="store_true",
                        help="with --recurrence: also time its gradients, alone and forward "
                             "plus backward through scangen.torch (and torch.compile's)")
    parser.add_argument("--queued", action="store_true",
                        help="queue one untimed call before each timed batch, so the host's "
                             "work overlaps the kernels ahead (the GPU's time a call)")
    parser.add_argument("--model-shapes", action="store_true",
                        help="the shapes of models' sequences instead of --shapes")
    args = parser.parse_args(argv)
    if args.model_shapes:
        args.shapes = model_cases()

    import torch
    from scangen.compile import current_context, require_pycuda

    driver = require_pycuda()
    current_context()
    device = driver.Context.get_device().name()
    timer = Timer(driver, args.trials, args.warmup, queued=args.queued)
    if args.recurrence:
        return recurrence(args, torch, timer, device)
    scan = scangen.Scan("float32", "add")
    results = []
    print(f"float32 add along an axis ({device}); times in us\n")
    try:
        import cupy
    except ImportError:
        cupy = None
    print("| shape | axis | scangen kernel | copy | scangen | torch.cumsum | cupy.cumsum "
          "| scangen % of copy | torch / scangen | cupy / scangen |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for text in args.shapes:
        shape, axis = parse_case(text)
        x = torch.rand(shape, device="cuda", dtype=torch.float32) - 0.5
        out, copied = torch.empty_like(x), torch.empty_like(x)
        scan(x, out=out, axis=axis)
        torch.cuda.synchronize()
        error = (out.double() - torch.cumsum(x.double(), dim=axis)).abs().max().item()
        bound = 1e-5 * max(1.0, torch.cumsum(x.double().abs(), dim=axis).max().item())
        if error > bound:
            raise SystemExit(f"{text}: scangen differs from torch.cumsum by {error}")
        kernel = scan.plan(shape, axis=axis).launches[0].kernel.name
        calls = [("copy", lambda: copied.copy_(x)),
                 ("scangen", lambda: scan(x, out=out, axis=axis)),
                 ("torch.cumsum", lambda: torch.cumsum(x, dim=axis, out=out))]
        if cupy is not None:  # views of the same memory, on the same (legacy) stream
            cupy_x, cupy_out = cupy.asarray(x), cupy.asarray(out)
            calls.append(("cupy.cumsum", lambda: cupy.cumsum(cupy_x, axis=axis, out=cupy_out)))
        for tile in args.tiles:
            block, items = (int(part) for part in tile.split("x"))
            tiled = scangen.Scan("float32", "add", section_size=block * items,
                                 items_per_thread=items, tuning=whole_tile(items))
            calls.append((f"scangen {tile}",
                          lambda tiled=tiled: tiled(x, out=out, axis=axis)))
        times = time_calls(timer, text, calls, 2 * x.numel() * x.element_size(), results,
                           may_fail=("cupy.cumsum",), shape=list(shape), axis=axis,
                           kernel=kernel, device=device)
        ours = times["scangen"]
        cupy_time = times.get("cupy.cumsum")
        print(f"| {'x'.join(map(str, shape))} | {axis} | {kernel} | "
              f"{times['copy'] * 1e6:.1f} | {ours * 1e6:.1f} | "
              f"{times['torch.cumsum'] * 1e6:.1f} | "
              f"{'' if cupy_time is None else f'{cupy_time * 1e6:.1f}'} | "
              f"{100 * times['copy'] / ours:.0f}% | {times['torch.cumsum'] / ours:.2f}x | "
              f"{'' if cupy_time is None else f'{cupy_time / ours:.2f}x'} |")
        for tile in args.tiles:
            seconds = times[f"scangen {tile}"]
            print(f"|  |  | tile {tile} |  | {seconds * 1e6:.1f} |  |  | "
                  f"{100 * times['copy'] / seconds:.0f}% |  |  |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def whole_tile(items: int):
    """A Tuning whose column tiles take every one of a tile's ``items`` rows a thread (the
    tile swept, not the table's limit on it)."""
    return scangen.Tuning(columns_max_items_per_thread=items)


def time_calls(timer, text, calls, n_bytes, results, may_fail=(), **record) -> dict:
    """{contender: seconds per call} of ``calls`` ((name, call) pairs), each also appended to
    ``results`` with ``record``'s fields. A contender in ``may_fail`` (a peer this machine
    may not build) that raises is reported and left out."""
    times = {}
    for name, call in calls:
        print(f"{text} {name} ...", file=sys.stderr, flush=True)
        try:
            times[name] = timer.seconds_per_call(call, n_bytes)
        except Exception as err:
            if name not in may_fail:
                raise
            print(f"  {name} failed: {err}", file=sys.stderr)
            continue
        results.append(dict(record, contender=name, seconds=times[name]))
    return times


def recurrence(args, torch, timer, device) -> int:
    """The --recurrence table: h[t] = a[t] h[t-1] + b[t] along each case's axis."""
    results, backward_rows = [], []
    print(f"float32 linear recurrence along an axis ({device}); times in us\n")
    print("| shape | axis | copy of 3 arrays' bytes | scangen | torch.compile associative_scan "
          "| scangen % of copy |")
    print("|---|---:|---:|---:|---:|---:|")
    for text in args.shapes:
        shape, axis = parse_case(text)
        a = torch.rand(shape, device="cuda") * 0.5 + 0.5
        b = torch.rand(shape, device="cuda") - 0.5
        h = torch.empty_like(a)
        moved = a.numel() * 3 // 2
        source, target = torch.empty(moved, device="cuda"), torch.empty(moved, device="cuda")
        calls = [("copy", lambda: target.copy_(source)),
                 ("scangen", lambda: scangen.linear_recurrence(a, b, axis=axis, out=h))]
        compiled = _compiled_recurrence(torch, axis)
        if compiled is not None:
            calls.append(("torch.compile", lambda: compiled(a, b)))
        for tile in args.tiles:
            block, items = (int(part) for part in tile.split("x"))
            calls.append((f"scangen {tile}", lambda block=block, items=items:
                          scangen.linear_recurrence(a, b, axis=axis, out=h,
                                                    section_size=block * items,
                                                    items_per_thread=items,
                                                    tuning=whole_tile(items))))
        if args.backward:
            calls += backward_calls(torch, a, b, h, axis, compiled)
        times = time_calls(timer, text, calls, 3 * a.numel() * 4, results,
                           may_fail={"torch.compile", "torch.compile forward + backward"},
                           shape=list(shape), axis=axis, work="linear_recurrence",
                           device=device)
        peer = f"{times['torch.compile'] * 1e6:.1f}" if "torch.compile" in times else "n/a"
        print(f"| {'x'.join(map(str, shape))} | {axis} | {times['copy'] * 1e6:.1f} | "
              f"{times['scangen'] * 1e6:.1f} | {peer} | "
              f"{100 * times['copy'] / times['scangen']:.0f}% |")
        for tile in args.tiles:
            seconds = times[f"scangen {tile}"]
            print(f"|  |  | tile {tile} | {seconds * 1e6:.1f} |  | "
                  f"{100 * times['copy'] / seconds:.0f}% |")
        if args.backward:
            backward_rows.append((text, times))
    if backward_rows:
        print_backward(backward_rows)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def backward_calls(torch, a, b, h, axis, compiled):
    """The --backward contenders: a copy of the five arrays' bytes the gradients move (a,
    h and grad_h read, grad_a and grad_b written), scangen.linear_recurrence_gradients
    alone, and forward plus backward (torch.autograd.grad of the loss's gradient at h)
    through scangen.torch and, where it compiles, torch.compile's associative_scan."""
    import scangen.torch as differentiable

    grad = torch.rand_like(a)
    grad_a, grad_b = torch.empty_like(a), torch.empty_like(a)
    moved = a.numel() * 5 // 2
    source, target = torch.empty(moved, device="cuda"), torch.empty(moved, device="cuda")
    a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
    calls = [("copy of 5 arrays", lambda: target.copy_(source)),
             ("scangen gradients", lambda: scangen.linear_recurrence_gradients(
                 a, h, grad, axis=axis, grad_a=grad_a, grad_b=grad_b)),
             ("scangen forward + backward", lambda: torch.autograd.grad(
                 differentiable.linear_recurrence(a_, b_, axis), (a_, b_), grad))]
    if compiled is not None:
        calls.append(("torch.compile forward + backward",
                      lambda: torch.autograd.grad(compiled(a_, b_), (a_, b_), grad)))
    return calls


def print_backward(rows):
    """The --backward table: the gradients alone against the copy of their bytes, and
    forward plus backward against the forward's floor (the copy of 3 arrays' bytes)."""
    print("\nits gradients; times in us\n")
    print("| shape | axis | copy of 5 arrays' bytes | scangen gradients | % of copy | "
          "scangen forward + backward | x the forward's copy | torch.compile forward + "
          "backward |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for text, times in rows:
        shape, axis = parse_case(text)
        both = times["scangen forward + backward"]
        peer = times.get("torch.compile forward + backward")
        copy, alone = times["copy of 5 arrays"], times["scangen gradients"]
        cells = ["x".join(map(str, shape)), axis, f"{copy * 1e6:.1f}", f"{alone * 1e6:.1f}",
                 f"{100 * copy / alone:.0f}%", f"{both * 1e6:.1f}",
                 f"{both / times['copy']:.2f}x", "n/a" if peer is None else f"{peer * 1e6:.1f}"]
        print("| " + " | ".join(map(str, cells)) + " |")


def _compiled_recurrence(torch, axis):
    """torch's associative_scan of (a, b) pairs under torch.compile, or None where this
    torch has none or cannot compile it (its first call compiles; an error is reported)."""
    try:
        from torch._higher_order_ops.associative_scan import associative_scan
    except ImportError:
        return None

    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def run(a, b):
        return associative_scan(combine, (a, b), dim=axis, combine_mode="pointwise")[1]
    # One specialisation per shape: under dynamic shapes torch 2.11 refused to lower it
    # ("lifted arguments") from the second shape on. Past Dynamo's recompile limit (8
    # specialisations of one function) the rest would run eagerly, uncompiled: raise it.
    dynamo = torch._dynamo.config
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo, limit):
            setattr(dynamo, limit, max(getattr(dynamo, limit), 1024))
    return torch.compile(run, dynamic=False)


if __name__ == "__main__":
    sys.exit(main())
