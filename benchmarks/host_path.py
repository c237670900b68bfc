"""The host's share of a small scan call, measured without a GPU: Scan(x), Scan(x, out=)
and a call of Scan.prepare(x, out) on CuPy-like arrays at n = 1024 (one section, one
launch), with the driver faked; with ``--primitives`` also a histogram, a select, a unique
and a run_length_encode at n = 2^26 (the count left on the device, outputs given), whose
host work a single call waits for before its first kernel starts.

Everything scangen does in Python per call runs as on a GPU host (the array boundary, the
stream, the launcher lookup, the packing of the arguments, the ctypes call of
cuLaunchKernel); only the driver's own work (the launch, an allocation) is replaced by a
function that returns at once, and CuPy by the fake module the CPU tests use. So the numbers
are what scangen adds to a call, on this host's CPU, and a change to the host path can be
weighed here before the GPU confirms it (benchmarks/per_call_overhead.py, on the GPU host,
times whole calls). ``--profile`` prints cProfile's busiest functions. ``--torch`` adds
scangen.torch's eager calls (cumsum and linear_recurrence, alone and with
torch.autograd.grad) on CPU tensors that pass for CUDA ones. ``--baseline DIR`` runs the
same in another checkout too (a git worktree of an earlier commit), the two alternating
``--rounds`` times, each line then led by its side.

    python benchmarks/host_path.py [--n 1024] [--calls 200000] [--profile] [--primitives]
                                   [--axis] [--torch] [--baseline DIR [--rounds 2]]
"""
import argparse
import contextlib
import cProfile
import importlib
import pathlib
import pstats
import sys
import time
import types

import numpy as np
import pytest

import sides

# this checkout, or the side's where --baseline started this process
sys.path.insert(0, str(sides.source_root()))

import scangen  # noqa: E402
from scangen.args import launch_format  # noqa: E402
from scangen import compile as compiler  # noqa: E402
from scangen.primitives import Histogram, RunLengthEncode, Select, Unique  # noqa: E402
from scangen.runtime import gpu, launcher, scratch, streams  # noqa: E402
from tests.support import FakeCupyArray, fake_cupy_module, simulate_device  # noqa: E402


class _Driver:
    """libcuda's calls a small call makes, each returning CUDA_SUCCESS at once."""

    @staticmethod
    def cuLaunchKernel(*args):
        return 0

    @staticmethod
    def cuMemsetD8Async(*args):
        return 0


def _fake_compiled(part):
    """What launch_function reads of a CompiledModule: each entry point's argument format
    and a CUfunction handle."""
    functions = {name: types.SimpleNamespace(arg_format=launch_format(parameters))
                 for name, parameters in part.entry_points()}
    raw = types.SimpleNamespace(function=lambda name: 0xF00)
    return types.SimpleNamespace(functions=functions, raw_functions=lambda: raw)


def fake_gpu(monkeypatch) -> None:
    simulate_device(monkeypatch)
    fake_cupy_module(monkeypatch)
    monkeypatch.setattr(launcher, "compile_module", _fake_compiled)
    monkeypatch.setattr(streams, "_library", _Driver())
    # a section's plan has no temporaries; a primitive's are allocated once
    monkeypatch.setattr(scratch, "require_pycuda",
                        lambda: types.SimpleNamespace(mem_alloc=lambda nbytes: 6 << 40))
    # the primitives' modules, their edges on the device, the device's size
    monkeypatch.setattr(compiler, "compile_module", _fake_compiled)
    # (the module: scangen.primitives.histogram is also the function's name)
    histogram = importlib.import_module("scangen.primitives.histogram")
    monkeypatch.setattr(histogram, "_gpuarray", lambda: types.SimpleNamespace(
        to_gpu=lambda a: types.SimpleNamespace(ptr=7 << 40, size=a.size)))
    monkeypatch.setattr(gpu, "multiprocessors", lambda: 132)


def primitive_cases() -> dict:
    """Calls of the primitives the bench times at 2^26, on fake CuPy arrays far apart."""
    n = 1 << 26
    x, mask = FakeCupyArray(n, np.float32), FakeCupyArray(n, np.bool_, ptr=1 << 40)
    out, runs = FakeCupyArray(n, np.float32, ptr=2 << 40), FakeCupyArray(n, np.int32, ptr=3 << 40)
    values = FakeCupyArray(n, np.int32, ptr=4 << 40)
    counts = FakeCupyArray(n, np.int64, ptr=5 << 40)
    hist, select = Histogram(np.float32), Select(np.float32, flags=np.bool_)
    unique, rle = Unique(np.int32), RunLengthEncode(np.int32)
    return {"histogram(x, 256)": lambda: hist(x, 256, (0.0, 1.0)),
            "select(x, mask)": lambda: select(x, mask, out=out, count_on_device=True),
            "unique(runs)": lambda: unique(runs, out=values, count_on_device=True),
            "run_length_encode": lambda: rle(runs, values=values, counts=counts,
                                             count_on_device=True)}


