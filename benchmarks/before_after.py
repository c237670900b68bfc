"""Time the current checkout against another one (a baseline commit checked out beside it),
in one run on one GPU, so a restructure can show it lost no speed.

    git worktree add .baseline <commit>      # here; name .baseline in the device call's carry
    python3 benchmarks/before_after.py --baseline .baseline --sizes 2^16 2^20 2^24 2^28

Each side runs ``python -m scangen bench`` in its own process (the baseline's package first
on PYTHONPATH), the two alternating ``--rounds`` times so drift of the card hits both; the
table gives each side's median time, its share of the copy measured in the same process,
and new/baseline (below 1: the current checkout is faster).

Small scans are bound by the host, and two processes (or two starts of the machine) can
differ by 20% on the same code. ``--same-process`` instead imports the baseline package
under another name (``scangen_baseline``) beside the current one and times both in one
process, alternating batch by batch on the same arrays (each round starting with the next
side, so none always runs first):

    python3 benchmarks/before_after.py --baseline .baseline --same-process \
        --sizes 2^10 2^14 2^20 2^24 [--dtype float32] [--op add] [--strategy auto]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench(source: Path, bench_args, json_path: Path) -> dict:
    """{(contender, dtype, op, n): seconds} of one bench run of the package at ``source``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(source)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    subprocess.run([sys.executable, "-m", "scangen", "bench", *bench_args, "--no-peers",
                    "--json", str(json_path), "--plot", ""], cwd=source, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    results = json.loads(json_path.read_text())["results"]
    return {(r["contender"], r["dtype"], r["op"], r["n"]): r["seconds"] for r in results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="a checkout of the baseline commit (git worktree add ...)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations (default 2)")
    parser.add_argument("--json", type=Path, help="also write the table's numbers here")
    parser.add_argument("--same-process", action="store_true",
                        help="time both packages in this process, batch by batch (below)")
    args, bench_args = parser.parse_known_args(argv)
    if args.same_process:
        return same_process(args.baseline.resolve(), args.rounds, args.json, bench_args)
    runs = {"baseline": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for side, source in (("baseline", args.baseline.resolve()), ("new", ROOT)):
                print(f"round {round_ + 1}: {side}", file=sys.stderr, flush=True)
                runs[side].append(bench(source, bench_args, Path(tmp) / f"{side}{round_}.json"))
    median = {side: {key: statistics.median(run[key] for run in results if key in run)
                     for key in results[0]} for side, results in runs.items()}
    rows = []
    print(f"{'contender':28} {'dtype':8} {'n':>11} {'base us':>9} {'new us':>9} "
          f"{'base %copy':>10} {'new %copy':>9} {'new/base':>8}")
    for key in sorted(k for k in median["new"] if k in median["baseline"] and k[0] != "copy"):
        contender, dtype, op, n = key
        copy_key = ("copy", dtype, op, n)
        base, new = median["baseline"][key], median["new"][key]
        base_copy, new_copy = median["baseline"][copy_key], median["new"][copy_key]
        rows.append(dict(contender=contender, dtype=dtype, op=op, n=n, baseline_s=base,
                         new_s=new, baseline_pct_copy=100 * base_copy / base,
                         new_pct_copy=100 * new_copy / new, ratio=new / base))
        print(f"{contender:28} {dtype:8} {n:>11} {base * 1e6:9.1f} {new * 1e6:9.1f} "
              f"{100 * base_copy / base:9.1f}% {100 * new_copy / new:8.1f}% {new / base:8.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def import_baseline(checkout: Path):
    """The baseline's scangen package, imported as ``scangen_baseline`` (its imports are
    relative, and it finds its templates beside the resolved package directory)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "scangen_baseline", checkout / "scangen" / "__init__.py",
        submodule_search_locations=[str(checkout / "scangen")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["scangen_baseline"] = module
    spec.loader.exec_module(module)
    return module


def same_process(checkout: Path, rounds: int, json_path, argv) -> int:
    import numpy as np

    import scangen
    from scangen.bench import Timer
    from scangen.workloads import parse_size
    from scangen.compile import current_context

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=[1 << 10, 1 << 20])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--op", default="add")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--trials", type=int, default=7)
    options = parser.parse_args(argv)
    current_context()  # both packages run in the primary context made current here
    import pycuda.driver as driver
    from pycuda import gpuarray

    baseline = import_baseline(checkout)
    timer = Timer(driver, trials=options.trials, warmup=20)
    dtype = np.dtype(options.dtype)
    sides = {"baseline": baseline.Scan(dtype, options.op, strategy=options.strategy),
             "new": scangen.Scan(dtype, options.op, strategy=options.strategy)}
    print(f"{options.dtype} {options.op} {options.strategy}, {rounds} rounds in one process "
          f"(median us per call; % of a copy timed in the same rounds)")
    print(f"{'n':>11} {'base us':>9} {'new us':>9} {'base %copy':>10} {'new %copy':>9} "
          f"{'new/base':>8}")
    rows = []
    for n in options.sizes:
        x = gpuarray.to_gpu(np.ones(n, dtype))
        y = gpuarray.empty_like(x)
        calls = {name: (lambda scan=scan: scan(x, out=y)) for name, scan in sides.items()}
        calls["copy"] = lambda: driver.memcpy_dtod_async(y.gpudata, x.gpudata, x.nbytes)
        times = {name: [] for name in calls}
        order = list(calls)
        for _ in range(max(rounds, 1)):
            # Each round starts with a different side, so no side always runs first.
            for name in order:
                times[name].append(timer.seconds_per_call(calls[name], 2 * x.nbytes))
            order = order[1:] + order[:1]
        median = {name: statistics.median(t) for name, t in times.items()}
        base, new, copy = median["baseline"], median["new"], median["copy"]
        rows.append(dict(n=n, baseline_s=base, new_s=new, copy_s=copy, ratio=new / base))
        print(f"{n:>11} {base * 1e6:9.2f} {new * 1e6:9.2f} {100 * copy / base:9.1f}% "
              f"{100 * copy / new:8.1f}% {new / base:8.3f}", flush=True)
    if json_path:
        json_path.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
