"""Shared test fixtures.

GPU tests use the ``gpu`` fixture: it skips with a visible reason when PyCUDA or a CUDA
device is missing, and with SCANGEN_REQUIRE_GPU=1 it fails instead, so a GPU run cannot
pass by skipping. Tests that compile with nvcc use the ``nvcc`` fixture (through
tests.support.needs_nvcc): they skip without it, and fail under SCANGEN_REQUIRE_NVCC=1.
"""
import os
import zlib

import numpy as np
import pytest

REQUIRE_GPU = os.environ.get("SCANGEN_REQUIRE_GPU") == "1"

# The suite checks scangen's own tuning values (scangen.tuning.SCAN), not a table someone
# measured on this machine with `python -m scangen tune`; set SCANGEN_TUNING to run it
# against one.
os.environ.setdefault("SCANGEN_TUNING", "default")


def _gpu_unavailable_reason():
    """Why there is no GPU (no PyCUDA, or no usable device), or None. Any other error
    while making a context current is a bug and propagates: the test errors, not skips."""
    from scangen.compile import GPUUnavailableError, current_context

    try:
        current_context()
    except GPUUnavailableError as err:
        return f"no GPU: {err}"
    return None


@pytest.fixture(scope="session")
def gpu():
    """The pycuda.gpuarray module, with a context current; skips (or fails) without a GPU."""
    reason = _gpu_unavailable_reason()
    if reason is not None:
        if REQUIRE_GPU:
            pytest.fail(f"SCANGEN_REQUIRE_GPU=1 but {reason}")
        pytest.skip(reason)
    from pycuda import gpuarray
    return gpuarray


@pytest.fixture(scope="session")
def nvcc():
    """The path of nvcc; skips without it, or fails under SCANGEN_REQUIRE_NVCC=1
    (tests.support.needs_nvcc marks a test that needs it)."""
    from tests.support import require_nvcc
    return require_nvcc()


@pytest.fixture
def rng(request):
    """A seeded generator per test, so a failure can be replayed."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="K/N",
                     help="run only the K-th of N slices of the collected tests (0 <= K < N), "
                          "so N processes can share a run: --shard 0/3, --shard 1/3, "
                          "--shard 2/3. A slice is RUNS_PER_SHARD runs of neighbouring tests "
                          "(which mostly share kernels) from across the suite, so that one "
                          "slow file does not make one slow slice")
    parser.addoption("--compile-only", action="store_true",
                     help="set every test up and run none: each GPU test file's precompile "
                          "fixture fills scangen's cubin cache, which shards of a later run "
                          "can then start from (tests/gpu/run_sharded.sh); every test is "
                          "reported as skipped")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if item.config.getoption("--compile-only"):
        pytest.skip("--compile-only: set up (kernels compiled), not run")


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: shards of what is left
def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard is None:
        return
    try:
        k, n = (int(part) for part in shard.split("/"))
        if not 0 <= k < n:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"--shard {shard}: give K/N with 0 <= K < N") from None
    kept = [item for run in _runs_of_shard(len(items), k, n) for item in items[run]]
    chosen = set(map(id, kept))
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
    items[:] = kept


#: Runs of neighbouring tests a --shard slice takes, spread over the suite. Slow tests come
#: in clusters (a file's parametrisations of one slow case): at 4 runs a shard, the GPU
#: suite's 16 shards on an H100 took 42 to over 270 s; shorter runs spread a cluster over
#: more shards, at the price of a module-scoped fixture set up in more of them.
RUNS_PER_SHARD = 12


def _runs_of_shard(count: int, k: int, n: int) -> list[slice]:
    """Shard k of n: runs k, k + n, k + 2n, ... of the count tests cut into RUNS_PER_SHARD * n
    runs of near-equal length (one contiguous slice each where there are too few tests for
    that: fewer than RUNS_PER_SHARD tests a shard)."""
    runs = n * RUNS_PER_SHARD if count >= n * RUNS_PER_SHARD else n
    return [slice(j * count // runs, (j + 1) * count // runs) for j in range(k, runs, n)]
