"""Sharing a 100-inch sandwich: where does each person's piece start and end?

Ten people want [3 5 2 7 28 4 3 0 8 1] inches. Cutting one piece after another is
sequential; a prefix sum computes every cut position at once:

* the exclusive scan gives where each piece starts (the total of everyone before),
* the inclusive scan gives where each piece ends (the total up to and including them),
* the last end is what everybody eats together; the rest is left over.

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/sandwich.py
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

SANDWICH_INCHES = 100
WANTS = [3, 5, 2, 7, 28, 4, 3, 0, 8, 1]


def main():
    wants = np.array(WANTS, dtype=np.int32)
    wants_gpu = gpuarray.to_gpu(wants)

    starts = scangen.Scan(np.int32, "add", mode="exclusive")(wants_gpu).get()
    ends = scangen.Scan(np.int32, "add", mode="inclusive")(wants_gpu).get()
    left_over = SANDWICH_INCHES - int(ends[-1])

    print("wants (inches):", wants)
    print("cut starts at: ", starts)
    print("cut ends at:   ", ends)
    for person, (start, end) in enumerate(zip(starts, ends)):
        print(f"  person {person}: from {start:3d} to {end:3d} inches")
    print(f"left over: {left_over} inches")

    # The same answers from the CPU: the reference scan, and numpy's cumulative sum.
    np.testing.assert_array_equal(starts, scangen.reference_scan(wants, "add", "exclusive"))
    np.testing.assert_array_equal(ends, scangen.reference_scan(wants, "add", "inclusive"))
    np.testing.assert_array_equal(ends, np.cumsum(wants))
    np.testing.assert_array_equal(ends, [3, 8, 10, 17, 45, 49, 52, 52, 60, 61])
    assert left_over == 39, left_over
    print("OK: matches the CPU")
    return starts, ends, left_over


if __name__ == "__main__":
    main()
