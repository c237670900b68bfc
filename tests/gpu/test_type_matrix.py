"""The type matrix on the GPU: each entry point with each element type it documents (the
pairs tests/cpu/test_type_matrix.py renders and compiles), once, on a random odd size,
against a reference written here. Outputs are poisoned and reach past n (or past the
results) into a guard that must stay untouched, byte for byte.

Values are small integers converted to the type (every scalar of a struct holding one), so
every type's results are exact; float types get NaNs where equality matters (Unique and
run-length encoding: every NaN is distinct). One size per pair keeps the compiles to one
module per pair, all nvcc'd in parallel before the first test."""
import functools

import numpy as np
import pytest

import scangen
from scangen.primitives.radix import KEY_DTYPES
from tests.support import (AFFINE_PAIR, ELEMENT_DTYPES, MIXED, assert_scan_equal,
                           digit_offsets, dtype_label, exact_affine_pairs, integers_as,
                           keep_predicate, kind, poison_values, precompile, random_input,
                           run_length_reference, scan_reference, segmented_reference,
                           small_values, sum_operator)

#: Elements past n (or past the results) that every output has and no call may write.
GUARD = 37
ELEMENTS = [pytest.param(d, id=dtype_label(d)) for d in ELEMENT_DTYPES]
KEYS = [pytest.param(d, id=d.name) for d in KEY_DTYPES]


@functools.cache
def built(dtype):
    """The objects of one element type, built once (the precompile fixture nvcc's them)."""
    op, predicate = sum_operator(dtype), keep_predicate(dtype)[0]
    segmented = scangen.SegmentedScan(dtype, op)
    return dict(
        scan=scangen.Scan(dtype, op),
        kernel=scangen.ScanKernel(dtype, op, arguments="const scan_t *x, scan_t *out",
                                  input_expr="x[i]", output_statement="out[i] = prev_item;",
                                  reverse=True, title="type matrix"),
        flags=segmented.kernel("flags", np.dtype(np.bool_)),
        offsets=segmented.kernel("offsets", np.dtype(np.int64)),
        keys=segmented.kernel("keys", np.dtype(np.int32)),
        segmented=segmented,
        select=scangen.Select(dtype, predicate),
        select_flags=scangen.Select(dtype, flags=np.bool_),
        remove_if_flags=scangen.Select(dtype, flags=np.int32, keep=False),
        partition=scangen.Partition(dtype, predicate),
        unique=scangen.Unique(dtype),
        rle=scangen.RunLengthEncode(dtype),
        values=scangen.RadixSort(np.uint32, dtype))


@functools.cache
def built_keys(dtype):
    return dict(sort=scangen.RadixSort(dtype),
                argsort=scangen.RadixSort(dtype, np.int64, _index_values=True),
                offsets=scangen.RadixDigitOffsets(dtype), histogram=scangen.Histogram(dtype))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    things = [t for d in ELEMENT_DTYPES for name, t in built(d).items() if name != "segmented"]
    things += [t for d in KEY_DTYPES for t in built_keys(d).values()]
    precompile([t.modules[0] if isinstance(t, scangen.RadixDigitOffsets)
                else t.module if isinstance(t, (scangen.RadixSort, scangen.Histogram)) else t
                for t in things])


def odd_size(rng):
    """A random odd size past several sections and tiles."""
    return 2 * int(rng.integers(5_000, 40_000)) + 1


def guarded(gpu, rng, dtype, n):
    """A poisoned device array of n + GUARD elements and its host copy."""
    host = poison_values(rng, dtype, n + GUARD)
    return gpu.to_gpu(host), host


def assert_untouched(device, poison, start, what):
    """Elements start.. of a guarded output still hold their poison, byte for byte."""
    got = device.get()[start:].view(np.uint8)
    assert np.array_equal(got, poison[start:].view(np.uint8)), \
        f"{what} wrote past its results (from element {start})"


