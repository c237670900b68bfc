"""Small scans of every strategy, to run under compute-sanitizer (see README, Development):

    compute-sanitizer --tool memcheck  --error-exitcode 1 python3 tests/gpu/sanitize_targets.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/gpu/sanitize_targets.py
    compute-sanitizer --tool synccheck --error-exitcode 1 python3 tests/gpu/sanitize_targets.py

Sizes are small (the sanitizers slow kernels down a hundredfold) but span several sections,
so every kernel of every strategy runs, tail sections included. Exits non-zero on a wrong
result too. Name parts to run only those (each compiles its own modules; "scans" compiles
120): ``python3 tests/gpu/sanitize_targets.py hooks radix``; the parts are scans, hooks
(hooks, segments and struct values), primitives (every compaction primitive, segments by
flags, offsets and keys, on their default tiles) and radix (radix passes and histograms).
"""
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support, run as a script

import numpy as np

import scangen
from scangen.spec import ALGORITHMS, MODES, STRATEGIES

PARTS = ("scans", "hooks", "primitives", "radix")


def main() -> int:
    from pycuda import gpuarray

    from scangen.compile import current_context

    parts = set(sys.argv[1:]) or set(PARTS)
    if parts - set(PARTS):
        raise SystemExit(f"unknown parts {sorted(parts - set(PARTS))}; the parts are {PARTS}")
    current_context()
    rng = np.random.default_rng(7)
    failures = 0
    cases = list(itertools.product(STRATEGIES, MODES, [("int32", "add"), ("float64", "max")]))
    cases += [("decoupled_lookback", "inclusive", ("uint8", "last_nonzero"))]
    for strategy, mode, (dtype, op_name) in cases if "scans" in parts else ():
        op = scangen.LAST_NONZERO if op_name == "last_nonzero" else op_name
        for algorithm in ALGORITHMS:
            scan = scangen.Scan(dtype, op, mode=mode, strategy=strategy, algorithm=algorithm,
                                section_size=64)
            for n in (1, 63, 64, 65, 64 * 5 + 7, 64 * 64 + 1):
                x = rng.integers(0, 5, n).astype(dtype)
                got = scan(gpuarray.to_gpu(x)).get()
                want = scangen.reference_scan(x, op, mode)
                if not np.array_equal(got, want):
                    failures += 1
                    print(f"MISMATCH {strategy} {algorithm} {mode} {dtype} {op_name} n={n}")
    if "hooks" in parts:
        failures += hooks_and_values(rng, gpuarray)
    if "primitives" in parts:
        failures += primitives(rng, gpuarray)
    if "radix" in parts:
        failures += sorting_and_histograms(rng, gpuarray)
    print(f"sanitize_targets ({', '.join(p for p in PARTS if p in parts)}): {failures} "
          "mismatches")
    return 1 if failures else 0


def hooks_and_values(rng, gpuarray) -> int:
    """Compaction, a reversed scan with an initial value, a segmented scan, a struct scan
    and a segmented struct scan whose initial value is passed by its bytes, on every
    strategy: the kernels ScanKernel's hooks and acc_t pairs produce."""
    from tests.support import AFFINE_PAIR, AFFINE_PAIRS, segmented_reference

    failures = 0
    for strategy in STRATEGIES:
        x = rng.random(64 * 9 + 5).astype(np.float32)
        kept = scangen.select(gpuarray.to_gpu(x), "x > 0.5f")
        failures += not np.array_equal(kept.get(), x[x > 0.5])
        ints = rng.integers(0, 5, 64 * 9 + 5).astype(np.int32)
        scan = scangen.Scan(np.int32, "add", reverse=True, initial=3, strategy=strategy,
                            section_size=64)
        want = (np.cumsum(ints[::-1]) + 3)[::-1]
        failures += not np.array_equal(scan(gpuarray.to_gpu(ints)).get(), want)
        heads = (rng.random(ints.size) < 0.1).astype(np.uint8)
        seg = scangen.SegmentedScan(np.int32, "add", strategy=strategy, section_size=64)
        got = seg(gpuarray.to_gpu(ints), flags=gpuarray.to_gpu(heads)).get()
        starts = sorted({0, *np.flatnonzero(heads).tolist()})
        want = np.concatenate([np.cumsum(ints[a:b]) for a, b in zip(starts, starts[1:] + [ints.size])])
        failures += not np.array_equal(got, want)
        maps = np.zeros(64 * 9 + 5, AFFINE_PAIR)
        maps["m"], maps["c"] = 1.0, rng.integers(0, 5, maps.size)
        got = scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS, strategy=strategy,
                           section_size=64)(gpuarray.to_gpu(maps)).get()
        failures += not np.array_equal(got["c"], np.cumsum(maps["c"]))
        start = np.array((1.0, 2.0), AFFINE_PAIR)[()]  # x -> x + 2 before each segment
        seg = scangen.SegmentedScan(AFFINE_PAIR, AFFINE_PAIRS, initial=start,
                                    strategy=strategy, section_size=64)
        got = seg(gpuarray.to_gpu(maps), flags=gpuarray.to_gpu(heads)).get()
        want = segmented_reference(maps, heads, AFFINE_PAIRS, "inclusive", initial=start)
        failures += not np.array_equal(got, want)
    return failures


