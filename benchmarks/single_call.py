"""A single call against back-to-back calls, for the primitives and a scan at one size (run on
the GPU host; results go to stdout).

The bench (``python -m scangen bench``) times large sizes one call per pair of events, as a
user's single call runs: the GPU then waits for everything the host does before the first
kernel starts. This script shows how much that is, call by call, on pycuda arrays: the median
of single calls between two events, the mean of 20 calls queued behind one another (the host
work hidden behind the kernels), and the host's own time a call in that loop.

    python benchmarks/single_call.py [--log2n 26]
"""
import argparse
import statistics
import sys
import time

import numpy as np


def cases(n, gpuarray):
    """(name, call) for each primitive the bench times at n, and a plain scan."""
    import scangen
    from scangen.primitives import Histogram, RunLengthEncode, Select, Unique

    rng = np.random.default_rng(0)
    x = gpuarray.to_gpu(rng.random(n, dtype=np.float32))
    runs = gpuarray.to_gpu(np.repeat(rng.integers(0, 1000, n // 4 + 1), 4)[:n].astype(np.int32))
    mask = gpuarray.to_gpu(rng.random(n) < 0.5)
    out, kept = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.int32)
    hist, select = Histogram(np.float32), Select(np.float32, flags=np.bool_)
    unique, rle = Unique(np.int32), RunLengthEncode(np.int32)
    scan = scangen.Scan(np.float32, "add")
    return [("histogram(x, 256 bins)", lambda: hist(x, 256, (0.0, 1.0))),
            ("select(x, mask), count on device",
             lambda: select(x, mask, out=out, count_on_device=True)),
            ("unique(runs), count on device",
             lambda: unique(runs, out=kept, count_on_device=True)),
            ("run_length_encode(runs), count on device", lambda: rle(runs, count_on_device=True)),
            ("Scan(float32, add)(x, out)", lambda: scan(x, out=out))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=26, help="n = 2^LOG2N (default 26)")
    args = parser.parse_args(argv)

    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv
    from pycuda import gpuarray

    start, stop = drv.Event(), drv.Event()
    print(f"# {drv.Device(0).name()}, n = 2^{args.log2n}: us a call")
    for name, call in cases(1 << args.log2n, gpuarray):
        for _ in range(3):
            call()
        drv.Context.synchronize()
        singles = []
        for _ in range(7):
            start.record()
            call()
            stop.record()
            stop.synchronize()
            singles.append(stop.time_since(start) * 1e3)
        call()  # the GPU busy while the timed calls queue behind it
        start.record()
        for _ in range(20):
            call()
        stop.record()
        stop.synchronize()
        queued = stop.time_since(start) * 1e3 / 20
        began = time.perf_counter()
        for _ in range(20):
            call()
        host = (time.perf_counter() - began) / 20 * 1e6
        drv.Context.synchronize()
        print(f"{name:42} single {statistics.median(singles):7.1f} | queued {queued:7.1f} | "
              f"host {host:6.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
