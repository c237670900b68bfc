"""SegmentedScan on the GPU: flags, offsets and keys, non-commutative operators, empty and
single-element segments, both modes, reverse, every strategy."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES, STRATEGIES

from tests.support import (flipped, operator, poisoned, precompile, random_input,
                           segmented_reference)

TYPES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "max")]
CASES = list(itertools.product(STRATEGIES, MODES, TYPES, (False, True)))
SIZES = [1, 2, 63, 64, 65, 4097, 70_001]


def build(strategy, mode, dtype, op_name, reverse):
    return scangen.SegmentedScan(dtype, operator(op_name), mode=mode, reverse=reverse,
                                 strategy=strategy, section_size=64)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = []
    for strategy, mode, (dtype, op_name), reverse in CASES:
        seg = build(strategy, mode, dtype, op_name, reverse)
        kernels += [seg.kernel("flags", np.dtype(np.uint8)), seg.kernel("keys", np.dtype(np.int32)),
                    seg.kernel("offsets", np.dtype(np.int64))]
    precompile(kernels)


def reference(x, heads, op, mode, reverse):
    if not reverse:
        return segmented_reference(x, heads, op, mode)
    # Reversed: each segment scanned from its last element, operands in array order.
    out = np.empty_like(x)
    starts = sorted({0, *np.flatnonzero(heads).tolist()})
    for first, end in zip(starts, starts[1:] + [x.size]):
        out[first:end] = scangen.reference_scan(x[first:end][::-1], flipped(op), mode)[::-1]
    return out


@pytest.mark.parametrize("strategy,mode,types,reverse", CASES)
def test_flags_offsets_and_keys(gpu, rng, strategy, mode, types, reverse):
    dtype, op_name = types
    op = operator(op_name)
    seg = build(strategy, mode, dtype, op_name, reverse)
    for n in SIZES:
        x = random_input(rng, dtype, op_name, n)
        density = rng.choice([0.0, 0.01, 0.3, 1.0])  # one segment .. single-element segments
        heads = (rng.random(n) < density).astype(np.uint8)
        want = reference(x, heads, op, mode, reverse)
        x_gpu = gpu.to_gpu(x)
        out = poisoned(gpu, rng, n, dtype)
        seg(x_gpu, out, flags=gpu.to_gpu(heads))
        np.testing.assert_array_equal(out.get(), want, err_msg=f"flags n={n}")
        # CSR offsets with empty segments among them (repeated starts)
        starts = np.flatnonzero(heads)
        offsets = np.concatenate([[0], np.repeat(starts[starts > 0], 2), [n]]).astype(np.int64)
        out = poisoned(gpu, rng, n, dtype)
        seg(x_gpu, out, offsets=gpu.to_gpu(offsets))
        np.testing.assert_array_equal(out.get(), want, err_msg=f"offsets n={n}")
        keys = np.cumsum(heads).astype(np.int32) * 7 - 3  # runs of equal keys
        out = poisoned(gpu, rng, n, dtype)
        seg(x_gpu, out, keys=gpu.to_gpu(keys))
        np.testing.assert_array_equal(out.get(), want, err_msg=f"keys n={n}")


def test_call_validation(gpu):
    seg = scangen.SegmentedScan(np.int32)
    x = gpu.to_gpu(np.arange(5, dtype=np.int32))
    with pytest.raises(TypeError, match="exactly one of flags=, offsets= or keys="):
        seg(x)
    with pytest.raises(TypeError, match="exactly one"):
        seg(x, flags=gpu.to_gpu(np.ones(5, bool)), keys=gpu.to_gpu(np.ones(5, np.int32)))
    with pytest.raises(ValueError, match="flags has 4 elements; expected 5"):
        seg(x, flags=gpu.to_gpu(np.ones(4, bool)))
    with pytest.raises(TypeError, match="keys has dtype float32"):
        seg(x, keys=gpu.to_gpu(np.ones(5, np.float32)))
    with pytest.raises(TypeError, match="offsets has dtype uint8; use one of int32, int64"):
        seg(x, offsets=gpu.to_gpu(np.array([0, 5], np.uint8)))
    with pytest.raises(ValueError, match="non-decreasing"):
        seg(x, offsets=gpu.to_gpu(np.array([0, 3, 2, 5], np.int64)))
