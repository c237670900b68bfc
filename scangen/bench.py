"""``python -m scangen bench``: scangen's strategies and algorithms next to their peers.

Every contender is timed the same way: CUDA events on the default stream around a batch of
back-to-back calls with preallocated outputs (so host-side launch cost counts, as it does
for a user), after a warm-up, median over several trials, on random non-zero input.
Throughput counts the 2n elements a scan must move (read once, write once); the
device-to-device copy of the same bytes is the roof. Struct scans (``--struct``) are timed
the same way, against a copy of the same bytes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .ops import Operator
from .reference import reference_scan
from .runtime.contexts import current_context
from .runtime.gpu import require_pycuda
from .scan import Scan
from .spec import ALGORITHMS, STRATEGIES
from .workloads import STRUCTS, operator_named, parse_size, parse_tile, random_input

DEFAULT_SIZES = [1 << k for k in range(10, 29, 2)]


@dataclass
class Result:
    contender: str
    dtype: str
    op: str
    n: int
    seconds: float
    gbps: float
    checked: bool


@dataclass(frozen=True)
class Workload:
    """One scan to time: its type (and how results name it), operator and input."""

    dtype: np.dtype
    label: str
    op_name: str
    operator: Operator
    make_input: Callable


def workloads(args) -> list[Workload]:
    """Every --dtypes x --ops pair, then every --struct."""
    for op_name in args.ops:
        if op_name == "affine_then" and any(np.dtype(d) != np.uint64 for d in args.dtypes):
            raise SystemExit("--ops affine_then scans uint64 (packed maps): give --dtypes uint64")
    found = [Workload(np.dtype(dtype), str(np.dtype(dtype)), op_name, operator_named(op_name),
                      lambda rng, n, dtype=dtype, op=op_name: random_input(rng, dtype, n, op))
             for dtype in args.dtypes for op_name in args.ops]
    for name in args.structs:
        case = STRUCTS[name]
        found.append(Workload(case.dtype, case.label, name, case.operator, case.make_input))
    return found


def check_result(got, want, dtype) -> None:
    """Integers exactly; floats (struct fields too) within a tolerance for order."""
    if dtype.fields is not None:
        for field in dtype.names:
            check_result(got[field], want[field], dtype.fields[field][0])
    elif dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6 * np.abs(want).max(initial=1))
    else:
        np.testing.assert_array_equal(got, want)


class Timer:
    """Events on the legacy default stream, where torch, cupy and pycuda all launch.

    By default a timed batch starts on an idle GPU, as a user's call does, so the host's work
    before a call's first kernel counts (at large n a batch is one call). ``queued``: one
    untimed call is queued first, so the timed ones wait behind it and their host work
    overlaps the kernels ahead: the GPU's time a call, wherever the host keeps up."""

    def __init__(self, driver, trials: int, warmup: int, queued: bool = False):
        self.driver, self.trials, self.warmup = driver, trials, warmup
        self.queued = queued

    def seconds_per_call(self, call, n_bytes: int) -> float:
        for _ in range(self.warmup):
            call()
        self.driver.Context.synchronize()
        # Batches long enough to dwarf event resolution, short enough for big n.
        batch = max(1, min(200, int(2e8 // max(n_bytes, 1))))
        start, stop = self.driver.Event(), self.driver.Event()
        times = []
        for _ in range(self.trials):
            if self.queued:
                call()
            start.record()
            for _ in range(batch):
                call()
            stop.record()
            stop.synchronize()
            times.append(stop.time_since(start) / 1e3 / batch)
        return statistics.median(times)


def contenders(args, dtype, op_name, op, driver):
    """(name, make(x_gpu, y_gpu, x_host) -> call, checker or None) for each contender."""
    out = []

    def copy(x, y, _):
        nbytes = x.nbytes
        return lambda: driver.memcpy_dtod_async(y.gpudata, x.gpudata, nbytes)
    out.append(("copy", copy, None))

    def scangen_contender(prepared=False, **kwargs):
        scan = Scan(dtype, op, **kwargs)

        def make(x, y, _):
            # prepared: the arrays checked and the plan bound once, each call a launch
            return scan.prepare(x, y) if prepared else lambda: scan(x, out=y)
        return make

    for strategy in args.strategies:
        out.append((f"scangen/{strategy}", scangen_contender(strategy=strategy), op))
        if args.prepared:
            out.append((f"scangen/{strategy}/prepared",
                        scangen_contender(prepared=True, strategy=strategy), op))
    for config in args.tiles:
        threads, items = parse_tile(config)
        out.append((f"scangen/decoupled_lookback/{threads}x{items}",
                    scangen_contender(strategy="decoupled_lookback", algorithm="warp_shuffle",
                                      section_size=threads * items, items_per_thread=items), op))
    for algorithm in args.algorithms:
        out.append((f"scangen/hierarchical/{algorithm}",
                    scangen_contender(strategy="hierarchical", algorithm=algorithm), op))

    if op_name == "add" and not args.no_peers:
        try:
            import torch

            def torch_cumsum(x, y, host):
                tx = torch.from_numpy(host).cuda()
                ty = torch.empty_like(tx)
                return lambda: torch.cumsum(tx, 0, out=ty)
            out.append(("torch.cumsum", torch_cumsum, None))
        except ImportError:
            pass
        try:
            import cupy

            def cupy_cumsum(x, y, host):
                cx = cupy.asarray(host)
                cy = cupy.empty_like(cx)
                return lambda: cupy.cumsum(cx, out=cy)
            out.append(("cupy.cumsum", cupy_cumsum, None))
        except ImportError:
            pass
        try:
            from pycuda.scan import InclusiveScanKernel

            kernel = InclusiveScanKernel(np.dtype(dtype), "a+b")

            def pycuda_scan(x, y, _):
                return lambda: kernel(x, y)
            out.append(("pycuda.InclusiveScanKernel", pycuda_scan, None))
        except ImportError:
            pass
    return out


#: The CUB peer programs (C++, built with the toolkit's nvcc), shipped with the package.
CUB_DIR = Path(__file__).resolve().parent / "cub"
#: CUB's DeviceScan as a peer.
CUB_SOURCE = CUB_DIR / "cub_scan.cu"
CUB_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
#: Operators scangen/cub/cub_scan.cu knows.
CUB_OPS = ("add", "last_nonzero", "affine_then")


@contextlib.contextmanager
def cub_program(source: Path, arch: str):
    """Build a CUB peer program (scangen/cub/cub_*.cu) once, with the nvcc on PATH, into a
    temporary directory; yield the binary's path, or None after a skip line without nvcc.
    Where SCANGEN_CCCL_INCLUDE names a directory (CCCL's headers, newer than the
    toolkit's: the cuda-cccl wheel's cuda/cccl/headers/include), it comes first on the
    include path."""
    nvcc = shutil.which("nvcc")
    if nvcc is None or not source.is_file():
        _progress(f"  cub: skipped (needs nvcc and {source})\n")
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / source.stem
        _progress(f"building {source.name} ...")
        include = os.environ.get("SCANGEN_CCCL_INCLUDE")
        built = subprocess.run([nvcc, "-O3", "-std=c++17", f"-arch={arch}", "-o", str(binary),
                                *(["-I", include] if include else []), str(source)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"nvcc failed on {source}:\n{built.stderr}")
        yield binary


def cub_rows(binary: Path, arguments, trials: int, queued: bool = False) -> list[dict]:
    """Run a built CUB peer with CUB_TRIALS (and CUB_QUEUED, Timer's ``queued``) set: one
    dict per JSON line it prints."""
    stdout = subprocess.run([str(binary), *map(str, arguments)], check=True,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "CUB_TRIALS": str(trials),
                                 "CUB_QUEUED": "1" if queued else "0"}).stdout
    return [json.loads(line) for line in stdout.splitlines()]


def cub_results(args, arch: str) -> list[Result]:
    """Build scangen/cub/cub_scan.cu (once per run) and time CUB the bench's way."""
    results = []
    with cub_program(CUB_SOURCE, arch) as binary:
        if binary is None:
            return []
        for dtype in args.dtypes:
            for op_name in args.ops:
                if dtype not in CUB_DTYPES or op_name not in CUB_OPS:
                    continue
                _progress(f"{dtype} {op_name} cub.DeviceScan ...")
                for r in cub_rows(binary, [dtype, op_name, *args.sizes], args.trials,
                                  args.queued):
                    n_bytes = 2 * r["n"] * np.dtype(dtype).itemsize
                    results.append(Result(r["contender"], dtype, op_name, r["n"],
                                          r["seconds"], n_bytes / r["seconds"] / 1e9, False))
    return results


def run(args) -> list[Result]:
    driver = require_pycuda()
    current_context()
    from pycuda import gpuarray

    rng = np.random.default_rng(2026)
    timer = Timer(driver, args.trials, args.warmup, args.queued)
    results = []
    for work in workloads(args):
        dtype, op_name = work.dtype, work.op_name
        entries = contenders(args, dtype, op_name, work.operator, driver)
        for n in args.sizes:
            host = work.make_input(rng, n)
            x = gpuarray.to_gpu(host)
            y = gpuarray.empty_like(x)
            n_bytes = 2 * x.nbytes
            for name, make, check_op in entries:
                _progress(f"{work.label} {op_name} n={n:>11,} {name} ...")
                try:
                    call = make(x, y, host)
                    seconds = timer.seconds_per_call(call, n_bytes)
                except Exception as err:  # a peer missing a feature: report, go on
                    _progress(f"  {name} failed: {err}\n")
                    continue
                checked = False
                if check_op is not None and n <= args.check_limit:
                    check_result(y.get(), reference_scan(host, check_op, "inclusive"), dtype)
                    checked = True
                results.append(Result(name, work.label, op_name, n, seconds,
                                      n_bytes / seconds / 1e9, checked))
            del x, y
    if args.cub:
        context = current_context()
        major, minor = context.get_device().compute_capability()
        results += cub_results(args, f"sm_{major}{minor}")
    _progress("done.\n")
    return results


def _progress(text: str) -> None:
    sys.stderr.write("\r" + text.ljust(78)[:78] if not text.endswith("\n") else "\r" + text)
    sys.stderr.flush()


def table(results: list[Result]) -> str:
    """One block per (dtype, op, n): time, GB/s, % of copy, ratio to each peer."""
    lines = []
    groups = {}
    for r in results:
        groups.setdefault((r.dtype, r.op, r.n), []).append(r)
    peers = ("torch.cumsum", "cupy.cumsum", "pycuda.InclusiveScanKernel", "cub.DeviceScan")
    header = (f"{'contender':34} {'time us':>10} {'GB/s':>8} {'% copy':>7} "
              + " ".join(f"{'x ' + p.split('.')[0]:>8}" for p in peers))
    for (dtype, op, n), group in groups.items():
        by_name = {r.contender: r for r in group}
        copy = by_name.get("copy")
        lines.append(f"\n{dtype} {op} n={n} (2^{n.bit_length() - 1})" if n & (n - 1) == 0
                     else f"\n{dtype} {op} n={n}")
        lines.append(header)
        for r in group:
            pct = f"{100 * copy.seconds / r.seconds:6.1f}%" if copy else "      -"
            ratios = []
            for p in peers:
                peer = by_name.get(p)
                ratios.append(f"{peer.seconds / r.seconds:8.2f}" if peer else f"{'-':>8}")
            lines.append(f"{r.contender:34} {r.seconds * 1e6:10.1f} {r.gbps:8.1f} {pct:>7} "
                         + " ".join(ratios))
    lines.append("\n'x peer' = peer time / this time (above 1: faster than the peer).")
    return "\n".join(lines)


def plot(results: list[Result], path: str, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    combos = sorted({(r.dtype, r.op) for r in results})
    fig, axes = plt.subplots(1, len(combos), figsize=(7 * len(combos), 5), squeeze=False)
    for ax, (dtype, op) in zip(axes[0], combos):
        names = list(dict.fromkeys(r.contender for r in results if (r.dtype, r.op) == (dtype, op)))
        for name in names:
            rs = [r for r in results if (r.dtype, r.op, r.contender) == (dtype, op, name)]
            style = "k--" if name == "copy" else ("-o" if name.startswith("scangen") else "-s")
            ax.plot([r.n for r in rs], [r.gbps for r in rs], style, label=name, markersize=3)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (elements)")
        ax.set_ylabel("GB/s (read + write)")
        ax.set_title(f"{dtype} {op}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


#: The sizes ``bench --primitives`` times unless told.
PRIMITIVE_SIZES = [1 << 20, 1 << 26]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--primitives", action="store_true",
                        help="time the primitives (select, partition, unique, run-length "
                             "encoding, radix sort, digit offsets, histogram, segmented scans) "
                             "against torch, CuPy and, with --cub, CUB, instead of the scans "
                             "(scangen/primitive_bench.py)")
    parser.add_argument("--axis", action="store_true",
                        help="time scans of N-D arrays along one axis (--shapes) against "
                             "torch.cumsum, cupy.cumsum and a copy, instead of the 1-D scans "
                             "(scangen/axis_bench.py; needs torch)")
    parser.add_argument("--shapes", nargs="+", metavar="SHAPE:AXIS",
                        help="with --axis: the cases, e.g. 8x4096x1024:1 4096x8192:0 "
                             "(default: a few of each kind)")
    parser.add_argument("--model-shapes", action="store_true",
                        help="with --axis: the shapes of models' sequences, (B, L, D) along L "
                             "and (B, D, L) along the last axis, B in 1, 8, 16, L in 1024, "
                             "4096, 16384, D in 768, 2048, 5120")
    parser.add_argument("--recurrence", action="store_true",
                        help="with --axis: time linear_recurrence(a, b, axis) instead of a sum, "
                             "against torch.compile's associative_scan")
    parser.add_argument("--backward", action="store_true",
                        help="with --axis --recurrence: also its gradients, alone and forward "
                             "plus backward through scangen.torch (and torch.compile's)")
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="with --primitives: only those whose name holds one of these words")
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=None,
                        help="element counts, e.g. 1048576 or 2^20 (default 2^10 .. 2^28; "
                             "with --primitives 2^20 2^26)")
    parser.add_argument("--dtypes", nargs="*", default=["float32"],
                        help="element types (default float32; none: only the --struct scans)")
    parser.add_argument("--ops", nargs="+", default=["add"],
                        help="operators: built-in names, last_nonzero, or affine_then (uint64 "
                             "packed maps x -> m x + c mod 2^32; give --dtypes uint64) "
                             "(default add; peers are timed for add only)")
    parser.add_argument("--struct", nargs="+", default=[], choices=list(STRUCTS),
                        dest="structs", metavar="NAME",
                        help="also time struct scans: affine-f64x2 (16-byte (m, c) float64 "
                             "affine maps composed in order, a non-commutative operator), "
                             "against a copy of the same bytes")
    parser.add_argument("--strategies", nargs="+", default=[s for s in STRATEGIES if s != "auto"],
                        choices=STRATEGIES, help="scangen strategies (default algorithm each)")
    parser.add_argument("--algorithms", nargs="*", default=[], choices=list(ALGORITHMS),
                        help="also time the hierarchical strategy with these block algorithms")
    parser.add_argument("--tiles", nargs="*", default=[], metavar="THREADSxITEMS",
                        help="also time decoupled look-back with these warp_shuffle tiles, "
                             "e.g. 256x16 128x32 (for tuning); with --axis, a scangen row per "
                             "tile along the axis")
    parser.add_argument("--prepared", action="store_true",
                        help="also time each strategy's prepared call (Scan.prepare: the "
                             "arrays checked and the plan bound once, each call a launch)")
    parser.add_argument("--no-peers", action="store_true",
                        help="skip torch, cupy and pycuda even if installed")
    parser.add_argument("--cub", action="store_true",
                        help="also time CUB's DeviceScan (scangen/cub/cub_scan.cu, built with "
                             "the nvcc on PATH; add, last_nonzero and affine_then), or with "
                             "--primitives its primitives (scangen/cub/cub_primitives.cu)")
    parser.add_argument("--trials", type=int, default=7, help="timed trials (median is kept)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    parser.add_argument("--queued", action="store_true",
                        help="queue an untimed call ahead of each timed batch (CUB's too), so "
                             "the host's work a call hides behind the kernels: the GPU's "
                             "time, where by default a batch starts on an idle GPU as a "
                             "user's call does")
    parser.add_argument("--check-limit", type=int, default=1 << 22,
                        help="check scangen's output against the reference up to this n")
    parser.add_argument("--json", default="bench.json", help="where to write all results")
    parser.add_argument("--plot", default="bench.png",
                        help="PNG of GB/s against n (needs matplotlib; none with --axis)")


def main(args) -> int:
    started = time.time()
    if args.sizes is None:
        args.sizes = DEFAULT_SIZES
    results = run(args)
    device = current_context().get_device().name()
    title = f"scangen bench on {device}, {time.strftime('%Y-%m-%d')}"
    print(title)
    print(table(results))
    with open(args.json, "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"),
                   "method": __doc__.strip(), "queued": args.queued,
                   "results": [asdict(r) for r in results]},
                  f, indent=1)
    print(f"\nwrote {args.json}", end="")
    if args.plot and plot(results, args.plot, title):
        print(f" and {args.plot}", end="")
    print(f" in {time.time() - started:.0f} s")
    return 0
