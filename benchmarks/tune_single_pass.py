"""Tuning sweep for the single-pass kernel (run on the GPU host; results go to stdout).

Varies the register bound (blocks per SM) and the polling back-off, which are rendered into
the kernel, by building specs with a scangen.Tuning of other values, and times decoupled
look-back against a device-to-device copy of the same bytes in the same run. Used to choose
the values in scangen/tuning.py. ``--status-16`` sweeps the float64 tile status instead:
16-byte words (Tuning.status_16_byte_words) against the split layout, per register bound;
``--warp-runs`` sweeps Tuning.tile_warp_runs (tiles moved warp by warp) the same way, on
float32 and float64, for the tuned tile and 512 threads x 8 items; ``--first-wait`` sweeps
Tuning.lookback_first_wait_ns with the back-off (CUB's sm90 float32 scan: 1100 ns before the
first poll, 688 ns between polls); ``--widths 1 2 4`` sweeps Tuning.lookback_tiles_per_lane
(tiles each look-back lane reads per poll); ``--persistent`` times the classic single pass
against the persistent one (Tuning.tile_persistent_min_bytes: never, always). ``--shapes`` and
``--bounds`` replace the tiles and register bounds a sweep tries, e.g.
``--warp-runs --shapes 128x16 128x32 256x16 --bounds 512 1024 1536``.
"""
import argparse
import itertools
import sys

import numpy as np

import scangen
from scangen import bench, compile as scan_compile


#: Tuning.tile_persistent_min_bytes past any array: the classic single pass only.
NEVER = 1 << 62


def _persistent_too_large(dtype, section, items):
    """Whether two sections of this tile pass the shared memory (so it has no persistent
    kernel, and naming a threshold is refused)."""
    try:
        scangen.make_spec(dtype, "add", algorithm="warp_shuffle", section_size=section,
                          items_per_thread=items,
                          tuning=scangen.Tuning(tile_persistent_min_bytes=NEVER))
    except ValueError:
        return True
    return False


def _shape(text):
    """THREADSxITEMS -> (section size, items per thread)."""
    threads, items = (int(v) for v in text.lower().split("x"))
    return threads * items, items


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=bench.parse_size, default=[1 << 24, 1 << 28],
                        help="element counts, e.g. 2^24 2^28 (default: %(default)s)")
    parser.add_argument("--status-16", action="store_true",
                        help="float64 only: the 16-byte status words on and off")
    parser.add_argument("--warp-runs", action="store_true",
                        help="tiles moved warp by warp, on and off")
    parser.add_argument("--persistent", action="store_true",
                        help="the persistent single pass (Tuning.tile_persistent_min_bytes), "
                             "never and always")
    parser.add_argument("--first-wait", action="store_true",
                        help="Tuning.lookback_first_wait_ns 0 and 1100, and CUB's fixed "
                             "688 ns between polls")
    parser.add_argument("--waits", nargs="+", type=int, default=None,
                        help="--first-wait: these first waits (ns) with the default back-off "
                             "instead")
    parser.add_argument("--wait", type=int, default=None,
                        help="Tuning.lookback_first_wait_ns for every configuration swept "
                             "(other than --first-wait's)")
    parser.add_argument("--strategy", default="decoupled_lookback",
                        help="the strategy timed (default: %(default)s), e.g. "
                             "reduce_then_scan as the peer the auto strategy weighs")
    parser.add_argument("--widths", nargs="+", type=int, default=None,
                        help="Tuning.lookback_tiles_per_lane values to sweep")
    parser.add_argument("--shapes", nargs="+", type=_shape, default=None,
                        help="tiles as THREADSxITEMS, e.g. 128x32 256x16 (default: the tuned "
                             "one, and 512x8 with --warp-runs)")
    parser.add_argument("--dtypes", nargs="+", default=None,
                        help="element types (default: float64 for --status-16, else float32 "
                             "and float64)")
    parser.add_argument("--trials", type=int, default=5,
                        help="timed trials per measurement, the median kept (default: "
                             "%(default)s)")
    parser.add_argument("--bounds", nargs="+", type=int, default=None,
                        help="tile_min_threads_per_sm values (register bounds) to sweep "
                             "(--widths and --first-wait: the tuned ones by default)")
    args = parser.parse_args(argv)
    sizes = args.sizes
    driver = scan_compile.require_pycuda()
    scan_compile.current_context()
    from pycuda import gpuarray

    timer = bench.Timer(driver, trials=args.trials, warmup=2)
    rng = np.random.default_rng(1)
    dtypes = args.dtypes or (("float64",) if args.status_16 else ("float32", "float64"))
    # Tuning fields, and the tile shape (None: the tuned one)
    if args.status_16:
        knob, values, bounds, shapes = "status_16_byte_words", (False, True), (256, 1536), [None]
    elif args.warp_runs:
        knob, values, bounds, shapes = "tile_warp_runs", (False, True), (1024, 1536), \
            [None, (4096, 8)]
    elif args.first_wait:
        knob, values, bounds, shapes = "first_wait", ((0, 8, 256), (1100, 8, 256),
                                                      (1100, 688, 688)), (None,), [None]
        if args.waits:
            values = tuple((wait, 8, 256) for wait in args.waits)
    elif args.persistent:
        knob, values, bounds, shapes = "tile_persistent_min_bytes", (NEVER, 0), (None,), [None]
    elif args.widths:
        knob, values, bounds, shapes = "lookback_tiles_per_lane", args.widths, (None,), [None]
    else:
        knob, values, bounds, shapes = "backoff", ((8, 256), (32, 1024)), (256, 1536, 2048), \
            [None]
    bounds, shapes = args.bounds or bounds, args.shapes or shapes
    configs = []
    for threads, value, shape in itertools.product(bounds, values, shapes):
        fields = dict(tile_min_threads_per_sm=threads)
        if args.wait is not None:
            fields.update(lookback_first_wait_ns=args.wait)
        if knob == "backoff":
            fields.update(backoff_min_ns=value[0], backoff_max_ns=value[1])
        elif knob == "first_wait":
            fields.update(lookback_first_wait_ns=value[0], backoff_min_ns=value[1],
                          backoff_max_ns=value[2])
        else:
            fields[knob] = value
        configs.append((fields, shape))
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
            if fields.get("tile_persistent_min_bytes") == NEVER and \
                    _persistent_too_large(dtype, section, items):
                # the classic kernel only: a tile too large for two sections has no other
                fields = {**fields, "tile_persistent_min_bytes": None}
            try:
                scan = scangen.Scan(dtype, "add", strategy=args.strategy,
                                    algorithm="warp_shuffle", section_size=section,
                                    items_per_thread=items, tuning=scangen.Tuning(**fields))
            except ValueError as err:  # e.g. two sections past the shared memory
                print(f"{dtype} {fields} {shape}: skipped ({err})", flush=True)
                continue
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
            print(f"{dtype} {args.strategy} {spec.block_size}x{spec.items_per_thread} {knobs}  "
                  + "  ".join(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
