"""Scans from threads other than the main one, in a fresh process: PyCUDA aborts a process
whose thread ends with a context still on its stack, and refuses to free memory through a
context object made in another thread unless it is current. Each case must exit 0 without
a PyCUDA error or warning, scangen's own memory (scratch, modules) included at exit, and
arrays the program keeps until the interpreter tears down."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    # A thread that scans and ends while the process goes on.
    "thread_ends_first": """
        t = threading.Thread(target=scan_some, args=(1000,)); t.start(); t.join()
        scan_some(5)
    """,
    # The first context use is in a worker; the main thread scans later and frees what the
    # worker allocated.
    "worker_first": """
        with ThreadPoolExecutor(2) as pool:
            kept = list(pool.map(scan_some, [70000, 3, 1 << 20]))
        scan_some(70000); del kept; gc.collect()
    """,
    # Pool threads alive until interpreter shutdown, as Dask's default pool is; the main
    # thread holds the context (as the README's examples do) and frees what they returned.
    "pool_until_exit": """
        scangen.current_context()
        pool = ThreadPoolExecutor(3)
        kept = list(pool.map(scan_some, [70000, 3, 1 << 20, 999]))
        del kept
    """,
    # Results left in module globals, freed as the interpreter tears down, after scangen's
    # exit handler: scangen's pools then hold no blocks, which a pool would take back
    # only with a context current (PyCUDA ends the process otherwise).
    "arrays_in_globals": """
        KEPT = [scan_some(n) for n in (5, 70000)]
        SELECTED = scangen.select(gpuarray.to_gpu(np.arange(1000, dtype=np.float32)), "x > 500.0f")
        SORTED = scangen.radix_sort(gpuarray.to_gpu(np.arange(999, -1, -1, dtype=np.uint32)))
        assert SELECTED.size == 499 and (SORTED.get() == np.arange(1000)).all()
    """,
    # The same in pycuda.autoinit's context, which its own exit handler pops.
    "autoinit_arrays_in_globals": """
        import pycuda.autoinit
        KEPT = [scan_some(n) for n in (5, 70000)]
        SELECTED = scangen.select(gpuarray.to_gpu(np.arange(1000, dtype=np.float32)), "x > 500.0f")
    """,
}
#: What PyCUDA says of an object freed where its context is not current, or after it was
#: popped, and of a context left on a thread's stack.
CONTEXT_ERRORS = ("terminate called", "out-of-thread", "could not be cleaned up",
                  "PyCUDA ERROR", "PyCUDA WARNING")

PRELUDE = """
    import gc, threading
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np, scangen
    from pycuda import gpuarray

    SCAN = scangen.Scan("int64", "add")

    def scan_some(n):
        scangen.current_context()
        x = np.arange(n, dtype=np.int64)
        y = SCAN(gpuarray.to_gpu(x))
        assert (y.get() == np.cumsum(x)).all()
        return y
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_scans_in_threads_exit_cleanly(gpu, case):
    program = textwrap.dedent(PRELUDE) + textwrap.dedent(CASES[case])
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for error in CONTEXT_ERRORS:
        assert error not in done.stderr, done.stderr[-3000:]


def test_primitives_called_from_threads_at_once_keep_their_results_apart(gpu, rng):
    """The one-shot primitives share one object per dtype between threads, and every thread
    here queues its work on the one default stream: a call's count buffers and radix
    scratch must be its own thread's (compaction/radix per-thread buffers), or calls read
    each other's counts and digit offsets."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import scangen

    calls = 24
    sizes = rng.integers(1, 300_000, calls)
    data = [rng.standard_normal(int(n)).astype(np.float32) for n in sizes]
    keys = [rng.integers(0, 2 ** 32, int(n), dtype=np.uint32) for n in sizes]

    def work(k):
        scangen.current_context()
        x, key = data[k], keys[k]
        assert np.array_equal(scangen.select(gpu.to_gpu(x), "x > 0.25f").get(), x[x > 0.25])
        assert np.array_equal(scangen.radix_sort(gpu.to_gpu(key)).get(), np.sort(key))
        runs = np.sort(key) >> np.uint32(24)  # at most 256 runs
        values, counts = scangen.run_length_encode(gpu.to_gpu(runs))
        heads = np.flatnonzero(np.diff(runs, prepend=runs[0] + np.uint32(1)))
        assert np.array_equal(values.get(), runs[heads])
        assert np.array_equal(counts.get(), np.diff(np.append(heads, len(runs))))
        return k

    with ThreadPoolExecutor(6) as pool:
        assert sorted(pool.map(work, range(calls))) == list(range(calls))
