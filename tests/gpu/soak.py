"""Soak run: threads on their own streams and a Dask computation at once, calling every scan
family and primitive on random sizes for a while, every result checked on the host.

    python3 tests/gpu/soak.py --minutes 10 --threads 8

Prints calls made, elements scanned, device memory in use (cuMemGetInfo) and the bytes
scangen's output pools manage as it goes, and exits non-zero on a wrong result, an exception
in any thread, or device memory still growing after the warm-up (the first 40% of the run,
which compiles every kernel and lets pools and scratch reach their sizes). Sizes come from a
fixed menu (SIZES): a pool keeps a block for each size class it has served, so sizes drawn
afresh every call would keep touching new classes and look like a leak; with a menu, every
class is served during the warm-up and a leak is growth after it. Run it with stderr kept: a
clean run also ends without a warning (a leaked or out-of-thread device allocation, a
context error at exit).
"""
import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support, run as a script

import numpy as np

import scangen

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, exact_affine_pairs, operator,
                           random_input, scan_reference, segmented_reference)

#: The sizes calls draw from: 48 log-uniform from 1 to 2^22 (odd sizes, tails of every
#: kind), the same every run.
SIZES = np.unique(np.maximum(1, (2 ** np.random.default_rng(2026).uniform(0, 22, 48))
                             .astype(np.int64)))
#: Device memory may still grow this much after the warm-up (allocator granularity).
SLACK = 64 << 20


def _size(rng):
    return int(rng.choice(SIZES))


def _pooled_bytes() -> int:
    """Bytes scangen's output pools hold or have handed out."""
    from scangen.runtime import pool

    return sum(getattr(p, "managed_bytes", 0) for p in list(pool._pools.values()))


def _one_call(gpuarray, rng, stream):
    """One random call on ``stream``, checked; returns the elements it read."""
    what = rng.integers(9)
    n = _size(rng)

    def up(host):
        return gpuarray.to_gpu_async(np.ascontiguousarray(host), stream=stream)

    def down(device):
        host = device.get_async(stream=stream)
        stream.synchronize()
        return host

    if what <= 2:  # scans: a built-in, a non-commutative one, a struct
        dtype, op_name = [("int32", "add"), ("uint8", "last_nonzero"), (None, None)][what]
        if dtype is None:
            x, op, mode = exact_affine_pairs(rng, n), AFFINE_PAIRS, "inclusive"
        else:
            x, op = random_input(rng, dtype, op_name, n), operator(op_name)
            mode = "exclusive" if rng.random() < 0.5 else "inclusive"
        scan = _cached(("scan", x.dtype, op.name, mode),
                       lambda: scangen.Scan(x.dtype, op, mode=mode))
        got = down(scan(up(x), stream=stream))
        assert np.array_equal(got, scan_reference(x, op, mode)), f"scan {op.name} n={n}"
    elif what == 3:
        x = rng.integers(-9, 9, n).astype(np.int64)
        heads = (rng.random(n) < 0.01).astype(np.uint8)
        seg = _cached("segmented", lambda: scangen.SegmentedScan(np.int64, "add"))
        got = down(seg(up(x), flags=up(heads), stream=stream))
        assert np.array_equal(got, segmented_reference(x, heads, operator("add"), "inclusive"))
    elif what == 4:
        x = rng.normal(size=n).astype(np.float32)
        sel = _cached("select", lambda: scangen.Select(np.float32, "x > 0.5f"))
        assert np.array_equal(down(sel(up(x), stream=stream)), x[x > 0.5]), f"select n={n}"
    elif what == 5:
        x = rng.integers(0, 3, n).astype(np.int32)
        uniq = _cached("unique", lambda: scangen.Unique(np.int32))
        want = x[np.r_[True, x[1:] != x[:-1]]]
        assert np.array_equal(down(uniq(up(x), stream=stream)), want), f"unique n={n}"
    elif what == 6:
        x = rng.integers(0, 3, n).astype(np.int32)
        rle = _cached("rle", lambda: scangen.RunLengthEncode(np.int32))
        values, counts = rle(up(x), stream=stream)
        heads = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])
        assert np.array_equal(down(values), x[heads]), f"rle n={n}"
        assert np.array_equal(down(counts), np.diff(np.r_[heads, n])), f"rle n={n}"
    elif what == 7:
        keys = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
        sort = _cached("sort", lambda: scangen.RadixSort(np.uint32))
        assert np.array_equal(down(sort(up(keys), stream=stream)), np.sort(keys)), \
            f"radix_sort n={n}"
    else:
        x = rng.normal(size=n).astype(np.float32)
        hist = _cached("histogram", lambda: scangen.Histogram(np.float32))
        counts, _ = hist(up(x), 64, (-2.0, 2.0), stream=stream)
        assert np.array_equal(down(counts), np.histogram(x, 64, (-2.0, 2.0))[0]), \
            f"histogram n={n}"
    return n


