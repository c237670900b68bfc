"""Running maximum: the highest value seen so far, at every point of a random series.

The built-in "max" operator starts from the lowest value of the type (-inf for floats),
so the first output is the first input. Maximum is exact, so the GPU result must equal
numpy's np.maximum.accumulate bit for bit (unlike a float sum, where the order of
additions changes the last bits).

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/running_max.py
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


def main(n=1_000_000, seed=1):
    rng = np.random.default_rng(seed)
    # A random walk: its running maximum rises in steps and stays flat in between.
    series = np.cumsum(rng.standard_normal(n)).astype(np.float32)

    running_max = scangen.Scan(np.float32, "max", mode="inclusive")
    result = running_max(gpuarray.to_gpu(series)).get()

    print(f"{running_max!r}, n={n}")
    print("series:     ", np.round(series[:8], 2))
    print("running max:", np.round(result[:8], 2))
    print(f"highest value {result[-1]:.3f}, first reached at index "
          f"{int(np.argmax(series == result[-1]))}")

    np.testing.assert_array_equal(result, np.maximum.accumulate(series))
    np.testing.assert_array_equal(result, scangen.reference_scan(series, "max"))
    print("OK: matches numpy")
    return result


if __name__ == "__main__":
    main()
