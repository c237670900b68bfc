"""Scans of N-D arrays along any axis on the GPU (Scan's, and a ScanKernel's own hooks): the
columns kernel (every axis but the last, and its row tiles along the last) and the rows
kernel (short rows), against tests.support.axis_reference, which scans
each line with the operator itself. Non-commutative operators, struct values (split tile
status), reverse and initial, exclusive, result_dtype, in place, poisoned outputs, and
shapes on both sides of a column tile's width (a warp) and of its rows (section / warp),
with many chunks of rows so that each column's carry crosses tiles."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.arith import WARP_SIZE
from scangen.lines import SHORT_ROW_TILES_MIN

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, assert_scan_equal, axis_reference,
                           exact_affine_pairs, operator, poisoned, precompile, random_input)

#: A small section: two rows per column tile, so a column of a few hundred rows crosses
#: many tiles.
SECTION = 64
ROWS = SECTION // WARP_SIZE
#: (dtype, operator): non-commutative, selecting, floating, and a 16-byte struct whose tile
#: status is split (flags apart from values).
TYPES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "add"),
         ("affine_pairs", "affine_pairs")]
#: (shape, axis): inner sizes below, at and above a warp; lengths below, at and above a
#: tile's rows and many times them; a length of 1; four dimensions; the last axis (rows)
#: and an axis holding every element. Along the last axis, rows shorter than a section
#: (segments of the rows kernel) and rows of a section or more (row tiles of the columns
#: kernel): one tile a row, a last tile of one element, many tiles a row, many rows.
SHAPES = [((3, 5, 7), 0), ((3, 5, 7), 1), ((3, 5, 7), 2), ((2, 301, 33), 1),
          ((ROWS - 1, 31), 0), ((ROWS, 32), 0), ((ROWS + 1, 32), 0), ((1000, 40), 0),
          ((5, 1, 64), 1), ((300, 2, 3), 0), ((7, 3, 2, 37), 1), ((7, 3, 2, 37), 2),
          ((6, 9), -1), ((1, 500, 1), 1), ((4, 1, 1000), 1),
          ((4, SECTION - 1), 1), ((5, SECTION), -1), ((9, SECTION + 1), -1),
          ((3, 2, 3 * SECTION + 8), 2), ((2, 1000), 1), ((300, 2 * SECTION + 1), 1)]


def scan_of(dtype, op_name, mode, **options):
    if op_name == "affine_pairs":
        return scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS, mode=mode, section_size=SECTION,
                            **options)
    return scangen.Scan(dtype, operator(op_name), mode=mode, section_size=SECTION, **options)



def values(rng, dtype, op_name, shape):
    n = int(np.prod(shape))
    if op_name == "affine_pairs":
        return exact_affine_pairs(rng, n).reshape(shape)
    return random_input(rng, dtype, op_name, n).reshape(shape)


def reference_operator(op_name):
    return AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)


def dtype_of(dtype, op_name):
    return AFFINE_PAIR if op_name == "affine_pairs" else np.dtype(dtype)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    scans = []
    for (dtype, op_name), mode in itertools.product(TYPES, scangen.MODES):
        for options in ({}, {"reverse": True}, {"initial": values(
                np.random.default_rng(0), dtype, op_name, (1,))[0]}):
            scan = scan_of(dtype, op_name, mode, **options)
            scans += [scan.columns_kernel, scan.rows_kernel, scan]
    scans += [scangen.Scan(np.float16, "add", result_dtype=np.float32).columns_kernel,
              scangen.Scan(np.float32, "add").columns_kernel]
    precompile(scans)


@pytest.mark.parametrize("types", TYPES)
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_every_axis(gpu, rng, types, mode, reverse):
    dtype, op_name = types
    scan = scan_of(dtype, op_name, mode, reverse=reverse)
    op = reference_operator(op_name)
    for shape, axis in SHAPES:
        x = values(rng, dtype, op_name, shape)
        out = poisoned(gpu, rng, x.size, dtype_of(dtype, op_name)).reshape(shape)
        scan(gpu.to_gpu(x), out=out, axis=axis)
        want = axis_reference(x, op, mode, axis, reverse=reverse)
        assert_scan_equal(out.get().ravel(), want.ravel(), dtype_of(dtype, op_name), x.size,
                          op=op, reverse=reverse)


@pytest.mark.parametrize("types", TYPES)
@pytest.mark.parametrize("mode", scangen.MODES)
def test_every_line_starts_from_initial(gpu, rng, types, mode):
    dtype, op_name = types
    initial = values(np.random.default_rng(0), dtype, op_name, (1,))[0]
    scan = scan_of(dtype, op_name, mode, initial=initial)
    op = reference_operator(op_name)
    other = values(rng, dtype, op_name, (1,))[0]
    for (shape, axis), start in itertools.product(SHAPES[:6] + SHAPES[-4:], (None, other)):
        x = values(rng, dtype, op_name, shape)
        got = scan(gpu.to_gpu(x), axis=axis, initial=start).get()
        want = axis_reference(x, op, mode, axis,
                              initial=initial if start is None else start)
        assert_scan_equal(got.ravel(), want.ravel(), dtype_of(dtype, op_name), x.size, op=op)


def test_a_scan_kernel_along_every_axis(gpu, rng):
    """A ScanKernel's own hooks along an axis: a non-commutative operator, a scalar
    argument in the input, an initial value given per call (or the constructor's), and
    ``i`` the index into the C-contiguous arrays, written beside the scan."""
    op = operator("affine_then")
    start, other = values(rng, "uint64", "affine_then", (2,))
    kernel = scangen.ScanKernel(
        np.uint64, op, arguments="const unsigned long long *x, unsigned long long *out, "
        "long long *at, unsigned long long shift", input_expr="x[i] ^ shift",
        output_statement="out[i] = item; at[i] = i;", initial=start, section_size=SECTION)
    precompile([kernel.lines.columns_kernel, kernel.lines.rows_kernel, kernel])
    shift = np.uint64(0x5A5A)
    for (shape, axis), given in itertools.product(SHAPES, (None, other)):
        x = values(rng, "uint64", "affine_then", shape)
        out = poisoned(gpu, rng, x.size, np.uint64).reshape(shape)
        at = poisoned(gpu, rng, x.size, np.int64).reshape(shape)
        kernel(gpu.to_gpu(x), out, at, shift, axis=axis, initial=given)
        want = axis_reference(x ^ shift, op, "inclusive", axis,
                              initial=start if given is None else given)
        np.testing.assert_array_equal(out.get(), want, err_msg=f"{shape} along {axis}")
        np.testing.assert_array_equal(at.get().ravel(), np.arange(x.size))


def expected_places(shape, axis, reverse):
    """(step, line) of each element: its place in its line's scan (its index along
    ``axis``, counted from the line's end for a reverse scan) and its line's index (its
    index with ``axis`` taken out)."""
    along = np.indices(shape)[axis]
    rest = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
    lines = np.expand_dims(np.arange(int(np.prod(rest))).reshape(rest), axis)
    return shape[axis] - 1 - along if reverse else along, np.broadcast_to(lines, shape)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_output_sees_each_elements_step_and_line(gpu, rng, reverse):
    """``step`` and ``line`` in the output statement, in every kernel of lines (a small
    section: column tiles, row tiles and segmented rows; the tuned one: rows in tiles of a
    smaller section, and segmented rows whose lanes find their runs' heads from one
    remainder, in either direction) and in the 1-D kernel of each strategy, with a
    non-commutative scan beside them."""
    op = operator("affine_then")
    made = dict(arguments="const unsigned long long *x, unsigned long long *out, "
                "long long *steps, long long *lines", input_expr="x[i]",
                output_statement="out[i] = item; steps[i] = step; lines[i] = line;",
                reverse=reverse)
    small = scangen.ScanKernel(np.uint64, op, section_size=SECTION, **made)
    tuned = scangen.ScanKernel(np.uint64, op, **made)
    precompile([small.lines.columns_kernel, small.lines.rows_kernel, small,
                tuned.lines.row_tiles_kernel(1500), tuned.lines.rows_kernel])
    cases = [(small, shape, axis) for shape, axis in SHAPES]
    cases += [(tuned, shape, axis) for shape, axis in [((6, 1500), 1), ((4, 2, 1025), 2),
                                                       ((9, 300), 1), ((7, 5, 600), -1)]]
    for kernel, shape, axis in cases:
        x = values(rng, "uint64", "affine_then", shape)
        out = poisoned(gpu, rng, x.size, np.uint64).reshape(shape)
        steps = poisoned(gpu, rng, x.size, np.int64).reshape(shape)
        lines = poisoned(gpu, rng, x.size, np.int64).reshape(shape)
        kernel(gpu.to_gpu(x), out, steps, lines, axis=axis)
        want_steps, want_lines = expected_places(shape, axis, reverse)
        np.testing.assert_array_equal(steps.get(), want_steps, err_msg=f"{shape} along {axis}")
        np.testing.assert_array_equal(lines.get(), want_lines, err_msg=f"{shape} along {axis}")
        np.testing.assert_array_equal(out.get(), axis_reference(x, op, "inclusive", axis,
                                                                reverse=reverse))
    for strategy, n in itertools.product(scangen.STRATEGIES, (SECTION - 1, 5 * SECTION + 3)):
        kernel = scangen.ScanKernel(np.uint64, op, section_size=SECTION, strategy=strategy,
                                    **made)
        x = values(rng, "uint64", "affine_then", (n,))
        steps, lines = poisoned(gpu, rng, n, np.int64), poisoned(gpu, rng, n, np.int64)
        kernel(gpu.to_gpu(x), poisoned(gpu, rng, n, np.uint64), steps, lines)
        np.testing.assert_array_equal(steps.get(), expected_places((n,), 0, reverse)[0],
                                      err_msg=f"{strategy} at {n}")
        np.testing.assert_array_equal(lines.get(), 0, err_msg=f"{strategy} at {n}")


def test_in_place_and_shapes_in_turn(gpu, rng):
    """In place along the first axis, and one Scan called with shapes in turn (its status
    entries from an earlier call must read as stale, whatever the layout)."""
    scan = scangen.Scan(np.uint64, operator("affine_then"), section_size=SECTION)
    op = operator("affine_then")
    for shape, axis in [((500, 40), 0), ((40, 500), 0), ((500, 40), 0), ((3, 200, 50), 1),
                        ((40, 500), 1), ((500, 40), 0), ((7, 300), 1)]:
        x = values(rng, "uint64", "affine_then", shape)
        device = gpu.to_gpu(x)
        assert scan(device, out=device, axis=axis) is device
        np.testing.assert_array_equal(device.get(), axis_reference(x, op, "inclusive", axis))


def test_default_section_and_result_dtype(gpu, rng):
    """The tuned section (many rows per tile; rows of several tiles along the last axis,
    and shorter rows one to a smaller tile, or segments), and float16 read into a float32
    scan."""
    for shape, axis in [((8, 700, 96), 1), ((3, 2, 9000), 2), ((6, 1000), 1), ((5, 600), -1),
                        ((4, 2, 1025), 2), ((9, 300), 1), ((5, SHORT_ROW_TILES_MIN), 1)]:
        x = random_input(rng, np.float32, "add", int(np.prod(shape))).reshape(shape)
        got = scangen.Scan(np.float32, "add")(gpu.to_gpu(x), axis=axis).get()
        assert_scan_equal(got.ravel(),
                          axis_reference(x, operator("add"), "inclusive", axis).ravel(),
                          np.float32, x.size, op="add")
    half = random_input(rng, np.float16, "add", 900 * 70).reshape(900, 70)
    scan = scangen.Scan(np.float16, "add", result_dtype=np.float32)
    got = scan(gpu.to_gpu(half), axis=0).get()
    assert got.dtype == np.float32
    want = axis_reference(half.astype(np.float32), operator("add"), "inclusive", 0)
    assert_scan_equal(got.ravel(), want.ravel(), np.float32, half.size, op="add")


@pytest.mark.parametrize("dtype,op_name,tuning", [
    ("int32", "last_nonzero", None),  # 4 bytes: the table's limit on a thread's rows
    ("uint64", "affine_then", scangen.Tuning(columns_max_items_per_thread=2)),
    ("float64", "add", scangen.Tuning(columns_max_items_per_thread=3))])
def test_column_tiles_of_a_limited_rows_a_thread(gpu, rng, dtype, op_name, tuning):
    """Column tiles whose threads take fewer rows than the spec's items per thread (the
    tuned tile, or a named limit, 3 not a power of two): columns on both sides of the
    tile's rows and many times them, with a non-commutative operator."""
    op = operator(op_name)
    scans = {reverse: scangen.Scan(dtype, op, tuning=tuning, reverse=reverse)
             for reverse in (False, True)}
    spec = scans[False].columns_kernel.spec
    assert spec.column_items_per_thread < spec.items_per_thread
    rows = spec.block_size // WARP_SIZE * spec.column_items_per_thread
    for shape, axis in [((rows - 1, 33), 0), ((rows, 32), 0), ((2, rows + 1, 31), 1),
                        ((7 * rows + 5, 40), 0), ((3, 2 * rows, 70), 1)]:
        for reverse, scan in scans.items():
            x = values(rng, dtype, op_name, shape)
            out = poisoned(gpu, rng, x.size, np.dtype(dtype)).reshape(shape)
            scan(gpu.to_gpu(x), out=out, axis=axis)
            want = axis_reference(x, op, "inclusive", axis, reverse=reverse)
            assert_scan_equal(out.get().ravel(), want.ravel(), np.dtype(dtype), x.size, op=op,
                              reverse=reverse)


