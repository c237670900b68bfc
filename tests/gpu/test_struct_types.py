"""Struct scans on the GPU: a linear recurrence over float64 (m, c) pairs against a
sequential loop, a running maximum with its first index, running (count, mean, M2)
statistics, on every strategy and around section boundaries."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES, STRATEGIES

from scangen.workloads import STRUCTS
from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, ARGMAX, RUNNING_STATS, STATS,
                           VALUE_INDEX, poisoned, precompile, value_index_input)

SECTION = 64
SIZES = [1, 2, SECTION - 1, SECTION, SECTION + 1, SECTION**2 + 1, 3 * SECTION**2 + 7]
CASES = list(itertools.product(STRATEGIES, MODES))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    scans = [scangen.Scan(d, op, mode=m, strategy=s, section_size=SECTION)
             for (s, m), (d, op) in itertools.product(CASES, [(AFFINE_PAIR, AFFINE_PAIRS),
                                                              (VALUE_INDEX, ARGMAX)])]
    scans.append(scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS))
    scans.append(scangen.Scan(STATS, RUNNING_STATS))
    precompile(scans)


#: Maps near m = 1, so products neither blow up nor vanish over millions of steps: the
#: bench's input for the same operator.
affine_maps = STRUCTS["affine-f64x2"].make_input


@pytest.mark.parametrize("strategy,mode", CASES)
def test_affine_pairs_and_argmax(gpu, rng, strategy, mode):
    for dtype, op in ((AFFINE_PAIR, AFFINE_PAIRS), (VALUE_INDEX, ARGMAX)):
        scan = scangen.Scan(dtype, op, mode=mode, strategy=strategy, section_size=SECTION)
        for n in SIZES:
            if dtype == AFFINE_PAIR:
                x = affine_maps(rng, n)
            else:
                x = value_index_input(rng, n)
            out = poisoned(gpu, rng, n, dtype)
            scan(gpu.to_gpu(x), out=out)
            got, want = out.get(), scangen.reference_scan(x, op, mode)
            for field in dtype.names:
                np.testing.assert_allclose(got[field], want[field], rtol=1e-12, atol=1e-12,
                                           err_msg=f"{field} n={n}")


def test_linear_recurrence_2_to_the_24_against_a_loop(gpu, rng):
    """x[t] = m[t] x[t-1] + c[t], x[-1] = 0, over 2^24 steps: the scan's constant terms."""
    n = 1 << 24
    maps = affine_maps(rng, n)
    got = scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS)(gpu.to_gpu(maps)).get()["c"]
    x, want = 0.0, np.empty(n)
    for t, (m, c) in enumerate(zip(maps["m"].tolist(), maps["c"].tolist())):
        x = m * x + c
        want[t] = x
    # Sums of 2^24 terms of size ~1: absolute error ~ 1e-16 * n * |x|, stated bound 1e-7.
    scale = np.maximum(np.abs(want), 1.0)
    assert np.max(np.abs(got - want) / scale) < 1e-7


def test_running_statistics(gpu, rng):
    n = 1_000_003
    values = rng.normal(3.0, 2.0, n)
    x = np.zeros(n, STATS)
    x["count"], x["mean"] = 1.0, values
    got = scangen.Scan(STATS, RUNNING_STATS)(gpu.to_gpu(x)).get()
    counts = np.arange(1, n + 1)
    mean = np.cumsum(values) / counts
    np.testing.assert_array_equal(got["count"], counts)
    np.testing.assert_allclose(got["mean"], mean, rtol=1e-9, atol=1e-9)
    for k in (1, 10, 1000, n):  # the variance at a few points, against numpy's
        assert got["m2"][k - 1] / k == pytest.approx(np.var(values[:k]), rel=1e-9, abs=1e-12)