def axis_cases() -> dict:
    """Calls along an axis of fake (2, 64, 32) float32 CuPy arrays: a Scan, the numpy-style
    cumsum, and the linear recurrence and its gradients, outputs given and new."""
    shape = (2, 64, 32)
    a, b, h, grad_h = (FakeCupyArray(shape, np.float32, ptr=k << 32) for k in range(1, 5))
    out, grad_a = FakeCupyArray(shape, np.float32, ptr=5 << 32), \
        FakeCupyArray(shape, np.float32, ptr=6 << 32)
    scan = scangen.Scan(np.float32, "add")
    return {"scan(x, out, axis=1)": lambda: scan(b, out=out, axis=1),
            "cumsum(x, axis=1)": lambda: scangen.cumsum(b, axis=1),
            "linear_recurrence(out=)": lambda: scangen.linear_recurrence(a, b, 1, out=out),
            "linear_recurrence()": lambda: scangen.linear_recurrence(a, b, 1),
            "its gradients()": lambda: scangen.linear_recurrence_gradients(
                a, h, grad_h, 1, h0=0.5),
            "its gradients(out=)": lambda: scangen.linear_recurrence_gradients(
                a, h, grad_h, 1, h0=0.5, grad_a=grad_a, grad_b=out)}


def torch_cases(monkeypatch) -> dict:
    """scangen.torch's eager calls on CPU tensors of (2, 64, 32) that pass for CUDA ones
    (on a stream of their own), each alone and with torch.autograd.grad."""
    import torch

    import scangen.torch as differentiable
    from scangen import interop

    monkeypatch.setattr(differentiable, "_on_gpu", lambda x, name: x)
    monkeypatch.setattr(differentiable, "_eager", lambda torch, args: True)
    # no context to make current
    monkeypatch.setattr(differentiable, "in_a_borrowed_thread", contextlib.nullcontext)
    monkeypatch.setattr(interop._Torch, "view", lambda self, value, name, stream:
                        interop.DeviceArray(value.data_ptr(), tuple(value.shape),
                                            interop._torch_dtype(value.dtype, name), value))
    monkeypatch.setattr(interop._Torch, "default_stream", lambda self, value: 0x7000)
    monkeypatch.setattr(interop, "_torch_current_stream", lambda device: 0x7000)
    shape = (2, 64, 32)
    a = (torch.rand(shape) * 0.5 + 0.5).requires_grad_()
    b = (torch.rand(shape) - 0.5).requires_grad_()
    grad = torch.rand(shape)
    return {"torch.cumsum(b, 1)": lambda: differentiable.cumsum(b, 1),
            "...and its gradient": lambda: torch.autograd.grad(
                differentiable.cumsum(b, 1), (b,), grad),
            "torch.linear_recurrence": lambda: differentiable.linear_recurrence(a, b, 1),
            "...and its gradients": lambda: torch.autograd.grad(
                differentiable.linear_recurrence(a, b, 1), (a, b), grad)}


def microseconds_per_call(call, calls: int) -> float:
    for _ in range(1000):
        call()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--axis", action="store_true",
                        help="also calls along an axis of (2, 64, 32) arrays: a Scan, cumsum, "
                             "linear_recurrence and its gradients")
    parser.add_argument("--primitives", action="store_true",
                        help="also the primitives at 2^26 (histogram, select, unique, rle)")
    parser.add_argument("--torch", action="store_true",
                        help="also scangen.torch's eager cumsum and linear_recurrence, alone "
                             "and with their gradients, on (2, 64, 32) tensors")
    parser.add_argument("--baseline", type=pathlib.Path,
                        help="a checkout of an earlier commit, timed the same way in turn")
    parser.add_argument("--rounds", type=int, default=2, help="alternations (default 2)")
    parser.add_argument("--side", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline is not None and not args.side:  # a side's process times itself
        given = list(sys.argv[1:] if argv is None else argv)
        sides.alternate(__file__, args.baseline, args.rounds,
                        lambda side: [*given, "--side", side])
        return
    side = f"{args.side} " if args.side else ""
    monkeypatch = pytest.MonkeyPatch()
    try:
        fake_gpu(monkeypatch)
        scan = scangen.Scan(np.float32, "add")
        x, out = FakeCupyArray(args.n, np.float32), FakeCupyArray(args.n, np.float32, ptr=0x8000)
        cases = {"scan(x)": lambda: scan(x), "scan(x, out=out)": lambda: scan(x, out=out),
                 "prepared()": scan.prepare(x, out)}
        for name, call in cases.items():
            print(f"{side}{name:20} {microseconds_per_call(call, args.calls):6.2f} us per "
                  f"call (n={args.n}, host work only)")
        if args.axis:
            for name, call in axis_cases().items():
                print(f"{side}{name:24} {microseconds_per_call(call, args.calls):6.2f} us per "
                      f"call (host work only)")
        if args.primitives:
            for name, call in primitive_cases().items():
                print(f"{side}{name:20} {microseconds_per_call(call, args.calls):6.2f} us per "
                      f"call (n=2^26, host work only)")
        if args.torch:
            for name, call in torch_cases(monkeypatch).items():
                print(f"{side}{name:24} {microseconds_per_call(call, args.calls):6.2f} us per "
                      f"call (host work only)")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(lambda: [scan(x, out=out) for _ in range(args.calls // 4)])
            pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    finally:
        monkeypatch.undo()


if __name__ == "__main__":
    main()
