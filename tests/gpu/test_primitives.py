"""The compaction primitives on the GPU against numpy: random data, duplicates, all-equal,
all-kept and none-kept inputs, sizes around section boundaries, one select past 2^31;
flatnonzero of every dtype family against numpy.flatnonzero."""
import numpy as np
import pytest

import scangen
from scangen import compile as scan_compile

from tests.support import (BFLOAT16, assert_guard_untouched, guarded_output, poison_values,
                           precompile, run_length_reference, zeros_and_others)

DTYPES = ["uint8", "int32", "int64", "float32", "float64"]
#: Around the default sections (4096 and 2048 elements) and the auto threshold.
SIZES = [0, 1, 2, 2047, 2048, 2049, 4095, 4096, 4097, 3 * 4096 + 5, 1_000_003, 5_000_011]
PATTERNS = ["random", "duplicates", "all_equal", "all_kept", "none_kept"]


def data(rng, dtype, n, pattern):
    dtype = np.dtype(dtype)
    if pattern == "all_equal":
        return np.full(n, 3, dtype)
    if pattern == "duplicates":  # long runs of a few values: what unique and RLE meet
        return np.repeat(rng.integers(0, 4, n // 5 + 1), 5)[:n].astype(dtype)
    if pattern == "all_kept":
        return (rng.integers(1, 100, n)).astype(dtype)
    if pattern == "none_kept":
        return (-rng.integers(1, 100, n)).astype(dtype) if dtype.kind != "u" \
            else np.zeros(n, dtype)
    if dtype.kind == "f":
        return rng.normal(size=n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(dtype)


#: Selects by masks of each width, through reduce_then_scan, whose first pass counts a
#: block's sections (Tuning.mask_sections_per_block of them) from 16-byte loads where they
#: are whole and the mask 16-byte aligned (ScanModule.counted_mask), any other by ballots.
MASK_SELECTS = [(np.bool_, True, 4), (np.uint8, False, 1), (np.int16, True, 3),
                (np.int32, False, 4), (np.int64, True, 16)]


#: flatnonzero's families: masks (bool, integers), floats, 16-bit floats, complex.
NONZERO_DTYPES = [np.dtype(d) for d in ("bool", "int8", "uint16", "int64", "float16", "float32",
                                        "float64", "complex64", "complex128")] \
    + ([BFLOAT16] if BFLOAT16 is not None else [])


def mask_select(flags, keep, per_block):
    return scangen.Select(np.float32, flags=flags, keep=keep, strategy="reduce_then_scan",
                          tuning=scangen.Tuning(mask_sections_per_block=per_block))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    primitives = []
    for dtype in DTYPES:
        primitives += [scangen.Select(dtype, "x > 0"), scangen.Select(dtype, "x > 0", keep=False),
                       scangen.Select(dtype, flags=np.bool_), scangen.Select(dtype, flags=np.int32),
                       scangen.Partition(dtype, "x > 0"), scangen.Unique(dtype),
                       scangen.RunLengthEncode(dtype)]
    primitives += [mask_select(*case) for case in MASK_SELECTS]
    primitives += [scangen.FlatNonzero(dtype) for dtype in NONZERO_DTYPES]
    precompile([p.kernel for p in primitives]
               + [k for p in primitives if isinstance(p, scangen.RunLengthEncode)
                  for k in p.wide_kernels()])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_select_remove_if_and_flags(gpu, rng, dtype, pattern):
    for n in SIZES:
        x = data(rng, dtype, n, pattern)
        x_gpu = gpu.to_gpu(x)
        np.testing.assert_array_equal(scangen.select(x_gpu, "x > 0").get(), x[x > 0])
        np.testing.assert_array_equal(scangen.remove_if(x_gpu, "x > 0").get(), x[~(x > 0)])
        mask = rng.random(n) < 0.5
        np.testing.assert_array_equal(scangen.select(x_gpu, flags=gpu.to_gpu(mask)).get(),
                                      x[mask])
        counts = rng.integers(-2, 3, n).astype(np.int32)  # nonzero keeps
        np.testing.assert_array_equal(scangen.select(x_gpu, flags=gpu.to_gpu(counts)).get(),
                                      x[counts != 0])


@pytest.mark.parametrize("flags,keep,per_block", MASK_SELECTS, ids=str)
def test_select_by_masks_through_reduce_then_scan(gpu, rng, flags, keep, per_block):
    select = mask_select(flags, keep, per_block)
    assert select.kernel.scan_module.counted_mask[::2] == ("flags", keep)
    assert select.kernel.scan_module.counted_sections_per_block == per_block
    for n in SIZES + [2048 * 301 + 17]:
        x = rng.random(n + 1).astype(np.float32)
        share = rng.choice([0.0, 0.5, 1.0])  # none, half or all of the mask nonzero
        if np.dtype(flags) == np.bool_:
            mask = rng.random(n + 1) < share
        else:  # any nonzero value counts, the type's extremes too
            info = np.iinfo(flags)
            nonzero = rng.choice([1, 2, info.min or 255, info.max], n + 1).astype(flags)
            mask = np.where(rng.random(n + 1) < share, nonzero, 0).astype(flags)
        x_gpu, mask_gpu = gpu.to_gpu(x), gpu.to_gpu(mask)
        # a view one element in is not 16-byte aligned: its sections are counted by ballots
        for offset in (0, 1):
            kept = x[offset:offset + n][(mask[offset:offset + n] != 0) == keep]
            out = guarded_output(gpu, rng, n, np.float32)  # NaN poison
            got = select(x_gpu[offset:offset + n], mask_gpu[offset:offset + n], out=out.out)
            np.testing.assert_array_equal(got.get(), kept, err_msg=f"n={n} offset={offset}")
            written = assert_guard_untouched(out)
            assert np.isnan(written[kept.size:]).all(), f"wrote past the kept, n={n}"


def partitioned(x, keep, reverse_rejected):
    """numpy's partition of x: the kept in order, then the others in order or reversed."""
    rejected = x[~keep]
    return np.concatenate([x[keep], rejected[::-1] if reverse_rejected else rejected])


@pytest.mark.parametrize("reverse_rejected", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_partition(gpu, rng, dtype, pattern, reverse_rejected):
    for n in SIZES:
        x = data(rng, dtype, n, pattern)
        out, n_true = scangen.partition(gpu.to_gpu(x), "x > 0",
                                        reverse_rejected=reverse_rejected)
        assert n_true == int((x > 0).sum())
        np.testing.assert_array_equal(out.get(), partitioned(x, x > 0, reverse_rejected))


@pytest.mark.parametrize("strategy", ["auto", "decoupled_lookback", "chained",
                                      "reduce_then_scan", "hierarchical"])
def test_partition_with_the_rejected_reversed_on_every_strategy(gpu, rng, strategy):
    """Each element's place known in one pass: every strategy, the single-pass ones
    included, on both sides of tiles and past many."""
    part = scangen.Partition("int32", "x % 3 != 0", reverse_rejected=True, strategy=strategy)
    for n in [1, 2047, 2048, 2049, 100_003, (1 << 22) + 7]:
        x = data(rng, "int32", n, "random")
        out = guarded_output(gpu, rng, n, np.int32)
        got, n_true = part(gpu.to_gpu(x), out=out.out)
        assert n_true == int((x % 3 != 0).sum())
        np.testing.assert_array_equal(assert_guard_untouched(out),
                                      partitioned(x, x % 3 != 0, True), err_msg=f"n={n}")


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_partition_into_out_on_a_stream_count_on_device(gpu, rng, dtype):
    """The reusable Partition: out= (written in place, nothing past n), stream=, and the
    count of trues left on the device."""
    import pycuda.driver as driver

    part = scangen.Partition(dtype, "x > 0")
    for n in [0, 1, 2047, 2049, 4097, 1_000_003]:
        x = data(rng, dtype, n, "random")
        want = np.concatenate([x[x > 0], x[~(x > 0)]])
        out = guarded_output(gpu, rng, n, dtype)
        got, n_true = part(gpu.to_gpu(x), out=out.out)
        assert got is out.out and n_true == int((x > 0).sum())
        np.testing.assert_array_equal(assert_guard_untouched(out), want, err_msg=f"n={n}")
        out = guarded_output(gpu, rng, n, dtype)
        stream = driver.Stream()
        got, count = part(gpu.to_gpu(x), out=out.out, stream=stream, count_on_device=True)
        stream.synchronize()
        assert got is out.out and count.dtype == np.int64
        assert int(count.get()[0]) == int((x > 0).sum())
        np.testing.assert_array_equal(assert_guard_untouched(out), want, err_msg=f"n={n}")


@pytest.mark.parametrize("dtype,bins", [("float32", 100), ("float64", 7), ("int32", 1000),
                                        ("uint8", 3)])
def test_histogram_class_on_a_stream(gpu, rng, dtype, bins):
    """scangen.Histogram, made once and called on several sizes and ranges on a stream,
    against numpy.histogram (values outside the range and on its ends among them)."""
    import pycuda.driver as driver

    histogram = scangen.Histogram(dtype)
    for n, value_range in [(0, (0.0, 1.0)), (1, (-3.0, 3.0)), (4097, (-2.0, 2.5)),
                           (1_000_003, (-50.0, 200.0))]:
        if np.dtype(dtype).kind == "f":
            x = rng.normal(0, 2, n).astype(dtype)
            x[: n // 100] = value_range[1]  # the last bin includes its upper edge
        else:
            x = rng.integers(0, 256 if dtype == "uint8" else 300, n).astype(dtype)
        stream = driver.Stream()
        counts, edges = histogram(gpu.to_gpu(x), bins, value_range, stream=stream)
        stream.synchronize()
        want_counts, want_edges = np.histogram(x, bins, value_range)
        assert counts.dtype == np.int64
        np.testing.assert_array_equal(counts.get(), want_counts, err_msg=f"n={n}")
        np.testing.assert_array_equal(edges, want_edges)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_unique_and_run_length_encode(gpu, rng, dtype, pattern):
    for n in SIZES:
        x = np.sort(data(rng, dtype, n, pattern)) if pattern == "random" else \
            data(rng, dtype, n, pattern)
        heads = np.ones(n, bool)
        heads[1:] = x[1:] != x[:-1]
        np.testing.assert_array_equal(scangen.unique(gpu.to_gpu(x)).get(), x[heads])
        values, counts = scangen.run_length_encode(gpu.to_gpu(x))
        want_values, want_counts = run_length_reference(x)
        np.testing.assert_array_equal(values.get(), want_values)
        np.testing.assert_array_equal(counts.get(), want_counts)
        assert counts.dtype == np.int64


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_run_length_encode_in_two_kernels(gpu, rng, monkeypatch, dtype):
    """The two kernels taken from 2^32 elements (heads with their starts, then the
    lengths), at small sizes; count on the device too."""
    from scangen.primitives import compaction

    monkeypatch.setattr(compaction, "_ONE_PASS_BELOW", 0)
    rle = scangen.RunLengthEncode(dtype)
    for n in [1, 4097, 1_000_003]:
        x = np.repeat(rng.integers(0, 3, n), rng.integers(1, 6, n))[:n].astype(dtype)
        values, counts = rle(gpu.to_gpu(x))
        want_values, want_counts = run_length_reference(x)
        np.testing.assert_array_equal(values.get(), want_values)
        np.testing.assert_array_equal(counts.get(), want_counts)
        values, counts, count = rle(gpu.to_gpu(x), count_on_device=True)
        runs = int(count.get()[0])
        assert runs == want_values.size
        np.testing.assert_array_equal(counts.get()[:runs], want_counts)


def test_nan_is_distinct_in_unique(gpu):
    x = np.array([1.0, np.nan, np.nan, 2.0, 2.0], np.float32)
    np.testing.assert_array_equal(scangen.unique(gpu.to_gpu(x)).get(),
                                  np.array([1.0, np.nan, np.nan, 2.0], np.float32))


def test_out_count_on_device_and_stream(gpu, rng):
    import pycuda.driver as driver

    sel = scangen.Select(np.float32, "x > 0.25f")
    x = rng.random(100_003).astype(np.float32)
    out = gpu.to_gpu(poison_values(rng, np.float32, 100_003))
    stream = driver.Stream()
    got, count = sel(gpu.to_gpu(x), out=out, stream=stream, count_on_device=True)
    stream.synchronize()
    kept = x[x > 0.25]
    assert got is out and count.get()[0] == kept.size
    np.testing.assert_array_equal(out.get()[:kept.size], kept)
    assert np.isnan(out.get()[kept.size:]).all()


@pytest.mark.parametrize("n", [0, 1, 4097, 1_000_003])
def test_run_length_encode_into_given_outputs(gpu, rng, n):
    """values= and counts= are written up to the number of runs, nothing past them; the
    results are those arrays (views of their first runs elements without count_on_device)."""
    rle = scangen.RunLengthEncode(np.int64)
    x = np.repeat(rng.integers(-5, 5, n), rng.integers(1, 7, n))[:n]
    want_values, want_counts = run_length_reference(x)
    runs = want_values.size
    values = gpu.to_gpu(np.full(n + 3, -7, np.int64))
    counts = gpu.to_gpu(np.full(n + 3, -7, np.int64))
    got_values, got_counts = rle(gpu.to_gpu(x), values=values, counts=counts)
    assert got_values.gpudata == values.gpudata and got_counts.gpudata == counts.gpudata
    np.testing.assert_array_equal(got_values.get(), want_values)
    np.testing.assert_array_equal(got_counts.get(), want_counts)
    assert (values.get()[runs:] == -7).all() and (counts.get()[runs:] == -7).all()
    same_values, same_counts, count = rle(gpu.to_gpu(x), values=values, counts=counts,
                                          count_on_device=True)
    assert same_values is values and same_counts is counts and count.get()[0] == runs


def test_run_length_encode_refuses_bad_outputs(gpu):
    rle = scangen.RunLengthEncode(np.float32)
    x = gpu.to_gpu(np.arange(10, dtype=np.float32))
    with pytest.raises(ValueError, match="values has 5 elements; it needs room for 10"):
        rle(x, values=gpu.empty(5, np.float32))
    with pytest.raises(TypeError, match="counts"):
        rle(x, counts=gpu.empty(10, np.int32))
    with pytest.raises(ValueError, match="values overlaps x"):
        rle(x, values=x)
    both = gpu.empty(30, np.int64)
    with pytest.raises(ValueError, match="values overlaps counts"):
        scangen.RunLengthEncode(np.int64)(gpu.to_gpu(np.arange(10)), values=both[:10],
                                          counts=both[5:15])


@pytest.mark.parametrize("n", [0, 1, 4095, 100_003, 1_000_000])
def test_run_length_encode_count_on_device(gpu, rng, n):
    """No host read: values and counts have n elements, the first `count` of them the
    runs'."""
    import pycuda.driver as driver

    rle = scangen.RunLengthEncode(np.float32)
    x = np.repeat(rng.random(n).astype(np.float32), rng.integers(1, 9, n))[:n]
    stream = driver.Stream()
    values, counts, count = rle(gpu.to_gpu(x), stream=stream, count_on_device=True)
    # a second call on the same object and another stream before the first is read
    other = np.repeat(rng.random(n).astype(np.float32), 3)[:n]
    values2, counts2, count2 = rle(gpu.to_gpu(other), stream=driver.Stream(),
                                   count_on_device=True)
    stream.synchronize()
    driver.Context.synchronize()
    for data, v, c, k in ((x, values, counts, count), (other, values2, counts2, count2)):
        want_values, want_counts = run_length_reference(data)
        runs = int(k.get()[0])
        assert runs == want_values.size and v.size == n and c.size == n
        np.testing.assert_array_equal(v.get()[:runs], want_values)
        np.testing.assert_array_equal(c.get()[:runs], want_counts)


def test_one_shot_functions_compile_once(gpu, rng):
    x = gpu.to_gpu(rng.random(1000).astype(np.float32))
    scangen.select(x, "x > 0.123f")
    before = scan_compile.compile_count
    for _ in range(3):
        scangen.select(x, "x > 0.123f")
    assert scan_compile.compile_count == before


def test_call_validation(gpu):
    sel = scangen.Select(np.float32, flags=np.bool_)
    x = gpu.to_gpu(np.ones(10, np.float32))
    with pytest.raises(TypeError, match="call it as sel\\(x, flags\\)"):
        sel(x)
    with pytest.raises(ValueError, match="flags has 9 elements; expected 10"):
        sel(x, gpu.to_gpu(np.ones(9, bool)))
    with pytest.raises(TypeError, match="flags has dtype uint8; expected bool"):
        sel(x, gpu.to_gpu(np.ones(10, np.uint8)))
    with pytest.raises(TypeError, match="x has dtype float64; expected float32"):
        sel(gpu.to_gpu(np.ones(10)), gpu.to_gpu(np.ones(10, bool)))
    with pytest.raises(TypeError, match="x must be a pycuda GPUArray"):
        sel(np.ones(10, np.float32), gpu.to_gpu(np.ones(10, bool)))
    with pytest.raises(ValueError, match="out has 5 elements; it needs room for 10"):
        scangen.Select(np.float32, "x > 0")(x, out=gpu.empty(5, np.float32))
    with pytest.raises(ValueError, match="out overlaps x; compaction cannot work in place"):
        scangen.Select(np.float32, "x > 0")(x, out=x)
    with pytest.raises(ValueError, match="out overlaps x"):
        scangen.Unique(np.float32)(x, out=x)
    mask = gpu.to_gpu(np.ones(40, np.uint8))  # out over the flags' bytes
    with pytest.raises(ValueError, match="out overlaps flags"):
        scangen.Select(np.uint8, flags=np.uint8)(mask[:10], mask[20:30], out=mask[25:])


def test_select_past_2_to_the_31(gpu):
    """64-bit counts and indices: one-byte elements past 2^31, checked in full."""
    import pycuda.driver as driver

    n = (1 << 31) + 4099
    if driver.mem_get_info()[0] < 3 * n:
        pytest.fail("not enough free device memory for the 2^31-element test")
    rng = np.random.default_rng(31)
    x = np.frombuffer(rng.bytes(n), dtype=np.uint8)
    got = scangen.select(gpu.to_gpu(x), "x >= 100").get()
    want = x[x >= 100]
    assert got.size == want.size
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", NONZERO_DTYPES, ids=str)
def test_flatnonzero(gpu, rng, dtype):
    """The indices of the nonzero elements (NaN nonzero, -0.0 zero, complex by either part)
    at sizes around the sections, into a poisoned out= with a guard past it: nothing is
    written past the count; then the one-shot function on the device and on the host."""
    nz = scangen.FlatNonzero(dtype)
    section = nz.kernel.spec.section_size
    for n in SIZES + [section - 1, section + 1, section * section + 1]:
        x = zeros_and_others(rng, dtype, n)
        want = np.flatnonzero(x)
        x_gpu = gpu.to_gpu(x)
        out = guarded_output(gpu, rng, n, np.int64)
        got = nz(x_gpu, out=out.out)
        np.testing.assert_array_equal(got.get(), want, err_msg=f"n={n}")
        written = assert_guard_untouched(out, "flatnonzero's out")
        np.testing.assert_array_equal(written[want.size:], out.poison[want.size:n],
                                      err_msg=f"n={n}: written past the count")
        if n in (0, 1, 4097, 1_000_003):
            np.testing.assert_array_equal(scangen.flatnonzero(x_gpu).get(), want)
            np.testing.assert_array_equal(scangen.flatnonzero(x), want)  # host in, host out


@pytest.mark.parametrize("dtype", [np.dtype(np.bool_), np.dtype(np.float32)], ids=str)
@pytest.mark.parametrize("strategy", scangen.STRATEGIES)
def test_flatnonzero_on_every_strategy_with_the_count_on_device(gpu, rng, dtype, strategy):
    """A mask and a float on each strategy (a mask is counted 16 bytes a lane by
    reduce_then_scan's first pass), on a stream, the count left on the device."""
    import pycuda.driver as driver

    nz = scangen.FlatNonzero(dtype, strategy=strategy)
    stream = driver.Stream()
    for n in [0, 1, 2047, 2049, 3 * 2048 + 5, 1_000_003, (1 << 25) + 3]:
        x = zeros_and_others(rng, dtype, n)
        want = np.flatnonzero(x)
        out = guarded_output(gpu, rng, n, np.int64)
        got, count = nz(gpu.to_gpu(x), out=out.out, stream=stream, count_on_device=True)
        stream.synchronize()
        assert got is out.out and count.dtype == np.int64
        assert int(count.get()[0]) == want.size, f"n={n}"
        np.testing.assert_array_equal(assert_guard_untouched(out)[:want.size], want,
                                      err_msg=f"n={n}")


def test_flatnonzero_refuses_bad_arrays(gpu):
    nz = scangen.FlatNonzero(np.float32)
    x = gpu.to_gpu(np.ones(10, np.float32))
    with pytest.raises(TypeError, match="out has dtype float32; expected int64"):
        nz(x, out=gpu.empty(10, np.float32))
    with pytest.raises(ValueError, match="out has 5 elements; it needs room for 10"):
        nz(x, out=gpu.empty(5, np.int64))
    with pytest.raises(TypeError, match="x has dtype float64; expected float32"):
        nz(gpu.to_gpu(np.ones(10)))
