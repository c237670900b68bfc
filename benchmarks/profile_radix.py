"""A radix sort's kernels, for a profiler: ``ncu python benchmarks/profile_radix.py``
runs a warm-up sort and then one sort of 2^26 uint32 keys. Environment: N= the size,
TILE=THREADSxITEMS another tile shape, ONESWEEP_MIN_THREADS_PER_SM= the onesweep kernel's
register bound, ONESWEEP_PORTION_TILES= the tiles of one onesweep launch,
DIGIT_COUNT_BLOCKS_PER_SM= the digit count's grid, TRIALS= sorts timed (the
best is reported)."""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scangen  # noqa: E402
from scangen.compile import current_context  # noqa: E402

current_context()
from pycuda import gpuarray  # noqa: E402
import pycuda.driver as driver  # noqa: E402

from scangen.primitives import radix  # noqa: E402

for knob in ("ONESWEEP_MIN_THREADS_PER_SM", "ONESWEEP_PORTION_TILES",
             "_DIGIT_COUNT_BLOCKS_PER_SM"):
    if knob.strip("_") in os.environ:
        setattr(radix, knob, int(os.environ[knob.strip("_")]))
n = int(eval(os.environ.get("N", "2**26")))
keys = gpuarray.to_gpu(np.random.default_rng(1).integers(0, 2 ** 32, n, dtype=np.uint32))
sort = scangen.RadixSort(np.uint32)
if "TILE" in os.environ:  # THREADSxITEMS, to try another tile shape
    threads, items = (int(v) for v in os.environ["TILE"].split("x"))
    sort.module = radix.RadixPassesModule(np.dtype(np.uint32), block_size=threads,
                                          max_items=items)
sort(keys)
driver.Context.synchronize()
start, stop = driver.Event(), driver.Event()
times = []
for _ in range(int(os.environ.get("TRIALS", "1"))):
    start.record()
    sort(keys)
    stop.record()
    stop.synchronize()
    times.append(stop.time_since(start) * 1e3)
tile = sort.module
print(f"sort of {n} uint32 keys ({tile.block_size}x{tile.items_per_thread}): "
      f"{min(times):.1f} us (best of {len(times)})")
