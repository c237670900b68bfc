"""Time the current checkout against another one (a baseline commit checked out beside it),
in one run on one GPU, so a restructure can show it lost no speed.

    git worktree add .baseline <commit>      # here; name .baseline in the device call's carry
    python3 benchmarks/before_after.py --baseline .baseline --sizes 2^16 2^20 2^24 2^28

Each side runs ``python -m scangen bench`` in its own process (the baseline's package first
on PYTHONPATH), the two alternating ``--rounds`` times so drift of the card hits both; the
table gives each side's median time, its share of the copy measured in the same process,
and new/baseline (below 1: the current checkout is faster).
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
    args, bench_args = parser.parse_known_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