def test_one_shot_functions_take_an_axis(gpu, rng):
    x = random_input(rng, np.int32, "add", 4 * 300 * 5).reshape(4, 300, 5)
    for axis in (0, 1, 2, -3):
        np.testing.assert_array_equal(scangen.inclusive_scan(x, axis=axis),
                                      np.cumsum(x, axis=axis, dtype=np.int32))
        got = scangen.exclusive_scan(gpu.to_gpu(x), "max", axis=axis).get()
        np.testing.assert_array_equal(got, axis_reference(x, operator("max"), "exclusive",
                                                          axis))


def test_empty_arrays(gpu):
    scan = scangen.Scan(np.float32)
    for shape, axis in [((0, 5), 0), ((5, 0), 0), ((3, 0, 4), 1), ((3, 0, 4), 0)]:
        x = gpu.to_gpu(np.zeros(shape, np.float32))
        assert scan(x, axis=axis).shape == shape


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "float32", "float64",
                                   "complex64"])
def test_numpy_cumulative_functions(gpu, rng, dtype):
    """cumsum, cumprod, cummax and cummin against numpy's own, on host and device arrays:
    numpy's result types (narrow integers widen) and axes (cumsum: None flattens)."""
    x = random_input(rng, dtype, "add", 4 * 70 * 3).reshape(4, 70, 3)
    small = random_input(rng, dtype, "mul", x.size).reshape(x.shape)
    for axis in (None, 0, 1, -1):
        for name, values, op in [("cumsum", x, "add"), ("cumprod", small, "mul")]:
            want = getattr(np, name)(values, axis=axis)
            for got in (getattr(scangen, name)(values, axis=axis),
                        getattr(scangen, name)(gpu.to_gpu(values), axis=axis).get()):
                assert got.dtype == want.dtype and got.shape == want.shape, (name, axis)
                assert_scan_equal(got.ravel(), want.ravel(), want.dtype, values.size, op=op)
        if np.dtype(dtype).kind == "c":
            continue
        for name, ufunc in [("cummax", np.maximum), ("cummin", np.minimum)]:
            want = ufunc.accumulate(x.ravel() if axis is None else x, axis=axis or 0)
            got = getattr(scangen, name)(gpu.to_gpu(x), axis=axis).get()
            np.testing.assert_array_equal(got, want, err_msg=f"{name} axis={axis}")
    if np.dtype(dtype).kind != "c":  # max and min take real values only
        np.testing.assert_array_equal(scangen.cummax(x), np.maximum.accumulate(x))
    wide = scangen.cumsum(x, axis=1, dtype=np.complex128)
    assert wide.dtype == np.complex128
    assert_scan_equal(wide.ravel(), np.cumsum(x, axis=1, dtype=np.complex128).ravel(),
                      np.complex128, x.size, op="add")


def test_a_prepared_scan_along_every_axis(gpu, rng):
    """Scan.prepare along each axis: every call scans the input's contents at that time
    (written between calls), through the same kernels as a call along that axis."""
    op = operator("affine_then")
    scan = scangen.Scan(np.uint64, op, section_size=SECTION)
    for shape, axis in SHAPES:
        x = gpu.to_gpu(values(rng, "uint64", "affine_then", shape))
        out = poisoned(gpu, rng, x.size, np.uint64).reshape(shape)
        run = scan.prepare(x, out, axis=axis)
        for _ in range(2):
            host = values(rng, "uint64", "affine_then", shape)
            x.set(host)
            assert run() is out
            np.testing.assert_array_equal(out.get(), axis_reference(host, op, "inclusive", axis),
                                          err_msg=f"{shape} along {axis}")
