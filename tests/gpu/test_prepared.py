"""Prepared scans on the GPU (Scan.prepare, ScanKernel.prepare): every call scans the
input's contents at that time, with every strategy and mode, at sizes on both sides of
where plans change (one section, several, a single pass whose tickets advance each call);
a larger call on the same stream between calls, which replaces the scratch; CuPy arrays on
a stream of their own; a ScanKernel's scalar argument and initial value bound once.
Non-commutative operators, poisoned outputs, references that fold with the operator."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES, STRATEGIES

from tests.support import (assert_scan_equal, operator, poisoned, precompile, random_input,
                           require_module, scan_reference)

SECTION = 64
SIZES = [1, SECTION - 1, SECTION, SECTION + 1, SECTION**2 + 1, 3 * SECTION**2 + 7]
CASES = list(itertools.product(STRATEGIES, MODES))


def last_nonzero_scan(strategy, mode):
    return scangen.Scan(np.int32, operator("last_nonzero"), mode=mode, strategy=strategy,
                        section_size=SECTION)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    precompile([last_nonzero_scan(strategy, mode) for strategy, mode in CASES])


@pytest.mark.parametrize("strategy,mode", CASES)
def test_each_call_scans_the_input_of_its_time(gpu, rng, strategy, mode):
    scan, op = last_nonzero_scan(strategy, mode), operator("last_nonzero")
    for n in SIZES:
        x, out = gpu.empty(n, np.int32), poisoned(gpu, rng, n, np.int32)
        run = scan.prepare(x, out)
        for _ in range(3):
            host = random_input(rng, np.int32, "last_nonzero", n)
            x.set(host)
            assert run() is out
            assert_scan_equal(out.get(), scan_reference(host, op, mode), np.int32, n, op=op)


def test_a_larger_call_between_calls_leaves_them_right(gpu, rng):
    """A larger call on the same stream replaces the stream's scratch (tile status, ticket
    counter): the prepared call binds again and goes on scanning right."""
    op = operator("affine_then")
    scan = scangen.Scan(np.uint64, op, strategy="decoupled_lookback", section_size=SECTION)
    n, larger = 5 * SECTION**2 + 3, 40 * SECTION**2 + 1
    x = gpu.to_gpu(random_input(rng, np.uint64, "affine_then", n))
    run = scan.prepare(x)
    for size in (larger, 2 * larger, None):
        host = random_input(rng, np.uint64, "affine_then", n)
        x.set(host)
        np.testing.assert_array_equal(run().get(), scan_reference(host, op))
        if size:
            big = random_input(rng, np.uint64, "affine_then", size)
            np.testing.assert_array_equal(scan(gpu.to_gpu(big)).get(), scan_reference(big, op))


def test_cupy_arrays_on_a_stream_of_their_own(gpu, rng):
    """The stream current at prepare is the one each call launches on, whichever is current
    at the call; the output prepare makes is CuPy's."""
    cp = require_module("cupy")
    op = operator("affine_then")
    scan = scangen.Scan(np.uint64, op)
    n = 3_000_017
    x = cp.empty(n, np.uint64)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        run = scan.prepare(x)
    assert isinstance(run.out, cp.ndarray)
    for _ in range(3):
        host = random_input(rng, np.uint64, "affine_then", n)
        with stream:
            x.set(host)
        run()
        stream.synchronize()
        np.testing.assert_array_equal(run.out.get(), scan_reference(host, op))


def test_a_scan_kernel_binds_its_scalars_and_initial_value(gpu, rng):
    op = operator("affine_then")
    start = random_input(rng, np.uint64, "affine_then", 1)[0]
    kernel = scangen.ScanKernel(
        np.uint64, op, arguments="const unsigned long long *x, unsigned long long *out, "
        "unsigned long long shift", input_expr="x[i] ^ shift",
        output_statement="out[i] = item;", initial=0)
    shift = np.uint64(0x5A5A)
    for n in (1, 5000, 1_000_003):
        x, out = gpu.empty(n, np.uint64), poisoned(gpu, rng, n, np.uint64)
        run = kernel.prepare(x, out, shift, initial=start)
        host = random_input(rng, np.uint64, "affine_then", n)
        x.set(host)
        assert run() is None
        np.testing.assert_array_equal(out.get(), scan_reference(host ^ shift, op,
                                                                initial=start))
