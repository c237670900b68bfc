"""Stream compaction with ScanKernel: keep the elements above a threshold, in order.

The scan counts kept elements (input 1 or 0); an element is kept where the count steps up
(item != prev_item), and prev_item is then its place in the output. The count of the last
element is the number kept. The kernel itself is the eleven lines of `compact_above`.

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/compaction.py
"""
import sys

import numpy as np

import scangen

try:
    # Device 0's primary context: the one CuPy and torch use, so arrays of all three mix.
    scangen.current_context()
except scangen.GPUUnavailableError as err:  # no PyCUDA or no GPU: say so in one line
    sys.exit(f"this example runs on an NVIDIA GPU: {err}")
from pycuda import gpuarray  # noqa: E402 (after the check, which names what is missing)


def compact_above(x, threshold):
    """The elements of the float32 GPUArray x above threshold, in order, as a new GPUArray."""
    kernel = scangen.ScanKernel(
        np.int64, "add",
        arguments="const float *x, float threshold, float *out, long long *count",
        input_expr="x[i] > threshold ? 1 : 0",
        output_statement="if (item != prev_item) out[prev_item] = x[i];"
                         " if (i == n - 1) *count = item;")
    out, count = gpuarray.empty_like(x), gpuarray.zeros(1, np.int64)
    kernel(x, np.float32(threshold), out, count)
    kept = int(count.get()[0])
    return out if kept == x.size else out[:kept]  # (pycuda cannot slice an empty array)


def main(n=1_000_000, seed=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    kept = compact_above(gpuarray.to_gpu(x), 1.5).get()
    print(f"kept {kept.size} of {n} elements above 1.5; first few: {np.round(kept[:5], 3)}")
    np.testing.assert_array_equal(kept, x[x > 1.5])
    print("OK: matches numpy's x[x > 1.5]")
    return kept


if __name__ == "__main__":
    main()
