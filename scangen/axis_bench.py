"""``python -m scangen bench --axis``: scans of N-D arrays along one axis, timed next to
torch.cumsum along the same dimension, cupy.cumsum and a copy of the same bytes.

Each case is ``SHAPE:AXIS`` (``--shapes 8x4096x1024:1 4096x8192:0``; float32 add);
``--model-shapes`` takes the shapes of models' sequences instead: (B, L, D) along L and
(B, D, L) along the last axis, for B in 1, 8, 16, L in 1024, 4096, 16384 and D in 768,
2048, 5120. Every contender is timed as the scan bench times scans (scangen.bench.Timer:
CUDA events around back-to-back calls, warm-up first, median of the trials) on torch tensors
in and out, and cupy.cumsum on CuPy views of the same memory where CuPy is installed.
"copy" is one device-to-device copy of the array, the floor of any scan that reads it once
and writes it once. Along an axis other than the last, scangen takes its columns kernel
(``Scan.plan(shape, axis=)`` says so); along the last, its rows kernel. ``--tiles
THREADSxITEMS ...`` adds a scangen row per tile shape (a column tile is 32 columns by
THREADS / 32 x ITEMS rows, whatever the table's columns_max_items_per_thread): the sweep a
tuning choice comes from.

``--recurrence`` times ``scangen.linear_recurrence(a, b, axis)`` (float32 a, b, h) on the
same shapes instead, against a copy of the bytes it must move (two arrays read, one written)
and, where torch.compile works here, torch's associative_scan compiled with the same
combine; ``--backward`` adds its gradients (scangen.linear_recurrence_gradients, against a
copy of the five arrays they move) and forward plus backward through scangen.torch and
torch.compile. ``--queued`` queues a call ahead of each timed batch: the GPU's time,
without the host's work before a call's first kernel (at these sizes a batch is one call).

Every scangen result is checked first (the sum against torch.cumsum in float64, each step
of the recurrence against ``a[t] h[t-1] + b[t]`` in float64). Needs torch with CUDA.
"""
from __future__ import annotations

import json
import sys
import time

from . import torch as scangen_torch
from .bench import Timer
from .operands import linear_recurrence, linear_recurrence_gradients
from .runtime.contexts import current_context
from .runtime.gpu import require_pycuda
from .scan import Scan
from .tuning import Tuning
from .workloads import parse_tile

#: The cases timed unless told: the issue's (B, L, D) along L, wide and tall 2-D arrays,
#: short and long columns, long rows, and a few very long columns.
DEFAULT_SHAPES = ["8x4096x1024:1", "4096x8192:0", "64x64x8192:1", "1024x64x512:1",
                  "8192x4096:1", "2x8388608x4:1"]


def model_shapes() -> list[str]:
    """(B, L, D) along L, and (B, D, L) along the last axis, for the shapes of models'
    sequences."""
    shapes = [(b, length, d) for b in (1, 8, 16) for length in (1024, 4096, 16384)
              for d in (768, 2048, 5120)]
    return [f"{b}x{length}x{d}:1" for b, length, d in shapes] + \
        [f"{b}x{d}x{length}:2" for b, length, d in shapes]


def parse_shape(text: str) -> tuple[tuple[int, ...], int]:
    """``"8x4096x1024:1"`` -> ``((8, 4096, 1024), 1)``; no axis: the last (-1)."""
    shape, _, axis = text.partition(":")
    try:
        extents = tuple(int(extent) for extent in shape.split("x"))
        axis = int(axis) if axis else -1
    except ValueError:
        raise ValueError(f"a case is SHAPE:AXIS, such as 8x4096x1024:1, not {text!r}") \
            from None
    if not extents or min(extents) < 1 or not -len(extents) <= axis < len(extents):
        raise ValueError(f"{text!r}: every extent must be at least 1 and the axis one of "
                         f"the shape's")
    return extents, axis


def whole_tile(items: int):
    """A Tuning whose column tiles take every one of a tile's ``items`` rows a thread (the
    tile swept, not the table's limit on it)."""
    return Tuning(columns_max_items_per_thread=items)


def cases(args) -> list[str]:
    """The SHAPE:AXIS cases the arguments name, each checked."""
    texts = model_shapes() if args.model_shapes else (args.shapes or DEFAULT_SHAPES)
    for text in texts:
        parse_shape(text)
    return texts


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
        results.append(dict(record, contender=name, seconds=times[name], bytes=n_bytes))
    return times


