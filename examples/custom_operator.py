"""A user-defined operator: "the largest swing so far", keeping its sign.

combine(a, b) keeps whichever of a and b has the larger magnitude, and the later one (b) on
a tie. That is associative (it picks the last element of largest magnitude, however the
elements are grouped) but not commutative: combine(-3, 3) is 3, combine(3, -3) is -3. So
scangen must keep the operand order, which it does for every operator.

The C expression may call helper functions defined in the operator's preamble. The preamble
is plain CUDA C emitted before the combine function; `scan_t` is the element type.
The identity is 0: nothing has a smaller magnitude.

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/custom_operator.py
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

PREAMBLE = """
static __device__ __forceinline__ scan_t magnitude(scan_t v)
{
    return v < 0 ? -v : v;
}
"""


def largest_swing_numpy(a, b):
    """The same operator on numpy arrays, elementwise (used by the reference scan)."""
    return np.where(np.abs(b) >= np.abs(a), b, a)


LARGEST_SWING = scangen.Operator(
    "magnitude(b) >= magnitude(a) ? b : a",
    identity=0,
    name="largest_swing",
    preamble=PREAMBLE,
    reference=largest_swing_numpy,
)


def main(n=300_000, seed=2):
    rng = np.random.default_rng(seed)
    # Small integers, so many ties between +v and -v: a swapped operand order would show.
    x = rng.integers(-50, 51, n).astype(np.int32)

    scan = scangen.Scan(np.int32, LARGEST_SWING, mode="inclusive", algorithm="brent_kung")
    result = scan(gpuarray.to_gpu(x)).get()

    print(f"{scan!r}, n={n}")
    print("input: ", x[:10])
    print("output:", result[:10])

    expected = scangen.reference_scan(x, LARGEST_SWING)
    np.testing.assert_array_equal(result, expected)
    # A plain-Python check of the first elements, straight from the definition.
    swing = 0
    for i, value in enumerate(x[:1000]):
        swing = value if abs(value) >= abs(swing) else swing
        assert result[i] == swing, (i, result[i], swing)
    print("OK: matches the reference scan")
    print("--- the emitted combine function and its preamble ---")
    lines = scan.source.splitlines()
    start = lines.index("// user operator preamble {")
    end = next(i for i, line in enumerate(lines) if "scan_identity()" in line)
    print("\n".join(lines[start:end]).rstrip())
    return result


if __name__ == "__main__":
    main()
