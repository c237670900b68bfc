"""Whole-array strategies on the GPU: hierarchical, reduce_then_scan, chained,
decoupled_lookback and auto, with every block algorithm, against the in-order reference.

Also: sizes far beyond what the GPU holds resident, tiny sections that force long
look-back chains, many calls in a row (status reuse, epoch wrap-around), two streams at once.
"""
import itertools

import numpy as np
import pytest

import scangen
from scangen import LAST_NONZERO
from scangen.spec import ALGORITHMS, MODES, STRATEGIES
from scangen.strategies.tile_state import EPOCH_LIMIT

from tests.support import (assert_scan_equal, check_scan, operator, precompile, random_input,
                           scan_reference, type_operator_pairs)

SECTION = 128
TYPES = [("int32", "add"), ("float64", "last_nonzero"), ("uint8", "max"),
         ("int16", "last_nonzero"), ("float32", "add")]
STRATEGY_MATRIX = list(itertools.product(STRATEGIES, ALGORITHMS, MODES, TYPES))
#: The default configuration (warp_shuffle, tuned section, auto) for every dtype x operator.
DEFAULT_MATRIX = [(mode, dtype, op_name)
                  for mode, (dtype, op_name) in itertools.product(MODES, type_operator_pairs())]


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    scans = [scangen.Scan(d, operator(o), mode=m, algorithm=a, strategy=s,
                          section_size=SECTION)
             for s, a, m, (d, o) in STRATEGY_MATRIX]
    scans += [scangen.Scan(d, operator(o), mode=m) for m, d, o in DEFAULT_MATRIX]
    precompile(scans)


@pytest.mark.parametrize("strategy,algorithm,mode,types", STRATEGY_MATRIX)
def test_strategy_matrix(gpu, rng, strategy, algorithm, mode, types):
    dtype, op_name = types
    scan = scangen.Scan(dtype, operator(op_name), mode=mode, algorithm=algorithm,
                        strategy=strategy, section_size=SECTION)
    for n in sorted({0, 1, SECTION - 1, SECTION, SECTION + 1, 2 * SECTION - 1, 2 * SECTION + 1,
                     33 * SECTION - 1, 33 * SECTION + 1, SECTION ** 2 + 1,
                     int(rng.integers(1, 40 * SECTION))}):
        check_scan(gpu, rng, scan, n, op_name, in_place=n % 2 == 1)


@pytest.mark.parametrize("mode,dtype,op_name", DEFAULT_MATRIX)
def test_default_configuration(gpu, rng, mode, dtype, op_name):
    scan = scangen.Scan(dtype, operator(op_name), mode=mode)
    section = scan.spec.section_size
    for n in (1, section - 1, section, section + 1, 5 * section + 3, 1_000_003):
        check_scan(gpu, rng, scan, n, op_name)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype,op_name", [("float32", "add"), ("int64", "last_nonzero")])
def test_far_beyond_resident(gpu, rng, strategy, dtype, op_name):
    """2^26 + 3 elements: many more tiles than the GPU runs at once."""
    scan = scangen.Scan(dtype, operator(op_name), strategy=strategy)
    check_scan(gpu, rng, scan, (1 << 26) + 3, op_name)


@pytest.mark.parametrize("strategy", ["chained", "decoupled_lookback"])
@pytest.mark.parametrize("algorithm,section,items", [("warp_shuffle", 32, 1),
                                                     ("coarsened", 4, 4),
                                                     ("kogge_stone", 64, None)])
def test_long_lookback_chains(gpu, rng, strategy, algorithm, section, items):
    """Tiny sections: hundreds of thousands of tiles, look-back windows narrower than a warp."""
    scan = scangen.Scan(np.int32, LAST_NONZERO, strategy=strategy, algorithm=algorithm,
                        section_size=section, items_per_thread=items)
    check_scan(gpu, rng, scan, (1 << 22) + 5, "last_nonzero")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_many_calls_in_a_row(gpu, rng, strategy):
    """Status and ticket reuse across calls of different sizes, no reset in between."""
    scan = scangen.Scan(np.float64, LAST_NONZERO, strategy=strategy, mode="exclusive")
    for n in rng.integers(1, 3_000_000, 40).tolist() + [5_000_000, 17, 4_000_000]:
        check_scan(gpu, rng, scan, int(n), "last_nonzero")


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_epoch_wrap_around(gpu, rng, dtype):
    """The 30-bit epoch wraps: the status is cleared and results stay right."""
    scan = scangen.Scan(dtype, LAST_NONZERO, strategy="decoupled_lookback")
    check_scan(gpu, rng, scan, 1_000_000, "last_nonzero")
    (scratch,) = scan.kernel._runtime._scratch.values()
    scratch.epoch = EPOCH_LIMIT - 3
    for _ in range(6):
        check_scan(gpu, rng, scan, 1_000_000, "last_nonzero")
    assert 1 <= scratch.epoch < 10


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_streams_at_once(gpu, rng, strategy):
    """Two calls of one Scan in flight on two streams must not share status or scratch."""
    import pycuda.driver as driver

    scan = scangen.Scan(np.int32, LAST_NONZERO, strategy=strategy, section_size=256,
                        algorithm="warp_shuffle")
    inputs = [random_input(rng, np.int32, "last_nonzero", 4_000_001 + k) for k in range(2)]
    streams = [driver.Stream() for _ in inputs]
    for _ in range(3):
        outs = [scan(gpu.to_gpu(x), stream=s) for x, s in zip(inputs, streams)]
        for x, out, s in zip(inputs, outs, streams):
            s.synchronize()
            np.testing.assert_array_equal(out.get(), scangen.reference_scan(x, LAST_NONZERO))