def sums(args, torch, timer, device, results) -> list[str]:
    """The float32 add table; its rows are appended to ``results``."""
    try:
        import cupy
    except ImportError:
        cupy = None
    scan = Scan("float32", "add")
    lines = [f"float32 add along an axis ({device}); times in us", "",
             "| shape | axis | scangen kernel | copy | scangen | torch.cumsum | cupy.cumsum "
             "| scangen % of copy | torch / scangen | cupy / scangen |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for text in cases(args):
        shape, axis = parse_shape(text)
        x = torch.rand(shape, device="cuda", dtype=torch.float32) - 0.5
        out, copied = torch.empty_like(x), torch.empty_like(x)
        scan(x, out=out, axis=axis)
        torch.cuda.synchronize()
        error = (out.double() - torch.cumsum(x.double(), dim=axis)).abs().max().item()
        bound = 1e-5 * max(1.0, torch.cumsum(x.double().abs(), dim=axis).max().item())
        if error > bound:
            raise RuntimeError(f"{text}: scangen differs from torch.cumsum by {error}")
        kernel = scan.plan(shape, axis=axis).launches[0].kernel.name
        calls = [("copy", lambda: copied.copy_(x)),
                 ("scangen", lambda: scan(x, out=out, axis=axis)),
                 ("torch.cumsum", lambda: torch.cumsum(x, dim=axis, out=out))]
        if cupy is not None:  # views of the same memory, on the same (legacy) stream
            cupy_x, cupy_out = cupy.asarray(x), cupy.asarray(out)
            calls.append(("cupy.cumsum", lambda: cupy.cumsum(cupy_x, axis=axis, out=cupy_out)))
        for tile in args.tiles:
            threads, items = parse_tile(tile)
            tiled = Scan("float32", "add", section_size=threads * items,
                         items_per_thread=items, tuning=whole_tile(items))
            calls.append((f"scangen {tile}", lambda tiled=tiled: tiled(x, out=out, axis=axis)))
        times = time_calls(timer, text, calls, 2 * x.numel() * x.element_size(), results,
                           may_fail=("cupy.cumsum",), work="cumsum", shape=list(shape),
                           axis=axis, kernel=kernel)
        ours, cupy_time = times["scangen"], times.get("cupy.cumsum")
        lines.append(
            f"| {'x'.join(map(str, shape))} | {axis} | {kernel} | {times['copy'] * 1e6:.1f} | "
            f"{ours * 1e6:.1f} | {times['torch.cumsum'] * 1e6:.1f} | "
            f"{'' if cupy_time is None else f'{cupy_time * 1e6:.1f}'} | "
            f"{100 * times['copy'] / ours:.0f}% | {times['torch.cumsum'] / ours:.2f}x | "
            f"{'' if cupy_time is None else f'{cupy_time / ours:.2f}x'} |")
        for tile in args.tiles:
            seconds = times[f"scangen {tile}"]
            lines.append(f"|  |  | tile {tile} |  | {seconds * 1e6:.1f} |  |  | "
                         f"{100 * times['copy'] / seconds:.0f}% |  |  |")
    return lines


#: Elements a check reads at most: past this, whole lines of the first outer positions.
_CHECKED_ELEMENTS = 1 << 26


def _checked_lines(v, axis):
    """Whole lines of ``v`` along ``axis``, at most _CHECKED_ELEMENTS of them where the
    array is larger: the dimensions other than the axis cut to their first position, from
    the first dimension on, until the rest fits."""
    for dim in range(v.dim()):
        if v.numel() <= _CHECKED_ELEMENTS:
            break
        if dim != axis % v.dim():
            v = v.narrow(dim, 0, 1)
    return v


def _check_recurrence(torch, a, b, h, axis, text) -> None:
    """Each step of h against the recurrence in float64: h[t] - (a[t] h[t-1] + b[t]), h[-1]
    = 0, within float32 rounding of the terms (a step's error does not carry into the next
    check, so the bound needs no length)."""
    a64, b64, h64 = (_checked_lines(v, axis).double().movedim(axis, 0) for v in (a, b, h))
    before = torch.cat([torch.zeros_like(h64[:1]), h64[:-1]])
    step = a64 * before + b64
    error = ((h64 - step).abs() / (1 + (a64 * before).abs() + b64.abs())).max().item()
    if error > 1e-4:
        raise RuntimeError(f"{text}: scangen's linear recurrence misses a step by {error} "
                           f"(relative)")


def recurrences(args, torch, timer, device, results) -> list[str]:
    """The --recurrence table (and with --backward the gradients' table): h[t] = a[t]
    h[t-1] + b[t] along each case's axis; rows appended to ``results``."""
    lines = [f"float32 linear recurrence along an axis ({device}); times in us", "",
             "| shape | axis | copy of 3 arrays' bytes | scangen | torch.compile "
             "associative_scan | scangen % of copy |", "|---|---:|---:|---:|---:|---:|"]
    backward_rows = []
    for text in cases(args):
        shape, axis = parse_shape(text)
        a = torch.rand(shape, device="cuda") * 0.5 + 0.5
        b = torch.rand(shape, device="cuda") - 0.5
        h = torch.empty_like(a)
        linear_recurrence(a, b, axis=axis, out=h)
        torch.cuda.synchronize()
        _check_recurrence(torch, a, b, h, axis, text)
        moved = a.numel() * 3 // 2
        source, target = torch.empty(moved, device="cuda"), torch.empty(moved, device="cuda")
        calls = [("copy", lambda: target.copy_(source)),
                 ("scangen", lambda: linear_recurrence(a, b, axis=axis, out=h))]
        compiled = _compiled_recurrence(torch, axis)
        if compiled is not None:
            calls.append(("torch.compile", lambda: compiled(a, b)))
        for tile in args.tiles:
            threads, items = parse_tile(tile)
            calls.append((f"scangen {tile}", lambda threads=threads, items=items:
                          linear_recurrence(a, b, axis=axis, out=h,
                                            section_size=threads * items,
                                            items_per_thread=items,
                                            tuning=whole_tile(items))))
        if args.backward:
            calls += backward_calls(torch, a, b, h, axis, compiled)
        times = time_calls(timer, text, calls, 3 * a.numel() * 4, results,
                           may_fail={"torch.compile", "torch.compile forward + backward"},
                           work="linear_recurrence", shape=list(shape), axis=axis)
        peer = f"{times['torch.compile'] * 1e6:.1f}" if "torch.compile" in times else "n/a"
        lines.append(f"| {'x'.join(map(str, shape))} | {axis} | {times['copy'] * 1e6:.1f} | "
                     f"{times['scangen'] * 1e6:.1f} | {peer} | "
                     f"{100 * times['copy'] / times['scangen']:.0f}% |")
        for tile in args.tiles:
            seconds = times[f"scangen {tile}"]
            lines.append(f"|  |  | tile {tile} | {seconds * 1e6:.1f} |  | "
                         f"{100 * times['copy'] / seconds:.0f}% |")
        if args.backward:
            backward_rows.append((text, times))
    if backward_rows:
        lines += backward_table(backward_rows)
    return lines


def backward_calls(torch, a, b, h, axis, compiled):
    """The --backward contenders: a copy of the five arrays' bytes the gradients move (a,
    h and grad_h read, grad_a and grad_b written), scangen.linear_recurrence_gradients
    alone, and forward plus backward (torch.autograd.grad of the loss's gradient at h)
    through scangen.torch and, where it compiles, torch.compile's associative_scan."""
    grad = torch.rand_like(a)
    grad_a, grad_b = torch.empty_like(a), torch.empty_like(a)
    moved = a.numel() * 5 // 2
    source, target = torch.empty(moved, device="cuda"), torch.empty(moved, device="cuda")
    a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
    calls = [("copy of 5 arrays", lambda: target.copy_(source)),
             ("scangen gradients", lambda: linear_recurrence_gradients(
                 a, h, grad, axis=axis, grad_a=grad_a, grad_b=grad_b)),
             ("scangen forward + backward", lambda: torch.autograd.grad(
                 scangen_torch.linear_recurrence(a_, b_, axis), (a_, b_), grad))]
    if compiled is not None:
        calls.append(("torch.compile forward + backward",
                      lambda: torch.autograd.grad(compiled(a_, b_), (a_, b_), grad)))
    return calls


def backward_table(rows) -> list[str]:
    """The --backward table: the gradients alone against the copy of their bytes, and
    forward plus backward against the forward's floor (the copy of 3 arrays' bytes)."""
    lines = ["", "its gradients; times in us", "",
             "| shape | axis | copy of 5 arrays' bytes | scangen gradients | % of copy | "
             "scangen forward + backward | x the forward's copy | torch.compile forward + "
             "backward |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for text, times in rows:
        shape, axis = parse_shape(text)
        both = times["scangen forward + backward"]
        peer = times.get("torch.compile forward + backward")
        copy, alone = times["copy of 5 arrays"], times["scangen gradients"]
        cells = ["x".join(map(str, shape)), axis, f"{copy * 1e6:.1f}", f"{alone * 1e6:.1f}",
                 f"{100 * copy / alone:.0f}%", f"{both * 1e6:.1f}",
                 f"{both / times['copy']:.2f}x", "n/a" if peer is None else f"{peer * 1e6:.1f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def _compiled_recurrence(torch, axis):
    """torch's associative_scan of (a, b) pairs under torch.compile, or None where this
    torch has none (its first call compiles; an error there is reported by time_calls)."""
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


def check_arguments(args) -> None:
    """Refuse, before anything starts, a bad case or --backward without --recurrence
    (ValueError)."""
    cases(args)
    if args.backward and not args.recurrence:
        raise ValueError("--backward times the linear recurrence's gradients: give "
                         "--recurrence too")


def main(args) -> int:
    """Time the cases, print the table, write the JSON (``args.json``)."""
    check_arguments(args)
    try:
        import torch
    except ImportError:
        raise SystemExit("bench --axis times torch tensors: it needs torch with CUDA") \
            from None
    started = time.time()
    driver = require_pycuda()
    device = current_context().get_device().name()
    timer = Timer(driver, args.trials, args.warmup, args.queued)
    results = []
    table = (recurrences if args.recurrence else sums)(args, torch, timer, device, results)
    print("\n".join(table))
    with open(args.json, "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"),
                   "method": __doc__.strip(), "queued": args.queued,
                   "results": results}, f, indent=1)
    print(f"\nwrote {args.json} in {time.time() - started:.0f} s")
    return 0
