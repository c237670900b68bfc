"""Per-call cost of a small scan from Python: a reusable Scan, a prepared one
(Scan.prepare) and the one-shot inclusive_scan, at n = 1024 (default), on pycuda GPUArray,
CuPy and torch inputs, and the floor: an empty kernel launched by pycuda and by CuPy.

At this size the GPU work is a single launch of a few microseconds, so back-to-back calls
are bound by what the host does per call: the boundary (array kind, views, stream), the
output allocation and the launch itself. Each case runs ``--calls`` calls back to back on
the library's current stream, with a new output each call (as a user writes ``y = scan(x)``),
once more into a preallocated ``out=``, and as ``Scan.prepare(x, out)`` called again; the
device is synchronised at the end, and the wall time divided by the calls is printed in
microseconds. Warm-up calls come first (the
compile and the bound launchers are not measured). Libraries that are not installed are
skipped. ``--torch-functions`` times instead the calls of models' code on small (2, 64, 32)
torch tensors along dim 1: scangen.torch's functions (and their ``torch.ops.scangen``
operators called directly), forward and forward plus backward, scangen.linear_recurrence
and scangen.cumsum, beside torch.cumsum and an elementwise torch op. Run on the GPU host:

    python benchmarks/per_call_overhead.py [--n 1024] [--calls 20000] [--torch-functions]
"""
import argparse
import time

import numpy as np

import scangen
from scangen import compile as scan_compile


def kinds(n):
    """(name, x, make_out, synchronize) for each installed array library."""
    from pycuda import gpuarray
    import pycuda.driver as driver

    host = np.arange(n, dtype=np.float32)
    yield "GPUArray", gpuarray.to_gpu(host), lambda: gpuarray.empty(n, np.float32), \
        driver.Context.synchronize
    try:
        import cupy
    except ImportError:
        print("cupy not installed: skipped")
    else:
        yield "CuPy", cupy.asarray(host), lambda: cupy.empty(n, np.float32), \
            cupy.cuda.Device().synchronize
    try:
        import torch
    except ImportError:
        print("torch not installed: skipped")
    else:
        yield "torch", torch.from_numpy(host).cuda(), \
            lambda: torch.empty(n, dtype=torch.float32, device="cuda"), torch.cuda.synchronize


def empty_launches():
    """(name, launch, synchronize): an empty kernel's launch by pycuda's prepared call and
    by a CuPy RawKernel, the least a launch from Python costs on this host."""
    import pycuda.driver as driver
    from pycuda.compiler import SourceModule

    function = SourceModule('extern "C" __global__ void nothing() {}', no_extern_c=True
                            ).get_function("nothing")
    function.prepare("")
    yield "pycuda", lambda: function.prepared_async_call((1, 1), (32, 1, 1), None), \
        driver.Context.synchronize
    try:
        import cupy
    except ImportError:
        return
    kernel = cupy.RawKernel('extern "C" __global__ void nothing() {}', "nothing")
    yield "CuPy", lambda: kernel((1,), (32,), ()), cupy.cuda.Device().synchronize


def microseconds_per_call(call, calls, synchronize):
    for _ in range(100):
        call()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def torch_functions(calls):
    """The --torch-functions table: us per call of each, wall time over ``calls``."""
    import torch
    import scangen.torch as differentiable
    from scangen.torch import _ops

    shape = (2, 64, 32)
    a = torch.rand(shape, device="cuda") * 0.5 + 0.5
    b = torch.rand(shape, device="cuda") - 0.5
    h = torch.empty_like(a)
    grad_a, grad_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    ops = _ops()
    recurrence, cumsum = ops.linear_recurrence, ops.cumsum

    def backward(forward):
        return lambda: forward().sum().backward()
    rows = [
        ("torch: b + 1 (one elementwise kernel)", lambda: b + 1),
        ("torch.cumsum(b, 1)", lambda: torch.cumsum(b, 1)),
        ("scangen.cumsum(b, axis=1)", lambda: scangen.cumsum(b, axis=1)),
        ("scangen.linear_recurrence(a, b, 1, out=h)",
         lambda: scangen.linear_recurrence(a, b, axis=1, out=h)),
        ("scangen.linear_recurrence(a, b, 1)", lambda: scangen.linear_recurrence(a, b, axis=1)),
        ("scangen.torch.cumsum(b, 1)", lambda: differentiable.cumsum(b, 1)),
        ("torch.ops.scangen.cumsum(b, 1, False)", lambda: cumsum(b, 1, False)),
        ("scangen.torch.linear_recurrence(a, b, 1)",
         lambda: differentiable.linear_recurrence(a, b, 1)),
        ("torch.ops.scangen.linear_recurrence(a, b, 1, ...)",
         lambda: recurrence(a, b, 1, 0.0, 0.0, False)),
        ("forward + backward: torch.cumsum", backward(lambda: torch.cumsum(grad_b, 1))),
        ("forward + backward: scangen.torch.linear_recurrence",
         backward(lambda: differentiable.linear_recurrence(grad_a, grad_b, 1))),
        ("forward + backward: torch.ops.scangen.linear_recurrence",
         backward(lambda: recurrence(grad_a, grad_b, 1, 0.0, 0.0, False))),
    ]
    # The host's speed wanders: every row is timed in rounds taken in turn, and its best
    # round is kept, so rows compared were timed under the same conditions.
    rounds = 5
    best = {name: float("inf") for name, _ in rows}
    for _ in range(rounds):
        for name, call in rows:
            best[name] = min(best[name], microseconds_per_call(call, calls // rounds,
                                                               torch.cuda.synchronize))
    print(f"torch tensors of shape {shape} along dim 1, {rounds} rounds of {calls // rounds} "
          "calls each in turn, us per call (the best round)")
    for name, _ in rows:
        print(f"{name:58} {best[name]:8.1f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--torch-functions", action="store_true",
                        help="time scangen.torch's functions and the calls models make")
    args = parser.parse_args(argv)
    scan_compile.current_context()
    if args.torch_functions:
        return torch_functions(args.calls)
    scan = scangen.Scan(np.float32, "add")
    print(f"n = {args.n}, {args.calls} calls each, us per call (wall time / calls)")
    for name, launch, synchronize in empty_launches():
        print(f"an empty kernel launched by {name}: "
              f"{microseconds_per_call(launch, args.calls, synchronize):.1f}")
    print(f"{'input':10} {'Scan(x)':>10} {'Scan(x, out)':>13} {'prepared':>9} "
          f"{'inclusive_scan(x)':>18}")
    for name, x, make_out, synchronize in kinds(args.n):
        out = make_out()
        reusable = microseconds_per_call(lambda: scan(x), args.calls, synchronize)
        into = microseconds_per_call(lambda: scan(x, out), args.calls, synchronize)
        prepared = microseconds_per_call(scan.prepare(x, out), args.calls, synchronize)
        one_shot = microseconds_per_call(lambda: scangen.inclusive_scan(x), args.calls,
                                         synchronize)
        print(f"{name:10} {reusable:10.1f} {into:13.1f} {prepared:9.1f} {one_shot:18.1f}",
              flush=True)


if __name__ == "__main__":
    main()