_objects, _objects_lock = {}, threading.Lock()


def _cached(key, make):
    """One object per kind of call, shared by every thread (as an application would)."""
    with _objects_lock:
        if key not in _objects:
            _objects[key] = make()
        return _objects[key]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = self.elements = 0
        self.errors = []

    def add(self, n):
        with self.lock:
            self.calls += 1
            self.elements += n


def _worker(seed, deadline, tally):
    from pycuda import driver, gpuarray

    scangen.current_context()
    stream = driver.Stream()
    rng = np.random.default_rng(seed)
    try:
        while time.monotonic() < deadline and not tally.errors:
            tally.add(_one_call(gpuarray, rng, stream))
    except BaseException as err:  # reported by the main thread
        tally.errors.append(f"thread {seed}: {type(err).__name__}: {err}")


def _dask_worker(deadline, tally):
    import dask.array as da

    rng = np.random.default_rng(99)
    op = scangen.LAST_NONZERO
    try:
        while time.monotonic() < deadline and not tally.errors:
            n = _size(rng)
            x = random_input(rng, "int32", "last_nonzero", n)
            chunks = max(1, n // int(rng.integers(1, 9)))
            got = scangen.dask.inclusive_scan(da.from_array(x, chunks=chunks), op).compute()
            assert np.array_equal(got, scan_reference(x, op)), f"dask n={n}"
            tally.add(n)
    except BaseException as err:
        tally.errors.append(f"dask: {type(err).__name__}: {err}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    from pycuda import driver

    scangen.current_context()
    start = time.monotonic()
    deadline = start + args.minutes * 60
    warm = start + args.minutes * 60 * 0.4
    tally = Tally()
    threads = [threading.Thread(target=_worker, args=(seed, deadline, tally))
               for seed in range(args.threads)]
    if not args.no_dask:
        threads.append(threading.Thread(target=_dask_worker, args=(deadline, tally)))
    for thread in threads:
        thread.start()
    free, total = driver.mem_get_info()
    peak = after_warm_up = 0
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        free, total = driver.mem_get_info()
        used = total - free
        peak = max(peak, used)
        if time.monotonic() >= warm and not after_warm_up:
            after_warm_up = peak
        print(f"{time.monotonic() - start:7.1f} s: {tally.calls} calls, "
              f"{tally.elements / 1e9:.3f} G elements, {used >> 20} MiB in use, "
              f"{_pooled_bytes() >> 20} MiB pooled", flush=True)
    for thread in threads:
        thread.join()
    print(f"soak: {tally.calls} calls, {tally.elements} elements in {args.minutes} min; "
          f"device memory in use at the end of warm-up {after_warm_up >> 20} MiB, peak "
          f"{peak >> 20} MiB, growth after warm-up {(peak - after_warm_up) >> 20} MiB")
    for error in tally.errors:
        print("ERROR", error)
    grew = after_warm_up and peak - after_warm_up > SLACK
    if grew:
        print(f"ERROR device memory grew by more than {SLACK >> 20} MiB after the warm-up")
    return 1 if tally.errors or grew else 0


if __name__ == "__main__":
    sys.exit(main())
