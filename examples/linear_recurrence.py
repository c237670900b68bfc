"""A linear recurrence x[t] = a[t] * x[t-1] + b[t] (mod 2^32), x[-1] = 0, as a scan.

Each step is the affine map x -> a*x + b. Composing maps is associative but not commutative,
so a scan of the maps (applied left to right) gives, at every t, the map from x[-1] to x[t];
with x[-1] = 0 its constant term is x[t]. A map is packed in 64 bits: a in the high word, b in
the low word. The second kernel restarts the recurrence at every segment head (x = b there),
with ScanKernel's is_segment_start_expr.

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/linear_recurrence.py
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

#: combine(f, g) = "f, then g": g(f(x)) = ag*(af*x + bf) + bg.
AFFINE = scangen.Operator("then(a, b)", identity=1 << 32, name="affine_then", preamble="""
static __device__ __forceinline__ unsigned long long then(unsigned long long f,
                                                          unsigned long long g)
{
    const unsigned long long low = 0xFFFFFFFFull;
    const unsigned long long a = ((g >> 32) * (f >> 32)) & low;
    const unsigned long long b = ((g >> 32) * (f & low) + (g & low)) & low;
    return (a << 32) | b;
}""")

ARGUMENTS = "const unsigned *a, const unsigned *b, const unsigned char *heads, unsigned *x"
MAP_AT_I = "((unsigned long long)a[i] << 32) | b[i]"
STORE_X = "x[i] = (unsigned)(item & 0xFFFFFFFFull);"


def recurrence(segmented=False):
    return scangen.ScanKernel(np.uint64, AFFINE, arguments=ARGUMENTS, input_expr=MAP_AT_I,
                              output_statement=STORE_X,
                              is_segment_start_expr="heads[i] != 0" if segmented else None)


def sequential(a, b, heads, segmented):
    """The definition, one step at a time, in numpy's wrapping uint32 arithmetic."""
    x = np.empty_like(b)
    previous = np.uint32(0)
    with np.errstate(over="ignore"):
        for t in range(b.size):
            if segmented and heads[t]:
                previous = np.uint32(0)
            previous = a[t] * previous + b[t]
            x[t] = previous
    return x


def main(n=200_000, seed=5):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    heads = (rng.random(n) < 0.001).astype(np.uint8)
    a_gpu, b_gpu, heads_gpu = (gpuarray.to_gpu(v) for v in (a, b, heads))
    for segmented in (False, True):
        x = gpuarray.empty(n, np.uint32)
        recurrence(segmented)(a_gpu, b_gpu, heads_gpu, x)
        got = x.get()
        np.testing.assert_array_equal(got, sequential(a, b, heads, segmented))
        what = f"restarted at {int(heads.sum())} heads" if segmented else "one sequence"
        print(f"x[t] = a[t] x[t-1] + b[t] mod 2^32, n={n}, {what}: x[-3:] = {got[-3:]}")
    print("OK: matches the step-by-step recurrence")
    return got


if __name__ == "__main__":
    main()
