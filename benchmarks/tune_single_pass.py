"""Tuning sweep for the single-pass kernel (run on the GPU host; results go to stdout).

Varies the register bound (blocks per SM) and the polling back-off, which are rendered into
the kernel, by building specs with a scangen.Tuning of other values, and times decoupled
look-back against a device-to-device copy of the same bytes in the same run. Used to choose
the values in scangen/tuning.py. ``--status-16`` sweeps the float64 tile status instead:
16-byte words (Tuning.status_16_byte_words) against the split layout, per register bound;
``--warp-runs`` sweeps Tuning.tile_warp_runs (tiles moved warp by warp) the same way, on
float32 and float64, for the tuned tile and 512 threads x 8 items.
"""
import argparse
import itertools
import sys

import numpy as np

import scangen
from scangen import bench, compile as scan_compile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=bench.parse_size, default=[1 << 24, 1 << 28],
                        help="element counts, e.g. 2^24 2^28 (default: %(default)s)")
    parser.add_argument("--status-16", action="store_true",
                        help="float64 only: the 16-byte status words on and off")
    parser.add_argument("--warp-runs", action="store_true",
                        help="tiles moved warp by warp, on and off")
    args = parser.parse_args(argv)
    sizes = args.sizes
    driver = scan_compile.require_pycuda()
    scan_compile.current_context()
    from pycuda import gpuarray

    timer = bench.Timer(driver, trials=5, warmup=2)
    rng = np.random.default_rng(1)
    dtypes = ("float64",) if args.status_16 else ("float32", "float64")
    # Tuning fields, and the tile shape (None: the tuned one)
    if args.status_16:
        configs = [(dict(tile_min_threads_per_sm=threads, status_16_byte_words=wide), None)
                   for threads, wide in itertools.product((256, 1536), (False, True))]
    elif args.warp_runs:
        configs = [(dict(tile_min_threads_per_sm=threads, tile_warp_runs=runs), shape)
                   for threads, runs, shape in itertools.product(
                       (1024, 1536), (False, True), (None, (4096, 8)))]
    else:
        configs = [(dict(tile_min_threads_per_sm=threads, backoff_min_ns=lo,
                         backoff_max_ns=hi), None)
                   for threads, (lo, hi) in itertools.product((256, 1536, 2048),
                                                              ((8, 256), (32, 1024)))]
    for dtype in dtypes:
        arrays = {n: gpuarray.to_gpu(rng.uniform(0.5, 1.5, n).astype(dtype)) for n in sizes}
        outs = {n: gpuarray.empty_like(a) for n, a in arrays.items()}
        for n in sizes:
            x, y = arrays[n], outs[n]
            copy = timer.seconds_per_call(
                lambda: driver.memcpy_dtod_async(y.gpudata, x.gpudata, x.nbytes), 2 * x.nbytes)
            print(f"{dtype} n=2^{n.bit_length() - 1} copy {copy * 1e6:.1f} us", flush=True)
        for fields, shape in configs:
            section, items = shape or (None, None)
            scan = scangen.Scan(dtype, "add", strategy="decoupled_lookback",
                                algorithm="warp_shuffle", section_size=section,
                                items_per_thread=items, tuning=scangen.Tuning(**fields))
            line = []
            for n in sizes:
                x, y = arrays[n], outs[n]
                t = timer.seconds_per_call(lambda: scan(x, out=y), 2 * x.nbytes)
                copy = timer.seconds_per_call(
                    lambda: driver.memcpy_dtod_async(y.gpudata, x.gpudata, x.nbytes),
                    2 * x.nbytes)
                line.append(f"2^{n.bit_length() - 1}: {t * 1e6:8.1f} us "
                            f"{100 * copy / t:5.1f}% of copy")
            spec = scan.spec
            knobs = " ".join(f"{k}={v}" for k, v in fields.items())
            print(f"{dtype} {spec.block_size}x{spec.items_per_thread} {knobs}  "
                  + "  ".join(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
