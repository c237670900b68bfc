"""ScanKernel on the GPU: input and output hooks on every strategy and block algorithm,
sizes around every boundary, a non-commutative operator, last_item, and call validation.
References are computed on the CPU with the operator itself."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import ALGORITHMS, STRATEGIES

from tests.support import (AFFINE, COUNTING_CASES, TOTAL_STRATEGIES, assert_guard_untouched,
                           boundary_sizes, check_counting, counting_kernel, guarded_output,
                           marked_source_line, operator, poison_values, precompile,
                           random_input, reference, segmented_reference)

SECTION = 64
ALL_STRATEGIES = [s for s in STRATEGIES]


def compaction(strategy, algorithm=None, section_size=SECTION):
    return scangen.ScanKernel(
        np.int64, "add", arguments="const float *x, float *out, long long *count",
        input_expr="x[i] > 0.5f ? 1 : 0",
        output_statement="if (prev_item != item) out[prev_item] = x[i];"
                         " if (i == n - 1) *count = item;",
        strategy=strategy, algorithm=algorithm, section_size=section_size)


def affine_pairs(strategy, algorithm=None, section_size=SECTION):
    """Composes maps x -> m[i] x + c[i] (non-commutative), writes both prefixes."""
    return scangen.ScanKernel(
        np.uint64, AFFINE,
        arguments="const unsigned *m, const unsigned *c, unsigned long long *inclusive, "
                  "unsigned long long *exclusive, int stride",
        input_expr="((unsigned long long)m[i] << 32) | c[i]",
        output_statement="inclusive[i * stride] = item; exclusive[i] = prev_item;",
        strategy=strategy, algorithm=algorithm, section_size=section_size)


def partition(strategy, algorithm=None, section_size=SECTION):
    """A stable partition: uses last_item (the number of trues) to place the falses."""
    return scangen.ScanKernel(
        np.int32, "add", arguments="const int *x, int *out",
        input_expr="(x[i] & 1) ? 1 : 0",
        output_statement="if (item != prev_item) out[prev_item] = x[i];"
                         " else out[last_item + (i - prev_item)] = x[i];",
        strategy=strategy, algorithm=algorithm, section_size=section_size)


CASES = list(itertools.product(ALL_STRATEGIES, ALGORITHMS))
#: Segmented scans: 1-, 4- and 8-byte values (2-, 8- and 16-byte pairs: packed and split tile
#: status), non-commutative operators among them.
SEGMENTED_TYPES = [("int32", "last_nonzero"), ("uint64", "affine_then"), ("int8", "add"),
                   ("float64", "max")]


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = [make(s, a) for s, a in CASES for make in (compaction, affine_pairs)]
    kernels += [partition(s, a) for s, a in itertools.product(TOTAL_STRATEGIES, ALGORITHMS)]
    kernels += [segmented(s, a, d, operator(o), with_total=s in TOTAL_STRATEGIES)
                for (s, a), (d, o) in itertools.product(CASES, SEGMENTED_TYPES)]
    kernels += [counting_kernel(s, *case) for s in ALL_STRATEGIES for case in COUNTING_CASES]
    precompile(kernels)


@pytest.mark.parametrize("strategy,algorithm", CASES)
def test_compaction(gpu, rng, strategy, algorithm):
    kernel = compaction(strategy, algorithm)
    for n in boundary_sizes(SECTION, rng):
        x = rng.random(n).astype(np.float32)
        out = gpu.to_gpu(poison_values(rng, np.float32, n + 1))
        count = gpu.to_gpu(np.array([-7], np.int64))
        kernel(gpu.to_gpu(x), out, count)
        kept = x[x > 0.5]
        got = out.get()
        if n:
            assert count.get()[0] == kept.size, n
        np.testing.assert_array_equal(got[:kept.size], kept)
        assert np.isnan(got[kept.size:]).all(), "wrote past the kept elements"


@pytest.mark.parametrize("strategy", ALL_STRATEGIES)
@pytest.mark.parametrize("case", COUNTING_CASES, ids=str)
def test_counts(gpu, rng, strategy, case):
    check_counting(gpu, rng, strategy, case)


@pytest.mark.parametrize("strategy,algorithm", CASES)
def test_non_commutative_items_and_prev_items(gpu, rng, strategy, algorithm):
    kernel = affine_pairs(strategy, algorithm)
    for n in boundary_sizes(SECTION, rng):
        m = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) | np.uint32(1)
        c = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        values = (m.astype(np.uint64) << np.uint64(32)) | c.astype(np.uint64)
        stride = 2
        inclusive = guarded_output(gpu, rng, stride * n, np.uint64)
        exclusive = guarded_output(gpu, rng, n, np.uint64)
        kernel(gpu.to_gpu(m), gpu.to_gpu(c), inclusive.out, exclusive.out, stride, n=n)
        strided = assert_guard_untouched(inclusive, "inclusive")
        np.testing.assert_array_equal(strided[::stride], reference(values, AFFINE, "inclusive"))
        np.testing.assert_array_equal(strided[1::stride], inclusive.poison[1:stride * n:stride],
                                      err_msg="wrote between the strided slots")
        np.testing.assert_array_equal(assert_guard_untouched(exclusive, "exclusive"),
                                      reference(values, AFFINE, "exclusive"))


@pytest.mark.parametrize("strategy,algorithm",
                         list(itertools.product(TOTAL_STRATEGIES, ALGORITHMS)))
def test_last_item_partition(gpu, rng, strategy, algorithm):
    kernel = partition(strategy, algorithm)
    for n in boundary_sizes(SECTION, rng):
        x = rng.integers(-1000, 1000, n).astype(np.int32)
        out = guarded_output(gpu, rng, n, np.int32)
        kernel(gpu.to_gpu(x), out.out)
        odd = (x & 1).astype(bool)
        np.testing.assert_array_equal(assert_guard_untouched(out),
                                      np.concatenate([x[odd], x[~odd]]))


@pytest.mark.parametrize("strategy", ALL_STRATEGIES)
def test_default_tile_large_input(gpu, rng, strategy):
    """The default (tuned) tile over a size that takes auto's large-input path."""
    kernel = compaction(strategy, section_size=None)
    n = (1 << 23) + 5
    x = rng.random(n).astype(np.float32)
    out = gpu.empty(n, np.float32)
    count = gpu.to_gpu(np.array([-7], np.int64))
    kernel(gpu.to_gpu(x), out, count)
    kept = x[x > 0.5]
    assert count.get()[0] == kept.size
    np.testing.assert_array_equal(out.get()[:kept.size], kept)


