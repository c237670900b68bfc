"""The first call with a new operator, from a fresh process and an empty cubin cache (run on
the GPU host; results go to stdout).

Each run starts a new Python process with SCANGEN_CACHE_DIR set to a new empty folder, so
nothing is cached: it times ``import scangen``, then the first ``Scan(float32, a user
operator)(x)`` on 2^20 CuPy elements (render, nvcc for the plan's part, load, launch,
synchronise), then a second call of a new Scan object with the same operator (the module
cached in memory).

    python benchmarks/first_call.py [--runs 3] [--compiler nvcc|nvrtc]

``--compiler`` sets SCANGEN_COMPILER for the runs (scangen.compile.compiler: nvcc by
default, or NVRTC in the process).
"""
import argparse
import os
import subprocess
import sys
import tempfile

#: One run, in its own process.
RUN = """
import time
t0 = time.perf_counter()
import numpy as np, cupy, scangen
t1 = time.perf_counter()
op = scangen.Operator("a > b ? a : b", identity=float("-inf"), name="mx")
x = cupy.ones(1 << 20, np.float32)
t2 = time.perf_counter()
scangen.Scan(np.float32, op)(x)
cupy.cuda.runtime.deviceSynchronize()
t3 = time.perf_counter()
scangen.Scan(np.float32, op)(x)
cupy.cuda.runtime.deviceSynchronize()
t4 = time.perf_counter()
print(f"import {t1 - t0:.2f} s, first call (compile, load, launch) {t3 - t2:.2f} s, "
      f"second {1e3 * (t4 - t3):.1f} ms")
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--compiler", choices=("nvcc", "nvrtc"), default="nvcc",
                        help="the compiler scangen runs (SCANGEN_COMPILER)")
    args = parser.parse_args(argv)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            result = subprocess.run([sys.executable, "-c", RUN], capture_output=True,
                                    text=True, env={**os.environ, "SCANGEN_CACHE_DIR": cache,
                                                    "SCANGEN_COMPILER": args.compiler})
        print(result.stdout.strip() or result.stderr.strip(), flush=True)
        if result.returncode:
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
