"""Warp runs against vector runs (Tuning.tile_vector_runs) for plain scans, beside a copy
(run on the GPU host; results go to stdout).

Times a plain Scan (add) whose single pass moves data warp by warp (tile_vector_runs=False)
and one whose lanes move their runs in 16-byte words (True), each against a device-to-device
copy of the bytes the scan reads and writes, in the same run. Each result is checked against
the expected sums on its first 2^20 elements. Used to choose tile_vector_runs in
scangen/tuning.py, e.g. ``python benchmarks/vector_runs.py --sizes 2^24 2^26``. At these
sizes a timed batch is one call started on an idle GPU, so the host's work before the kernel
counts; ``--queued`` times the GPU's work alone.
"""
import argparse
import sys

import numpy as np

#: (input dtype, result dtype or None): plain types, and narrow inputs widened as they load.
CASES = [("uint8", None), ("int16", None), ("float32", None), ("float64", None),
         ("uint8", "int32"), ("uint8", "uint64"), ("float16", "float32")]


def main(argv=None):
    from scangen.workloads import parse_size
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=[1 << 20, 1 << 24,
                                                                        1 << 26, 1 << 28],
                        help="element counts, e.g. 2^26 (default 2^20 2^24 2^26 2^28)")
    parser.add_argument("--exclusive-at", type=parse_size, default=1 << 26,
                        help="also time the exclusive scan at this size (default 2^26)")
    parser.add_argument("--trials", type=int, default=7, help="timed trials (median)")
    parser.add_argument("--queued", action="store_true",
                        help="an untimed call queued ahead of each timed batch: the GPU's "
                             "time, the host's work a call hidden (scangen.bench.Timer)")
    args = parser.parse_args(argv)

    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv
    from pycuda import gpuarray

    import scangen
    from scangen import bench

    timer = bench.Timer(drv, args.trials, 3, args.queued)
    variants = [("warp runs", scangen.Tuning(tile_vector_runs=False)),
                ("vector runs", scangen.Tuning(tile_vector_runs=True))]
    print(f"# {drv.Device(0).name()}: plain Scan (add), us and % of a copy of the same bytes"
          + (", each batch queued behind a call" if args.queued else ""))
    for n in args.sizes:
        for source, result in CASES:
            for mode in ("inclusive", "exclusive"):
                if mode == "exclusive" and n != args.exclusive_at:
                    continue
                x = gpuarray.to_gpu(np.ones(n, source))
                y = gpuarray.empty(n, result or source)
                moved = x.nbytes + y.nbytes
                # a copy of the scan's bytes: half of them read, half written
                src = gpuarray.empty(moved // 8, np.float32)
                dst = gpuarray.empty_like(src)
                copy = timer.seconds_per_call(
                    lambda: drv.memcpy_dtod_async(dst.gpudata, src.gpudata, src.nbytes), moved)
                cells = []
                for name, tuning in variants:
                    scan = scangen.Scan(source, "add", mode=mode, result_dtype=result,
                                        tuning=tuning)
                    scan(x, out=y)
                    m = min(n, 1 << 20)
                    want = (np.arange(1, m + 1, dtype=np.int64)
                            - (mode == "exclusive")).astype(result or source)
                    right = np.array_equal(y.get()[:m], want)
                    seconds = timer.seconds_per_call(lambda: scan(x, out=y), moved)
                    cells.append(f"{name} {seconds * 1e6:8.1f} us {copy / seconds:4.0%}"
                                 + ("" if right else " WRONG"))
                print(f"2^{n.bit_length() - 1} {source}->{result or source:8} {mode:9} "
                      f"copy {copy * 1e6:8.1f} us | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