def test_n_smaller_than_the_arrays_and_device_pointers(gpu, rng):
    kernel = compaction("auto")
    x = rng.random(1000).astype(np.float32)
    x_gpu = gpu.to_gpu(x)
    out = gpu.to_gpu(poison_values(rng, np.float32, 1000))
    count = gpu.to_gpu(np.array([-7], np.int64))
    kernel(x_gpu, scangen.DevicePointer(int(out.gpudata), np.float32, out.size),
           scangen.DevicePointer(int(count.gpudata), np.int64, 1), n=300)
    kept = x[:300][x[:300] > 0.5]
    assert count.get()[0] == kept.size
    np.testing.assert_array_equal(out.get()[:kept.size], kept)
    # Only pointers: n defaults to the first one's size.
    count.fill(-7)
    kernel(*(scangen.DevicePointer(int(a.gpudata), a.dtype, a.size) for a in (x_gpu, out)),
           scangen.DevicePointer(int(count.gpudata), np.int64, 1))
    assert count.get()[0] == (x > 0.5).sum()


def test_call_validation(gpu):
    kernel = compaction("auto")
    x = gpu.to_gpu(np.ones(10, np.float32))
    out, count = gpu.empty(10, np.float32), gpu.empty(1, np.int64)
    with pytest.raises(TypeError, match=r"takes 3 argument\(s\) \(x, out, count\).*got 2"):
        kernel(x, out)
    with pytest.raises(ValueError, match="n=11 is larger than the first array argument 'x'"):
        kernel(x, out, count, n=11)
    with pytest.raises(TypeError, match="argument 'x' is declared const float \\*x.*float64"):
        kernel(gpu.to_gpu(np.ones(10, np.float64)), out, count)
    with pytest.raises(TypeError, match="argument 'out'.*needs a device array.*to_gpu"):
        kernel(x, np.ones(10, np.float32), count)
    with pytest.raises(TypeError, match="argument 'x' .*not the int .*DevicePointer"):
        kernel(int(x.gpudata), out, count)
    scalar = affine_pairs("auto")
    m = gpu.to_gpu(np.ones(4, np.uint32))
    with pytest.raises(TypeError, match="argument 'stride'.*needs an int"):
        scalar(m, m, gpu.empty(4, np.uint64), gpu.empty(4, np.uint64), 1.5)
    with pytest.raises(ValueError, match=r"argument 'stride' \(int stride\): 4294967296 "
                                         r"does not fit int32"):
        scalar(m, m, gpu.empty(4, np.uint64), gpu.empty(4, np.uint64), 1 << 32)


