"""Tile-shape sweep for the counting scans: Unique and RunLengthEncode, or Select(flags)
(run on the GPU host; results to stdout).

    python benchmarks/tune_counting.py [--sizes 2^24 2^26 2^28] [--shapes 128x16@1536 ...]
    python benchmarks/tune_counting.py --select [--sizes ...] [--shapes ...]
    python benchmarks/tune_counting.py --predicate --queued [--sizes 2^24 2^25 2^26 2^28]

Each shape is THREADSxITEMS@T: counting tiles of THREADS threads x ITEMS elements, compiled
under a register bound that keeps T threads per multiprocessor, in one pass at every size
(what scangen.tuning.COUNTING_VALUES and COUNTING_VALUES_TUNING choose). Input: int32 runs
of 4; each Unique is checked against numpy once per size, then both primitives are timed
with scangen.bench.Timer (CUDA events, median of the trials) beside a copy of 5n bytes.
``--select`` times Select(flags) of float32, half kept, its count read on the host (as the
primitives bench does), in one pass and as reduce_then_scan on each shape (the latter for
each of ``--mask-sections``: Tuning.mask_sections_per_block, the sections a block of its
first pass counts), beside a copy of the bytes it moves (5n + 4 x kept). ``--predicate``
times the counting scans of a condition on the values, Select(float32, "x < 0.5f") and
Partition(float32, "x < 0.5f", reverse_rejected=True), their counts left on the device, in
one pass and as reduce_then_scan on each shape, beside a copy of 12n bytes (a partition's
read and write). ``--queued`` times the GPU's time a call (scangen.bench.Timer) instead
of single calls from an idle GPU.
Used to choose the values in scangen/tuning.py (COUNTING, COUNTING_CONDITION,
COUNTING_VALUES and their tunings).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scangen  # noqa: E402
from scangen import bench, compile as scan_compile  # noqa: E402

DEFAULT_SHAPES = ("128x16@1536", "128x16@1024", "128x32@1024", "256x16@1536", "256x16@1024",
                  "256x8@1536", "64x32@1024")


def _shape(text):
    """THREADSxITEMS@T -> (threads, items, threads per multiprocessor)."""
    tile, per_sm = text.split("@")
    threads, items = (int(v) for v in tile.lower().split("x"))
    return threads, items, int(per_sm)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=bench.parse_size,
                        default=[1 << 24, 1 << 26, 1 << 28])
    parser.add_argument("--shapes", nargs="+", type=_shape,
                        default=[_shape(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--select", action="store_true",
                        help="Select(flags) in one pass and as reduce_then_scan")
    parser.add_argument("--mask-sections", nargs="+", type=int, default=[4],
                        help="--select: Tuning.mask_sections_per_block values for "
                             "reduce_then_scan (default: 4)")
    parser.add_argument("--predicate", action="store_true",
                        help="Select and Partition(reverse_rejected) by a predicate, in one "
                             "pass and as reduce_then_scan")
    parser.add_argument("--queued", action="store_true",
                        help="time the GPU's time a call instead of single calls")
    args = parser.parse_args(argv)
    if args.select and args.predicate:
        parser.error("--select and --predicate: one sweep at a time")

    driver = scan_compile.require_pycuda()
    scan_compile.current_context()
    if args.select:
        return _sweep_select(driver, args)
    if args.predicate:
        return _sweep_predicate(driver, args)
    from pycuda import gpuarray

    objects = {}
    for threads, items, per_sm in args.shapes:
        options = dict(section_size=threads * items, items_per_thread=items,
                       tuning=scangen.Tuning(tile_min_threads_per_sm=per_sm,
                                             auto_reduce_then_scan_min_bytes=1 << 62))
        objects[threads, items, per_sm] = (scangen.Unique(np.int32, **options),
                                           scangen.RunLengthEncode(np.int32, **options))
    scan_compile.precompile([p.kernel.scan_module for pair in objects.values() for p in pair],
                            workers=16)
    timer = bench.Timer(driver, args.trials, 3, queued=args.queued)
    rng = np.random.default_rng(2026)
    for n in args.sizes:
        host = np.repeat(rng.integers(0, 1000, n // 4 + 1), 4)[:n].astype(np.int32)
        x, out = gpuarray.to_gpu(host), gpuarray.empty(n, np.int32)
        want = host[np.concatenate(([True], host[1:] != host[:-1]))]
        copy = _copy_seconds(timer, driver, gpuarray, 5 * n)
        print(f"\nn = {n:,}: copy of 5n bytes {copy * 1e6:.1f} us", flush=True)
        for (threads, items, per_sm), (unique, rle) in objects.items():
            got = unique(x, out=out).get()
            if not np.array_equal(got, want):
                sys.exit(f"{threads}x{items}@{per_sm}: Unique differs from numpy")
            unique_s = timer.seconds_per_call(lambda: unique(x, out=out), 5 * n)
            rle_s = timer.seconds_per_call(lambda: rle(x), 7 * n)
            print(f"{threads}x{items}@{per_sm}: Unique {unique_s * 1e6:.1f} us, "
                  f"RunLengthEncode {rle_s * 1e6:.1f} us", flush=True)
    return 0


def _copy_seconds(timer, driver, gpuarray, moved):
    """A device-to-device copy that reads and writes ``moved`` bytes in all, timed."""
    source = gpuarray.empty(moved // 2, np.uint8)
    target = gpuarray.empty_like(source)
    return timer.seconds_per_call(
        lambda: driver.memcpy_dtod_async(target.gpudata, source.gpudata, source.nbytes), moved)


def _sweep_select(driver, args):
    """Select(flags) on each shape, in one pass and as reduce_then_scan."""
    from pycuda import gpuarray

    objects = {}
    for threads, items, per_sm in args.shapes:
        configs = [("decoupled_lookback", 1)] + [
            ("reduce_then_scan", k) for k in args.mask_sections]
        for strategy, per_block in configs:
            label = strategy if strategy != "reduce_then_scan" else \
                f"{strategy}, {per_block} mask section(s) a block"
            objects[threads, items, per_sm, label] = scangen.Select(
                np.float32, flags=np.bool_, section_size=threads * items,
                items_per_thread=items, strategy=strategy,
                tuning=scangen.Tuning(tile_min_threads_per_sm=per_sm,
                                      mask_sections_per_block=per_block))
    scan_compile.precompile([s.kernel.scan_module for s in objects.values()], workers=16)
    timer = bench.Timer(driver, args.trials, 3, queued=args.queued)
    rng = np.random.default_rng(2026)
    for n in args.sizes:
        host = rng.random(n, dtype=np.float32)
        mask = rng.random(n) < 0.5
        x, flags = gpuarray.to_gpu(host), gpuarray.to_gpu(mask)
        out = gpuarray.empty(n, np.float32)
        want = host[mask]
        moved = 5 * n + 4 * want.size
        copy = _copy_seconds(timer, driver, gpuarray, moved)
        print(f"\nn = {n:,}: copy of 5n + 4 x kept bytes {copy * 1e6:.1f} us", flush=True)
        for (threads, items, per_sm, strategy), select in objects.items():
            if not np.array_equal(select(x, flags, out=out).get(), want):
                sys.exit(f"{threads}x{items}@{per_sm} {strategy}: Select differs from numpy")
            seconds = timer.seconds_per_call(lambda: select(x, flags, out=out), moved)
            print(f"{threads}x{items}@{per_sm} {strategy}: {seconds * 1e6:.1f} us, "
                  f"{100 * copy / seconds:.1f}% of copy", flush=True)
    return 0


def _sweep_predicate(driver, args):
    """Select and Partition(reverse_rejected) by ``x < 0.5f`` on each shape, in one pass and
    as reduce_then_scan, their counts on the device."""
    from pycuda import gpuarray

    predicate = "x < 0.5f"
    objects = {}
    for threads, items, per_sm in args.shapes:
        for strategy in ("decoupled_lookback", "reduce_then_scan"):
            options = dict(section_size=threads * items, items_per_thread=items,
                           strategy=strategy,
                           tuning=scangen.Tuning(tile_min_threads_per_sm=per_sm))
            objects[threads, items, per_sm, strategy] = (
                scangen.Select(np.float32, predicate, **options),
                scangen.Partition(np.float32, predicate, reverse_rejected=True, **options))
    scan_compile.precompile([p.kernel.scan_module for pair in objects.values() for p in pair],
                            workers=16)
    timer = bench.Timer(driver, args.trials, 3, queued=args.queued)
    rng = np.random.default_rng(2026)
    for n in args.sizes:
        host = rng.random(n, dtype=np.float32)
        x = gpuarray.to_gpu(host)
        kept = host[host < 0.5]
        want = np.concatenate([kept, host[host >= 0.5][::-1]])
        copy = _copy_seconds(timer, driver, gpuarray, 12 * n)
        print(f"\nn = {n:,}: copy of 12n bytes {copy * 1e6:.1f} us", flush=True)
        for (threads, items, per_sm, strategy), (select, partition) in objects.items():
            selected, count = select(x, count_on_device=True)
            parted, _ = partition(x, count_on_device=True)
            if int(count.get()[0]) != kept.size or \
                    not np.array_equal(selected.get()[:kept.size], kept) or \
                    not np.array_equal(parted.get(), want):
                sys.exit(f"{threads}x{items}@{per_sm} {strategy}: differs from numpy")
            select_s = timer.seconds_per_call(lambda: select(x, count_on_device=True), 6 * n)
            partition_s = timer.seconds_per_call(lambda: partition(x, count_on_device=True),
                                                 8 * n)
            print(f"{threads}x{items}@{per_sm} {strategy}: Select {select_s * 1e6:.1f} us, "
                  f"Partition(reverse_rejected) {partition_s * 1e6:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
