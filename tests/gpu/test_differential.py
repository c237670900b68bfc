"""Randomised differential tests: each case draws a scan or a primitive call at random (dtype,
operator, non-commutative ones among them, mode, strategy, algorithm, section, reverse,
initial, segments, size on or beside a boundary) and compares the GPU's result with the CPU
reference of tests.support, into a poisoned output whose guard past n must stay untouched.

Every case is a test of its own, named by its index; a failure prints the seed and the case,
and ``SCANGEN_DIFFERENTIAL_SEED=<seed> pytest tests/gpu/test_differential.py -k 'case_<k>]'``
replays it. ``SCANGEN_DIFFERENTIAL_CASES`` sets how many cases run (each new spec compiles a
module, so the default keeps the file to a few minutes on a cold cache).
"""
import os

import numpy as np
import pytest

import scangen
from scangen.spec import ALGORITHMS, MODES, STRATEGIES

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, assert_guard_untouched, assert_scan_equal,
                           exact_affine_pairs, guarded_output, operator, random_input,
                           scan_reference, segmented_reference, type_operator_pairs)

SEED = int(os.environ.get("SCANGEN_DIFFERENTIAL_SEED", "20261127"))
CASES = int(os.environ.get("SCANGEN_DIFFERENTIAL_CASES", "80"))
SCAN_PAIRS = type_operator_pairs() + [("affine_pair", "affine_pairs")]
PRIMITIVES = ("select", "select_flags", "remove_if", "partition", "unique",
              "run_length_encode", "radix_sort", "argsort")
SORT_DTYPES = ("uint32", "int32", "float32", "int64", "float64")
COMPACTION_DTYPES = ("int32", "uint8", "float32", "float64", "int64")


def _size(rng, section):
    """A size on or beside a boundary of ``section``, or a random one."""
    choices = [1, 2, section - 1, section, section + 1, 3 * section + 7,
               section * section - 1, section * section + 1,
               int(rng.integers(1, 4 * section * section))]
    return max(1, int(rng.choice(choices)))


def _scan_case(gpu, rng, where):
    dtype_name, op_name = SCAN_PAIRS[int(rng.integers(len(SCAN_PAIRS)))]
    if dtype_name == "affine_pair":
        dtype, op = AFFINE_PAIR, AFFINE_PAIRS
    else:
        dtype, op = np.dtype(dtype_name), operator(op_name)
    mode = str(rng.choice(list(MODES)))
    strategy = str(rng.choice(list(STRATEGIES)))
    algorithm = str(rng.choice(list(ALGORITHMS)))
    section_size = int(rng.choice([64, 128, 256]))
    reverse = bool(rng.random() < 0.3)
    segmented = bool(rng.random() < 0.3)

    def values(count):
        return exact_affine_pairs(rng, count) if dtype == AFFINE_PAIR else \
            random_input(rng, dtype, op_name, count)

    initial = values(1)[0] if rng.random() < 0.3 else None
    options = dict(mode=mode, strategy=strategy, algorithm=algorithm,
                   section_size=section_size, reverse=reverse)
    if initial is not None:
        options["initial"] = initial
    n = _size(rng, section_size)
    where += (f" scan {dtype} {op.name} n={n} segmented={segmented} "
              f"{', '.join(f'{k}={v!r}' for k, v in options.items())}")
    x = values(n)
    guarded = guarded_output(gpu, rng, n, dtype)
    out = guarded.out
    if segmented:
        heads = (rng.random(n) < 0.05).astype(np.uint8)
        scan = scangen.SegmentedScan(dtype, op, **options)
        scan(gpu.to_gpu(x), flags=gpu.to_gpu(heads), out=out)
        want = segmented_reference(x, heads, op, mode, reverse=reverse, initial=initial)
    else:
        scan = scangen.Scan(dtype, op, **options)
        scan(gpu.to_gpu(x), out=out)
        want = scan_reference(x, op, mode, reverse=reverse, initial=initial)
    got = assert_guard_untouched(guarded, where)
    if dtype == AFFINE_PAIR:
        for field in dtype.names:
            np.testing.assert_array_equal(got[field], want[field], err_msg=where)
    else:
        try:
            assert_scan_equal(got, want, dtype, n, op=op, reverse=reverse)
        except AssertionError as err:
            raise AssertionError(f"{where}\n{err}") from None


def _primitive_case(gpu, rng, where):
    what = str(rng.choice(PRIMITIVES))
    n = _size(rng, 4096)
    where += f" {what} n={n}"
    if what in ("radix_sort", "argsort"):
        dtype = np.dtype(str(rng.choice(SORT_DTYPES)))
        where += f" {dtype}"
        if dtype.kind == "f":
            keys = rng.normal(size=n).astype(dtype)
            keys[rng.random(n) < 0.1] = 0.0  # ties
        else:
            info = np.iinfo(dtype)
            keys = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
            keys[rng.random(n) < 0.2] = keys[0]
        order = np.argsort(keys, kind="stable")
        if what == "radix_sort":
            got = scangen.radix_sort(gpu.to_gpu(keys)).get()
            np.testing.assert_array_equal(got, keys[order], err_msg=where)
        else:
            got = scangen.argsort(gpu.to_gpu(keys)).get()
            np.testing.assert_array_equal(got, order, err_msg=where)
        return
    dtype = np.dtype(str(rng.choice(COMPACTION_DTYPES)))
    where += f" {dtype}"
    x = rng.integers(0, 4, n).astype(dtype)  # small values: runs, ties and both sides of 1
    if what == "unique":
        got = scangen.unique(gpu.to_gpu(x)).get()
        np.testing.assert_array_equal(got, x[np.r_[True, x[1:] != x[:-1]]], err_msg=where)
        return
    if what == "run_length_encode":
        values, counts = scangen.run_length_encode(gpu.to_gpu(x))
        heads = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])
        np.testing.assert_array_equal(values.get(), x[heads], err_msg=where)
        np.testing.assert_array_equal(counts.get(), np.diff(np.r_[heads, n]), err_msg=where)
        return
    keep = x > 1
    guarded = guarded_output(gpu, rng, n, dtype)
    out = guarded.out
    if what == "select":
        kept = scangen.Select(dtype, "x > 1")(gpu.to_gpu(x), out=out)
        want = x[keep]
    elif what == "remove_if":
        kept = scangen.Select(dtype, "x > 1", keep=False)(gpu.to_gpu(x), out=out)
        want = x[~keep]
    elif what == "select_flags":
        mask = rng.random(n) < 0.5
        kept = scangen.Select(dtype, flags=np.bool_)(gpu.to_gpu(x), gpu.to_gpu(mask), out=out)
        want = x[mask]
    else:
        result, count = scangen.Partition(dtype, "x > 1")(gpu.to_gpu(x), out=out)
        assert count == keep.sum(), where
        kept, want = result, np.concatenate([x[keep], x[~keep]])
    np.testing.assert_array_equal(kept.get(), want, err_msg=where)
    written = assert_guard_untouched(guarded, where)
    if what != "partition":  # past the kept elements, the output is not written
        np.testing.assert_array_equal(written[want.size:].view(np.uint8),
                                      guarded.poison[want.size:n].view(np.uint8), err_msg=where)


@pytest.mark.parametrize("case", range(CASES), ids=lambda k: f"case_{k}")
def test_random_case(gpu, case):
    rng = np.random.default_rng([SEED, case])
    where = f"SCANGEN_DIFFERENTIAL_SEED={SEED} case_{case}:"
    if rng.random() < 0.7:
        _scan_case(gpu, rng, where)
    else:
        _primitive_case(gpu, rng, where)