def test_user_code_error_names_the_piece(gpu):
    kernel = scangen.ScanKernel(np.int32, "add", arguments="const int *x, int *out",
                                input_expr="x[i]", output_statement="out[i] = itme;")
    with pytest.raises(scangen.ScanCompileError, match="in your output_statement") as info:
        kernel(gpu.to_gpu(np.ones(4, np.int32)), gpu.empty(4, np.int32))
    assert marked_source_line(str(info.value)) == "out[i] = itme;"


def segmented(strategy, algorithm=None, dtype=np.int32, op=scangen.LAST_NONZERO,
              section_size=SECTION, with_total=False):
    """A segmented scan: heads[i] != 0 starts a segment; writes both prefixes (and, where
    the strategy knows it, the last segment's total)."""
    output = "inclusive[i] = item; exclusive[i] = prev_item;"
    if with_total:
        output += " if (i == 0) *total = last_item;"
    return scangen.ScanKernel(
        dtype, op, arguments="const scan_t *x, const unsigned char *heads, scan_t *inclusive, "
                             "scan_t *exclusive, scan_t *total",
        input_expr="x[i]", is_segment_start_expr="heads[i] != 0", output_statement=output,
        strategy=strategy, algorithm=algorithm, section_size=section_size)


@pytest.mark.parametrize("strategy,algorithm", CASES)
@pytest.mark.parametrize("dtype,op_name", SEGMENTED_TYPES)
def test_segmented(gpu, rng, strategy, algorithm, dtype, op_name):
    op = operator(op_name)
    with_total = strategy in TOTAL_STRATEGIES
    kernel = segmented(strategy, algorithm, dtype, op, with_total=with_total)
    for n in boundary_sizes(SECTION, rng):
        x = random_input(rng, dtype, op_name, n)
        density = rng.choice([0.0, 0.001, 0.05, 0.5, 1.0])
        heads = (rng.random(n) < density).astype(np.uint8)
        inclusive, exclusive = (guarded_output(gpu, rng, n, dtype) for _ in range(2))
        total = guarded_output(gpu, rng, 1, dtype)
        kernel(gpu.to_gpu(x), gpu.to_gpu(heads), inclusive.out, exclusive.out, total.out, n=n)
        want = segmented_reference(x, heads, op, "inclusive")
        np.testing.assert_array_equal(assert_guard_untouched(inclusive), want, err_msg=f"n={n}")
        np.testing.assert_array_equal(assert_guard_untouched(exclusive),
                                      segmented_reference(x, heads, op, "exclusive"))
        total = assert_guard_untouched(total, "total")
        if with_total and n:
            np.testing.assert_array_equal(total[0], want[-1])
