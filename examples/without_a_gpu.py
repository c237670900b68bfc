"""Everything short of running a kernel works without a GPU: read the CUDA scangen emits for
your operator, see the launches it would make, and have nvcc compile it.

The operator here composes clamped increments, a non-commutative one: each element is a
step, and the scan is the running total kept within [0, 100] after every step. Steps
compose as maps x -> min(max(x + a, lo), hi); that needs three numbers a map, so the
example scans a (delta, lo, hi) struct.

Run anywhere with scangen installed (nvcc on PATH for the last step):
python examples/without_a_gpu.py
"""
import shutil

import numpy as np

import scangen

# A map x -> min(max(x + delta, lo), hi); the identity is x -> x (delta 0, no bounds).
CLAMPED_STEP = np.dtype([("delta", np.float32), ("lo", np.float32), ("hi", np.float32)])
# a then b: x -> b(a(x)). Adding after a clamp moves the clamp's bounds by b.delta, and
# b's bounds then cut them. The expression calls a helper of the operator's preamble.
THEN = scangen.Operator(
    "then(a, b)", identity=(0.0, -np.inf, np.inf), name="clamped_steps",
    preamble="""
__device__ __forceinline__ scan_t then(scan_t a, scan_t b)
{
    scan_t r;
    r.delta = a.delta + b.delta;
    r.lo = fminf(fmaxf(a.lo + b.delta, b.lo), b.hi);
    r.hi = fminf(fmaxf(a.hi + b.delta, b.lo), b.hi);
    return r;
}""")


def main(n=1 << 24, lines=26):
    scan = scangen.Scan(CLAMPED_STEP, THEN)
    print(f"{scan!r}\n")
    source = scan.source
    start = source.index("// user operator preamble {")  # the operator, as the kernel has it
    print("\n".join(source[start:].splitlines()[:lines]), "\n...\n")
    plan = scan.plan(n)
    print(plan, "\n")
    if shutil.which("nvcc"):
        scan.check_compile()
        print("nvcc compiled it for", scangen.compile.DEFAULT_ARCH)
    else:
        print("no nvcc on PATH: skipped the compile check")
    return scan, plan


if __name__ == "__main__":
    main()
