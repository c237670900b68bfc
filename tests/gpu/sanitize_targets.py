"""Small scans of every strategy, to run under compute-sanitizer (see README, Development):

    compute-sanitizer --tool memcheck  --error-exitcode 1 python3 tests/gpu/sanitize_targets.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/gpu/sanitize_targets.py
    compute-sanitizer --tool synccheck --error-exitcode 1 python3 tests/gpu/sanitize_targets.py

Sizes are small (the sanitizers slow kernels down a hundredfold) but span several sections,
so every kernel of every strategy runs, tail sections included. Exits non-zero on a wrong
result too.
"""
import itertools
import sys

import numpy as np

import scangen
from scangen.spec import ALGORITHMS, MODES, STRATEGIES


def main() -> int:
    from pycuda import gpuarray

    from scangen.compile import current_context

    current_context()
    rng = np.random.default_rng(7)
    failures = 0
    cases = list(itertools.product(STRATEGIES, MODES, [("int32", "add"), ("float64", "max")]))
    cases += [("decoupled_lookback", "inclusive", ("uint8", "last_nonzero"))]
    for strategy, mode, (dtype, op_name) in cases:
        op = scangen.LAST_NONZERO if op_name == "last_nonzero" else op_name
        for algorithm in ALGORITHMS:
            scan = scangen.Scan(dtype, op, mode=mode, strategy=strategy, algorithm=algorithm,
                                section_size=64)
            for n in (1, 63, 64, 65, 64 * 5 + 7, 64 * 64 + 1):
                x = rng.integers(0, 5, n).astype(dtype)
                got = scan(gpuarray.to_gpu(x)).get()
                want = scangen.reference_scan(x, op, mode)
                if not np.array_equal(got, want):
                    failures += 1
                    print(f"MISMATCH {strategy} {algorithm} {mode} {dtype} {op_name} n={n}")
    print(f"sanitize_targets: {len(cases) * len(ALGORITHMS) * 6} scans, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