def primitives(rng, gpuarray) -> int:
    """Select (by predicate and by mask), remove_if, Partition, Unique, RunLengthEncode and
    segmented scans by flags, offsets and keys, on their default tiles (the counting scans'
    ballots, warp runs and last counted offsets), at sizes of one section, several and a
    partial one."""
    failures = 0
    for n in (1000, 3 * 4096 + 7, 70001):
        x = rng.normal(size=n).astype(np.float32)
        x_gpu = gpuarray.to_gpu(x)
        failures += not np.array_equal(scangen.select(x_gpu, "x > 0.1f").get(), x[x > 0.1])
        failures += not np.array_equal(scangen.remove_if(x_gpu, "x > 0.1f").get(),
                                       x[~(x > 0.1)])
        mask = rng.random(n) < 0.5
        failures += not np.array_equal(
            scangen.select(x_gpu, flags=gpuarray.to_gpu(mask)).get(), x[mask])
        parted, count = scangen.partition(x_gpu, "x > 0.0f")
        failures += count != (x > 0).sum() or not np.array_equal(
            parted.get(), np.concatenate([x[x > 0], x[~(x > 0)]]))
        ints = rng.integers(0, 3, n).astype(np.int32)
        ints_gpu = gpuarray.to_gpu(ints)
        heads = np.flatnonzero(np.r_[True, ints[1:] != ints[:-1]])
        failures += not np.array_equal(scangen.unique(ints_gpu).get(), ints[heads])
        values, counts = scangen.run_length_encode(ints_gpu)
        failures += not np.array_equal(values.get(), ints[heads])
        failures += not np.array_equal(counts.get(), np.diff(np.r_[heads, n]))
        seg = scangen.SegmentedScan(np.int32, "add")
        want = np.concatenate([np.cumsum(ints[a:b]) for a, b in zip(heads, np.r_[heads[1:], n])])
        failures += not np.array_equal(seg(ints_gpu, keys=ints_gpu).get(), want)
        flags = np.zeros(n, np.uint8)
        flags[heads] = 1
        failures += not np.array_equal(seg(ints_gpu, flags=gpuarray.to_gpu(flags)).get(), want)
        offsets = np.r_[heads, n].astype(np.int64)
        failures += not np.array_equal(seg(ints_gpu, offsets=gpuarray.to_gpu(offsets)).get(),
                                       want)
    return failures


def sorting_and_histograms(rng, gpuarray) -> int:
    """The radix passes (ranking and staging in shared memory: what racecheck is for) on
    keys alone, keys with values, argsort's index values and digit offsets, over a few tiles
    and a partial one; histograms with bins in shared memory and past it."""
    failures = 0
    n = 3 * 4096 + 5
    keys = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
    floats = rng.normal(size=n).astype(np.float32)
    order = np.argsort(keys, kind="stable")
    failures += not np.array_equal(scangen.radix_sort(gpuarray.to_gpu(keys)).get(),
                                   keys[order])
    sorted_keys, ids = scangen.radix_sort(gpuarray.to_gpu(floats),
                                          gpuarray.to_gpu(np.arange(n, dtype=np.int32)))
    failures += not np.array_equal(ids.get(), np.argsort(floats, kind="stable"))
    failures += not np.array_equal(scangen.argsort(gpuarray.to_gpu(keys)).get(), order)
    dest, _ = scangen.radix_digit_offsets(gpuarray.to_gpu(keys), 24)
    want = np.empty(n, np.int64)
    want[np.argsort(keys >> np.uint32(24), kind="stable")] = np.arange(n)
    failures += not np.array_equal(dest.get(), want)
    # a digit wider than a pass: argsort passes, then the places kernels
    dest, digit_start = scangen.radix_digit_offsets(gpuarray.to_gpu(keys), 20, 12)
    digit = (keys >> np.uint32(20)).astype(np.int64)
    want[np.argsort(digit, kind="stable")] = np.arange(n)
    failures += not np.array_equal(dest.get(), want)
    counts = np.bincount(digit, minlength=1 << 12)
    failures += not np.array_equal(digit_start.get(),
                                   np.concatenate([[0], np.cumsum(counts)[:-1]]))
    for bins in (100, 10_000):  # in shared memory, and straight to the global counts
        counts, _ = scangen.histogram(gpuarray.to_gpu(floats), bins, (-2.0, 2.0))
        failures += not np.array_equal(counts.get(), np.histogram(floats, bins, (-2.0, 2.0))[0])
    return failures


if __name__ == "__main__":
    sys.exit(main())
