"""Tile-shape sweep for the onesweep radix passes (run on the GPU host; results to stdout).

    python benchmarks/tune_radix.py [--sizes 2^26] [--shapes 256x16@1024 256x24@768 ...]
                                    [--keys uint32] [--values uint32 | --argsort]

Each shape is THREADSxITEMS@T[/W][:static|:dynamic]: blocks of THREADS threads ranking up to
ITEMS keys each, compiled under a register bound that keeps T threads per multiprocessor,
each digit's look-back reading W predecessors a poll, the tile staged in the static 48 KiB
or in dynamic shared memory (block_size, max_items, min_threads_per_sm, lookback_tiles and
dynamic_staging of RadixPassesModule and DigitPlacesModule; defaults in scangen/tuning.py
RADIX: onesweep_*, and digit_places_* for the digit offsets; no suffix: the module's own
rule). For each it sorts random keys of ``--keys`` (with random values of ``--values``, or
as an argsort with ``--argsort``), checked against numpy's stable argsort once, and, for
keys alone, runs radix_digit_offsets over 8 bits on the same tile (which has no look-back),
timed with scangen.bench.Timer (CUDA events, median of the trials) beside cupy.sort of the
same keys in the same process.
Used to choose the values in scangen/tuning.py RADIX (docs/design/tuning.md).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scangen  # noqa: E402
from scangen import bench, compile as scan_compile  # noqa: E402
from scangen.primitives import radix  # noqa: E402

DEFAULT_SHAPES = ("256x16@1024", "256x24@768", "256x24@1024", "256x32@768", "384x16@1152",
                  "512x8@1024")
#: What a shape's suffix asks of RadixPassesModule.dynamic_staging (none: its own rule).
STAGING = {"": None, "static": False, "dynamic": True}


def _shape(text):
    """THREADSxITEMS@T[/W][:static|:dynamic] -> (threads, items, threads per
    multiprocessor, look-back tiles, dynamic staging or None)."""
    text, _, staging = text.partition(":")
    tile, rest = text.split("@")
    per_sm, _, width = rest.partition("/")
    threads, items = (int(v) for v in tile.lower().split("x"))
    if staging not in STAGING:
        raise argparse.ArgumentTypeError(f"a shape's staging is :static or :dynamic, not "
                                         f":{staging}")
    return (threads, items, int(per_sm), int(width or radix.ONESWEEP_LOOKBACK_TILES),
            STAGING[staging])


def _random(rng, dtype, n):
    """n random values of ``dtype``: every bit pattern of an integer, normal floats."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=bench.parse_size, default=[1 << 26])
    parser.add_argument("--shapes", nargs="+", type=_shape,
                        default=[_shape(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--keys", default="uint32", help="the key dtype (default uint32)")
    values = parser.add_mutually_exclusive_group()
    values.add_argument("--values", help="also carry random values of this dtype")
    values.add_argument("--argsort", action="store_true",
                        help="sort as argsort does: int64 indices made by the first pass")
    parser.add_argument("--trials", type=int, default=9)
    args = parser.parse_args(argv)
    key_dtype = np.dtype(args.keys)
    value_dtype = np.dtype(np.int64) if args.argsort else \
        (None if args.values is None else np.dtype(args.values))
    driver = scan_compile.require_pycuda()
    scan_compile.current_context()
    from pycuda import gpuarray
    import cupy

    timer = bench.Timer(driver, trials=args.trials, warmup=2)
    rng = np.random.default_rng(3)
    moved = key_dtype.itemsize + (0 if value_dtype is None else value_dtype.itemsize)
    what = f"{key_dtype} keys" + ("" if value_dtype is None else
                                  " (argsort)" if args.argsort else f", {value_dtype} values")
    for n in args.sizes:
        keys = _random(rng, key_dtype, n)
        values = None if args.values is None else _random(rng, value_dtype, n)
        order = np.argsort(keys, kind="stable")
        on_device, for_cupy = gpuarray.to_gpu(keys), cupy.asarray(keys)
        values_on_device = None if values is None else gpuarray.to_gpu(values)
        peer = timer.seconds_per_call(lambda: cupy.sort(for_cupy), 2 * n * key_dtype.itemsize)
        print(f"2^{n.bit_length() - 1} {what}: cupy.sort of the keys {peer * 1e6:.0f} us",
              flush=True)
        for threads, items, per_sm, width, dynamic in args.shapes:
            tile = dict(block_size=threads, max_items=items, min_threads_per_sm=per_sm)
            sort = scangen.RadixSort(key_dtype, value_dtype, _index_values=args.argsort)
            sort.module = radix.RadixPassesModule(
                key_dtype, value_dtype, index_values=args.argsort, lookback_tiles=width,
                dynamic_staging=dynamic, **tile)
            if value_dtype is None:
                call = lambda: sort(on_device)  # noqa: E731
                correct = np.array_equal(call().get(), keys[order])
            else:
                call = (lambda: sort(on_device, values_on_device)) if values is not None \
                    else (lambda: sort(on_device))
                got_keys, got_values = call()
                want = order if args.argsort else values[order]
                correct = np.array_equal(got_keys.get(), keys[order]) and \
                    np.array_equal(got_values.get(), want)
            sorted_in = timer.seconds_per_call(call, 2 * n * moved)
            staging = "dynamic" if sort.module.dynamic_staging else "static"
            line = (f"2^{n.bit_length() - 1} {threads}x{sort.module.items_per_thread} at "
                    f"{per_sm} threads/SM, look-back {width} a poll, {staging} staging: sort "
                    f"{sorted_in * 1e6:.0f} us ({peer / sorted_in:.2f}x cupy.sort of the keys, "
                    f"{'correct' if correct else 'WRONG'})")
            if value_dtype is None:
                offsets = scangen.RadixDigitOffsets(key_dtype)
                offsets.modules = (radix.DigitPlacesModule(key_dtype, **tile),)
                placed_in = timer.seconds_per_call(lambda: offsets(on_device, 8), 12 * n)
                line += f", radix_digit_offsets {placed_in * 1e6:.0f} us"
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