def assert_equal(got, want, what):
    """Exact equality as numpy's == (a struct field by field: padding is no part of it);
    NaN where the reference has NaN."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if want.dtype.fields is not None or not np.issubdtype(want.dtype, np.number):
        # structs and ml_dtypes' bfloat16: numpy's == finds NaN unequal to itself there, so
        # NaN is matched field by field (as float64, exact for every float type)
        for got_part, want_part in zip(_scalars(got), _scalars(want)):
            np.testing.assert_array_equal(got_part, want_part, err_msg=what)
        return
    np.testing.assert_array_equal(got, want, err_msg=what)


def _scalars(x):
    """Every scalar field of x (recursively through structs; sub-arrays whole), as plain
    numpy arrays: floats as float64."""
    if x.dtype.fields is None:
        base = x.dtype.base if x.dtype.subdtype else x.dtype
        return [x.astype(np.float64) if not np.issubdtype(base, np.number) or
                kind(base) == "f" else x]
    return [part for name in x.dtype.names for part in _scalars(x[name])]


def with_nans(x, where):
    """x with NaN at ``where`` in every float scalar (complex parts, struct fields)."""
    if x.dtype.fields is not None:
        for name in x.dtype.names:
            field = x[name]
            if field.dtype.fields is not None or (field.ndim == 1 and kind(field.dtype) in "fc"):
                x[name] = with_nans(field.copy(), where)
        return x
    if kind(x.dtype) in "fc":
        x[where] = np.nan
    return x


def scan_input(rng, dtype, n):
    """Values whose scans with sum_operator(dtype) are exact (floats: within
    assert_scan_equal's bound)."""
    if dtype == AFFINE_PAIR:
        return exact_affine_pairs(rng, n)
    if dtype == MIXED:
        return small_values(rng, dtype, n, 3)
    return random_input(rng, dtype, "add", n)


def assert_scanned(got, want, dtype, n, what):
    if np.dtype(dtype).fields is not None:
        assert_equal(got, want, what)
    else:
        assert_scan_equal(got, want, dtype, n)


# --- scans -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ELEMENTS)
def test_scans(gpu, rng, dtype):
    """Scan (inclusive) and a ScanKernel (exclusive, reverse) into views of guarded arrays."""
    n, op, objects = odd_size(rng), sum_operator(dtype), built(dtype)
    x = scan_input(rng, dtype, n)
    x_gpu = gpu.to_gpu(x)
    out, poison = guarded(gpu, rng, dtype, n)
    objects["scan"](x_gpu, out[:n])
    assert_scanned(out.get()[:n], scan_reference(x, op), dtype, n, "Scan")
    assert_untouched(out, poison, n, "Scan")
    out, poison = guarded(gpu, rng, dtype, n)
    objects["kernel"](x_gpu, out[:n])
    assert_scanned(out.get()[:n], scan_reference(x, op, "exclusive", reverse=True), dtype, n,
                   "ScanKernel")
    assert_untouched(out, poison, n, "ScanKernel")


@pytest.mark.parametrize("dtype", ELEMENTS)
def test_segmented_scans(gpu, rng, dtype):
    """SegmentedScan by flags, by CSR offsets and by keys, one segmentation."""
    n, op, objects = odd_size(rng), sum_operator(dtype), built(dtype)
    x = scan_input(rng, dtype, n)
    heads = rng.random(n) < 0.01
    want = segmented_reference(x, heads, op, "inclusive")
    offsets = np.concatenate([[0], np.flatnonzero(heads[1:]) + 1, [n]]).astype(np.int64)
    keys = np.cumsum(heads).astype(np.int32) % 3  # a key changes exactly at each head
    x_gpu = gpu.to_gpu(x)
    for form, index in [("flags", heads), ("offsets", offsets), ("keys", keys)]:
        out, poison = guarded(gpu, rng, dtype, n)
        objects["segmented"](x_gpu, out[:n], **{form: gpu.to_gpu(index)})
        assert_scanned(out.get()[:n], want, dtype, n, f"SegmentedScan by {form}")
        assert_untouched(out, poison, n, f"SegmentedScan by {form}")


# --- compactions -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ELEMENTS)
def test_select_and_remove_if(gpu, rng, dtype):
    """Select by a predicate on the element's first scalar and its index, by a bool mask,
    remove_if by an int32 mask; the one-shot select of the same predicate."""
    n, objects = odd_size(rng), built(dtype)
    x = small_values(rng, dtype, n, 4)
    x_gpu = gpu.to_gpu(x)
    predicate, twin = keep_predicate(dtype)
    mask = rng.random(n) < 0.5
    counts = np.where(rng.random(n) < 0.5, rng.integers(-3, 4, n), 0).astype(np.int32)
    for what, call, want in [
            ("Select by a predicate", lambda out: objects["select"](x_gpu, out=out),
             x[twin(x)]),
            ("Select by flags", lambda out: objects["select_flags"](
                x_gpu, gpu.to_gpu(mask), out=out), x[mask]),
            ("remove_if by flags", lambda out: objects["remove_if_flags"](
                x_gpu, gpu.to_gpu(counts), out=out), x[counts == 0])]:
        out, poison = guarded(gpu, rng, dtype, n)
        assert_equal(call(out).get(), want, what)
        assert_untouched(out, poison, want.size, what)
    assert_equal(scangen.select(x_gpu, predicate).get(), x[twin(x)], "select")


@pytest.mark.parametrize("dtype", ELEMENTS)
def test_partition(gpu, rng, dtype):
    n = odd_size(rng)
    x = small_values(rng, dtype, n, 4)
    keep = keep_predicate(dtype)[1](x)
    out, poison = guarded(gpu, rng, dtype, n)
    got, n_true = built(dtype)["partition"](gpu.to_gpu(x), out=out)
    assert n_true == int(keep.sum())
    assert_equal(got.get()[:n], np.concatenate([x[keep], x[~keep]]), "Partition")
    assert_untouched(out, poison, n, "Partition")


def runs_input(rng, dtype, n):
    """Runs of 1 to 6 equal small integers as ``dtype``; NaNs (each its own run) in runs of
    their own in the float types."""
    lengths = rng.integers(1, 7, n)
    x = integers_as(np.repeat(rng.integers(0, 4, n), lengths)[:n], dtype)
    return with_nans(x, rng.choice(n, 5, replace=False))


@pytest.mark.parametrize("dtype", ELEMENTS)
def test_unique_and_run_length_encode(gpu, rng, dtype):
    n, objects = odd_size(rng), built(dtype)
    x = runs_input(rng, dtype, n)
    x_gpu = gpu.to_gpu(x)
    want_values, want_counts = run_length_reference(x)
    out, poison = guarded(gpu, rng, dtype, n)
    assert_equal(objects["unique"](x_gpu, out=out).get(), want_values, "Unique")
    assert_untouched(out, poison, want_values.size, "Unique")
    values, values_poison = guarded(gpu, rng, dtype, n)
    counts, counts_poison = guarded(gpu, rng, np.int64, n)
    got_values, got_counts = objects["rle"](x_gpu, values=values, counts=counts)
    assert_equal(got_values.get(), want_values, "RunLengthEncode values")
    assert_equal(got_counts.get(), want_counts, "RunLengthEncode counts")
    assert_untouched(values, values_poison, want_values.size, "RunLengthEncode values")
    assert_untouched(counts, counts_poison, want_values.size, "RunLengthEncode counts")
    got_values, got_counts = scangen.run_length_encode(x_gpu)
    assert_equal(got_values.get(), want_values, "run_length_encode values")


# --- radix passes and histograms -------------------------------------------------------------

@pytest.mark.parametrize("dtype", ELEMENTS)
def test_radix_sort_carries_values(gpu, rng, dtype):
    n = odd_size(rng)
    keys = rng.integers(0, 1000, n).astype(np.uint32)  # ties: the sort must be stable
    values = small_values(rng, dtype, n, 100)
    got_keys, got_values = built(dtype)["values"](gpu.to_gpu(keys), gpu.to_gpu(values))
    order = np.argsort(keys, kind="stable")
    assert_equal(got_keys.get(), keys[order], "RadixSort keys")
    assert_equal(got_values.get(), values[order], "RadixSort values")


@pytest.mark.parametrize("dtype", KEYS)
def test_radix_passes_and_histogram(gpu, rng, dtype):
    """RadixSort, argsort and RadixDigitOffsets of keys, and Histogram of values, of every
    key dtype."""
    n, objects = odd_size(rng), built_keys(dtype)
    keys = random_input(rng, dtype, "max", n) if kind(dtype) in "iu" \
        else rng.normal(0, 100, n).astype(dtype)
    keys_gpu = gpu.to_gpu(keys)
    assert_equal(objects["sort"](keys_gpu).get(), np.sort(keys, kind="stable"), "RadixSort")
    _, order = objects["argsort"](keys_gpu)
    assert_equal(order.get(), np.argsort(keys, kind="stable"), "argsort")
    assert_equal(scangen.argsort(keys_gpu).get(), np.argsort(keys, kind="stable"), "argsort")
    dest, digit_start = objects["offsets"](keys_gpu, 0)
    want_dest, want_start = digit_offsets(keys, 0, 8)
    assert_equal(dest.get(), want_dest, "RadixDigitOffsets dest")
    assert_equal(digit_start.get(), want_start, "RadixDigitOffsets digit_start")
    values = small_values(rng, dtype, n, 50)
    counts, edges = objects["histogram"](gpu.to_gpu(values), 7, (3, 40))
    want_counts, want_edges = np.histogram(values, 7, (3, 40))
    assert_equal(counts.get(), want_counts, "Histogram counts")
    np.testing.assert_array_equal(edges, want_edges)
