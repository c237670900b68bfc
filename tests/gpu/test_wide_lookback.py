"""Single-pass kernels whose look-back reads several tiles per lane
(Tuning.lookback_tiles_per_lane), on the GPU, against the in-order reference:
non-commutative operators, packed and split tile status, tiles moved warp by warp, counting
scans, tiny tiles (long look-backs), call after call through an epoch wrap-around."""
import itertools

import pytest

import scangen
from scangen.spec import MODES

from tests.support import (COUNTING_CASES, check_counting, check_single_pass, counting_kernel,
                           operator, precompile)

#: Look-back tiles per lane: windows of 64, 128 and 256 tiles.
WIDTHS = [2, 4, 8]
#: (dtype, operator, tiles moved warp by warp): 1-, 4-, 8- and 16-byte values.
CASES = [("float32", "add", False), ("float32", "add", True),
         ("int64", "last_nonzero", False), ("uint64", "affine_then", True),
         ("int8", "max", False), ("complex128", "add", False)]
#: Counting scans with windows of 128 tiles.
COUNTING = scangen.Tuning(lookback_tiles_per_lane=4)


def tuned_scans(width, case):
    """Both modes on tiny tiles (64 = 32 threads x 2), then the tuned tile."""
    dtype, op_name, warp_runs = case
    tuning = scangen.Tuning(lookback_tiles_per_lane=width, tile_warp_runs=warp_runs)
    tiny = [scangen.Scan(dtype, operator(op_name), mode=mode, strategy="decoupled_lookback",
                         algorithm="warp_shuffle", section_size=64, items_per_thread=2,
                         tuning=tuning) for mode in MODES]
    return tiny + [scangen.Scan(dtype, operator(op_name), strategy="decoupled_lookback",
                                tuning=tuning)]


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = [scan for case in itertools.product(WIDTHS, CASES) for scan in tuned_scans(*case)]
    kernels += [counting_kernel("decoupled_lookback", *case, tuning=COUNTING)
                for case in COUNTING_CASES]
    precompile(kernels)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_wide_lookback(gpu, rng, width, case):
    """Tiny tiles around their boundaries, both modes, in place; then the tuned tile past
    2^24 and call after call of several sizes through an epoch wrap-around."""
    *tiny, big = tuned_scans(width, case)
    assert all(scan.spec.uses_warp_runs == case[2] for scan in tiny)
    check_single_pass(gpu, rng, tiny, big, case[1])


@pytest.mark.parametrize("case", COUNTING_CASES, ids=str)
def test_counts_wide_lookback(gpu, rng, case):
    check_counting(gpu, rng, "decoupled_lookback", case, COUNTING)
