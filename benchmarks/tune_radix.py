"""Tile-shape sweep for the onesweep radix passes (run on the GPU host; results to stdout).

    python benchmarks/tune_radix.py [--sizes 2^26] [--shapes 256x16@1024 256x24@768 ...]

Each shape is THREADSxITEMS@T[/W]: blocks of THREADS threads ranking up to ITEMS keys each,
compiled under a register bound that keeps T threads per multiprocessor, each digit's
look-back reading W predecessors a poll (block_size, max_items,
min_threads_per_sm and lookback_tiles of RadixPassesModule and DigitPlacesModule; defaults in scangen/tuning.py RADIX: onesweep_*, and
digit_places_* for the digit offsets). For each it sorts uint32 keys (checked against numpy
once) and runs radix_digit_offsets over 8 bits on the same tile (which has no look-back),
timed with scangen.bench.Timer (CUDA events, median of the trials) beside cupy.sort in the
same process.
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


def _shape(text):
    """THREADSxITEMS@T[/W] -> (threads, items, threads per multiprocessor, look-back
    tiles)."""
    tile, rest = text.split("@")
    per_sm, _, width = rest.partition("/")
    threads, items = (int(v) for v in tile.lower().split("x"))
    return threads, items, int(per_sm), int(width or radix.ONESWEEP_LOOKBACK_TILES)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=bench.parse_size, default=[1 << 26])
    parser.add_argument("--shapes", nargs="+", type=_shape,
                        default=[_shape(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--trials", type=int, default=9)
    args = parser.parse_args(argv)
    driver = scan_compile.require_pycuda()
    scan_compile.current_context()
    from pycuda import gpuarray
    import cupy

    timer = bench.Timer(driver, trials=args.trials, warmup=2)
    rng = np.random.default_rng(3)
    for n in args.sizes:
        keys = rng.integers(0, 1 << 32, n, dtype=np.uint32)
        on_device, for_cupy = gpuarray.to_gpu(keys), cupy.asarray(keys)
        peer = timer.seconds_per_call(lambda: cupy.sort(for_cupy), 8 * n)
        print(f"2^{n.bit_length() - 1}: cupy.sort {peer * 1e6:.0f} us", flush=True)
        for threads, items, per_sm, width in args.shapes:
            tile = dict(block_size=threads, max_items=items, min_threads_per_sm=per_sm)
            sort = scangen.RadixSort(np.uint32)
            sort.module = radix.RadixPassesModule(np.dtype(np.uint32), lookback_tiles=width,
                                                  **tile)
            offsets = scangen.RadixDigitOffsets(np.uint32)
            offsets.modules = (radix.DigitPlacesModule(np.dtype(np.uint32), **tile),)
            correct = np.array_equal(sort(on_device).get(), np.sort(keys))
            sorted_in = timer.seconds_per_call(lambda: sort(on_device), 8 * n)
            placed_in = timer.seconds_per_call(lambda: offsets(on_device, 8), 12 * n)
            print(f"2^{n.bit_length() - 1} {threads}x{items} at {per_sm} threads/SM, "
                  f"look-back {width} a poll: sort "
                  f"{sorted_in * 1e6:.0f} us ({peer / sorted_in:.2f}x cupy.sort, "
                  f"{'correct' if correct else 'WRONG'}), radix_digit_offsets "
                  f"{placed_in * 1e6:.0f} us", flush=True)


if __name__ == "__main__":
    sys.exit(main())