@pytest.mark.parametrize("sixteen", [True, False])
@pytest.mark.parametrize("strategy", ["chained", "decoupled_lookback"])
@pytest.mark.parametrize("dtype,op_name", [("int64", "last_nonzero"), ("float64", "add"),
                                           ("complex64", "add"), ("uint64", "affine_then")])
def test_status_16_byte_words(gpu, rng, strategy, dtype, op_name, sixteen):
    """Both tile-status layouts of values of 5 to 8 bytes (Tuning.status_16_byte_words: with
    their flag in one 16-byte word, the default, or split): tiny sections for long look-back
    chains, a size past what runs at once, and an epoch wrap-around."""
    wide = scangen.Tuning(status_16_byte_words=sixteen)
    scan = scangen.Scan(dtype, operator(op_name), strategy=strategy, tuning=wide,
                        algorithm="warp_shuffle", section_size=64, items_per_thread=2)
    for n in (1, 63, 64, 65, 64 * 33 + 1, (1 << 22) + 5):
        check_scan(gpu, rng, scan, n, op_name)
    big = scangen.Scan(dtype, operator(op_name), strategy=strategy, tuning=wide)
    check_scan(gpu, rng, big, (1 << 24) + 3, op_name)
    (scratch,) = big.kernel._runtime._scratch.values()
    scratch.epoch = EPOCH_LIMIT - 2
    for _ in range(4):
        check_scan(gpu, rng, big, 1_000_000, op_name)
    assert 1 <= scratch.epoch < 10


@pytest.mark.parametrize("strategy", ["chained", "decoupled_lookback"])
@pytest.mark.parametrize("dtype,op_name", [("float32", "add"), ("int64", "last_nonzero")])
def test_lookback_first_wait(gpu, rng, strategy, dtype, op_name):
    """Tuning.lookback_first_wait_ns with CUB's fixed polling delay: the results do not
    depend on when the status is first read (tiny tiles: long look-back chains)."""
    cub_like = scangen.Tuning(lookback_first_wait_ns=1100, backoff_min_ns=688,
                              backoff_max_ns=688)
    tiny = scangen.Scan(dtype, operator(op_name), strategy=strategy, tuning=cub_like,
                        algorithm="warp_shuffle", section_size=64, items_per_thread=2)
    for n in (1, 65, 64 * 33 + 1, (1 << 20) + 5):
        check_scan(gpu, rng, tiny, n, op_name)
    check_scan(gpu, rng, scangen.Scan(dtype, operator(op_name), strategy=strategy, tuning=cub_like),
          (1 << 24) + 3, op_name)


#: (dtype, operator, section, items per thread): the tuned tile, one warp of one item each,
#: two items each, and for small values 64 items in one warp and 1024-thread blocks.
WARP_RUN_CASES = [(dtype, op_name, section, items)
                  for dtype, op_name in [("int8", "max"), ("float32", "add"),
                                         ("int64", "last_nonzero"), ("uint64", "affine_then"),
                                         ("complex128", "add")]
                  for section, items in [(None, None), (32, 1), (256, 2)]
                  + ([(2048, 64), (8192, 8)] if dtype in ("int8", "float32") else [])]


@pytest.mark.parametrize("strategy", ["chained", "decoupled_lookback"])
@pytest.mark.parametrize("dtype,op_name,section,items", WARP_RUN_CASES)
def test_tile_warp_runs(gpu, rng, strategy, dtype, op_name, section, items):
    """Tuning.tile_warp_runs (single-pass tiles moved warp by warp, runs scanned in
    registers): both modes, sizes around tile and warp boundaries, in place, reverse."""
    runs = scangen.Tuning(tile_warp_runs=True, tile_vector_runs=False)  # vector runs: their own file
    for mode in MODES:
        scan = scangen.Scan(dtype, operator(op_name), mode=mode, strategy=strategy,
                            algorithm="warp_shuffle", section_size=section,
                            items_per_thread=items, tuning=runs)
        assert scan.spec.uses_warp_runs
        tile, warp_items = scan.spec.section_size, 32 * scan.spec.items_per_thread
        for n in sorted({1, warp_items - 1, warp_items + 1, tile - 1, tile, tile + 1,
                         3 * tile + warp_items + 5, 40 * tile + 1,
                         int(rng.integers(1, 100 * tile))}):
            check_scan(gpu, rng, scan, n, op_name, in_place=n % 2 == 1)
    backward = scangen.Scan(dtype, operator(op_name), mode="exclusive", strategy=strategy,
                            reverse=True, tuning=runs)
    x = random_input(rng, dtype, op_name, 100_003)
    assert_scan_equal(backward(gpu.to_gpu(x)).get(),
                      scan_reference(x, operator(op_name), "exclusive", reverse=True),
                      dtype, x.size)
