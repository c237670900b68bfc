"""Scans along an axis without a GPU: which kernel each shape and axis takes, the columns
kernel's plan (tiles, status entries, arguments), and the errors for a bad axis or a
columns kernel asked for what it cannot do."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.arith import WARP_SIZE, ceil_div
from scangen.args import ArgumentError
from scangen.heads import HeadFlags
from scangen.kernel import LinePlaces, ScanKernel
from scangen.lines import SHORT_ROW_TILES_MIN as SHORT
from scangen.render import render
from scangen.strategies.columns import check_columns

COPY = dict(arguments="const float *x, float *out", input_expr="x[i]",
            output_statement="out[i] = item;")


#: float32's section (4096): rows of it or longer take the columns kernel's rows launch.
SECTION = scangen.Scan(np.float32).columns_kernel.spec.section_size


@pytest.mark.parametrize("shape,axis,kernel", [
    ((1000,), 0, "kernel"), ((1000,), -1, "kernel"), ((1, 1000), 1, "kernel"),
    ((1000, 1), 0, "kernel"), ((1, 1000, 1), 1, "kernel"), ((7, 300), 1, "rows_kernel"),
    ((7, SHORT - 1), -1, "rows_kernel"), ((3, 4, 5), 2, "rows_kernel"),
    ((7, SHORT), -1, SHORT), ((7, 1000), 1, "rows_kernel"), ((7, 1500), 1, 2048),
    ((3, 2, 1025), 2, 2048),
    ((7, SECTION // 2 + 1), -1, "columns_kernel"), ((7, SECTION), -1, "columns_kernel"),
    ((2, 3, 3 * SECTION + 1), 2, "columns_kernel"), ((1, SECTION * 5), 1, "kernel"),
    ((7, 1000), 0, "columns_kernel"), ((3, 4, 5), 0, "columns_kernel"),
    ((3, 4, 5), 1, "columns_kernel"), ((3, 4, 5), -2, "columns_kernel"),
    ((2, 3, 4, 5), 1, "columns_kernel"), ((5, 1, 4), 1, "columns_kernel")])
def test_each_shape_and_axis_takes_its_kernel(shape, axis, kernel):
    """A kernel by name, or a section size: the rows of a columns kernel of that section
    (rows shorter than the tuned section, one tile a row)."""
    scan = scangen.Scan(np.float32)
    plan = scan.plan(shape, axis=axis)
    assert plan.n == int(np.prod(shape))
    if isinstance(kernel, int):
        assert plan.launches[0].kernel.name == "scan_rows_user"
        assert plan.spec.section_size == kernel
        assert plan.single_pass_tiles == plan.n // shape[-1]  # one tile a row
        assert plan.strategy == "rows"
        return
    assert plan.scan_module == getattr(scan, kernel).scan_module
    assert (plan.strategy in ("columns", "rows")) == (kernel == "columns_kernel")


def test_rows_take_segments_where_the_options_name_the_tile():
    """Rows shorter than the section given stay segments: the tile is the caller's."""
    scan = scangen.Scan(np.float32, section_size=SECTION // 2)
    assert scan.plan((7, 1000), axis=1).scan_module == scan.rows_kernel.scan_module
    assert scan.plan((7, SECTION // 2), axis=1).launches[0].kernel.name == "scan_rows_user"


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64", "complex128"])
@pytest.mark.parametrize("rows,tiles_a_row,extra", [(1, 1, 0), (5, 1, 0), (3, 2, 1),
                                                    (4, 7, -1)])
def test_rows_plan(dtype, rows, tiles_a_row, extra):
    """Rows of a section or longer: one launch, each row in tiles of a section (its last
    one shorter), a status entry per tile, the row length its argument."""
    scan = scangen.Scan(dtype)
    section = scan.columns_kernel.spec.section_size
    length = (tiles_a_row - (extra > 0)) * section + extra
    plan = scan.plan((rows, length), axis=1)
    if rows == 1:  # one line: the 1-D kernel
        assert plan.scan_module == scan.kernel.scan_module
        return
    (launch,) = plan.launches
    assert launch.kernel.name == "scan_rows_user"
    assert launch.grid == plan.single_pass_tiles == rows * ceil_div(length, section)
    assert launch.args[-2:] == (length, rows * length)
    assert launch.bytes_read == launch.bytes_written == plan.n * np.dtype(dtype).itemsize
    text = str(plan)
    assert f"as rows of {length}" in text and f"axis_length={length}, n=" in text
    assert "strategy rows," in text


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64", "complex128"])
@pytest.mark.parametrize("outer,length,inner", [(8, 4096, 1024), (3, 5, 7), (1, 1, 33),
                                                (2, 10_000, 1)])
def test_columns_plan(dtype, outer, length, inner):
    if inner == 1:
        return  # the rows kernel's: tests/cpu/test_plan.py
    scan = scangen.Scan(dtype)
    plan = scan.plan((outer, length, inner), axis=1)
    spec = scan.columns_kernel.spec
    rows = spec.block_size // WARP_SIZE * spec.column_items_per_thread
    chunks, columns = ceil_div(length, rows), outer * inner
    (launch,) = plan.launches
    assert launch.kernel.name == "scan_columns_user"
    assert launch.grid == chunks * ceil_div(columns, WARP_SIZE)
    assert launch.args[-3:] == (length, inner, outer * length * inner)
    assert plan.single_pass_tiles == chunks * columns  # one status entry per chunk and column
    assert launch.bytes_read == launch.bytes_written == plan.n * np.dtype(dtype).itemsize
    text = str(plan)
    assert f"as (outer, {length}, {inner}) along the middle axis" in text
    assert f"axis_length={length}, axis_stride={inner}" in text
    assert "strategy columns," in text


def test_column_tiles_take_the_tuned_rows_a_thread():
    """A column tile's thread takes the spec's items, at most the tuning's limit for its
    size (16 for 4-byte values by default, none for 8-byte ones); the plan and the kernel's
    source agree on the tile's rows."""
    float32 = scangen.Scan(np.float32).columns_kernel.spec
    assert (float32.items_per_thread, float32.column_items_per_thread) == (32, 16)
    float64 = scangen.Scan(np.float64).columns_kernel.spec
    assert float64.column_items_per_thread == float64.items_per_thread
    capped = scangen.Scan(np.float64, tuning=scangen.Tuning(columns_max_items_per_thread=2))
    spec = capped.columns_kernel.spec
    assert spec.column_items_per_thread == 2
    rows = spec.block_size // WARP_SIZE * 2
    plan = capped.plan((3, 5 * rows + 1, 40), axis=1)
    assert f"x {rows} rows" in str(plan)
    assert plan.launches[0].grid == 6 * ceil_div(3 * 40, WARP_SIZE)
    source = capped.columns_kernel.source
    assert "static const int COLUMN_ITEMS = 2;" in source
    with pytest.raises(ValueError, match="columns_max_items_per_thread"):
        scangen.Tuning(columns_max_items_per_thread=0)


def test_columns_sources_have_only_their_kernel():
    """The module along an axis has two kernels, compiled apart: columns (which looks back
    a column at a time) and rows (which looks back over its row's tiles)."""
    module = scangen.Scan(np.float64, "max", reverse=True).columns_kernel.scan_module
    assert [k.name for k in module.kernels] == ["scan_columns_user", "scan_rows_user"]
    columns, rows = (render(module, part.kernels).text for part in module.parts())
    assert "scan_columns_user(" in columns and " look_back(" not in columns
    assert "scan_rows_user(" not in columns
    assert "axis_length - 1 - step" in columns  # reverse walks each column from its end
    assert "scan_rows_user(" in rows and " look_back(" in rows
    assert "scan_columns_user(" not in rows


def test_empty_shapes_plan_nothing():
    scan = scangen.Scan(np.float32)
    for shape, axis in [((0, 5), 0), ((5, 0), 0), ((3, 0, 4), 1)]:
        assert scan.plan(shape, axis=axis).launches == ()


@pytest.mark.parametrize("axis,error,match", [
    (2, ValueError, "axis 2 is out of range for an array of 2 dimension"),
    (-3, ValueError, "out of range"), (1.0, TypeError, "axis must be an int"),
    (True, TypeError, "axis must be an int"), (None, TypeError, "axis must be an int")])
def test_bad_axis(axis, error, match):
    with pytest.raises(error, match=match):
        scangen.Scan(np.float32).plan((3, 4), axis=axis)


def test_columns_kernel_refuses_what_it_cannot_do():
    for extra, match in [({"counts": True}, "no segments, counts"),
                         ({"is_segment_start_expr": "i % 4 == 0"}, "no segments"),
                         ({"output_statement": "out[i] = last_item;"}, "last_item")]:
        options = dict(COPY, **extra)
        dtype = np.int32 if "counts" in extra else np.float32
        with pytest.raises(ValueError, match=match):
            ScanKernel(dtype, "add", _columns=True, **options)
    with pytest.raises(ValueError, match="blocks of whole warps"):
        ScanKernel(np.float32, "add", _columns=True, algorithm="naive", section_size=16,
                   **COPY)


def test_columns_plans_need_their_shape():
    columns = ScanKernel(np.float32, "add", _columns=True, **COPY)
    with pytest.raises(ValueError, match="plans with their layout"):
        columns.plan(100)
    with pytest.raises(ValueError, match="plans with their layout"):
        ScanKernel(np.float32, "add", **COPY).plan(100, (10, 10))
    for bad in [(3, 7), (0, 5), (5, -1), "ab", (1, 2, 3)]:
        with pytest.raises(ValueError, match="columns"):
            columns.plan(100, bad)
    assert check_columns(100, (10, 5)) == (10, 5)


@pytest.mark.parametrize("source,ufunc,want", [
    ("int8", np.add, "int64"), ("uint16", np.add, "uint64"), ("int32", np.multiply, "int64"),
    ("uint64", np.add, "uint64"), ("float16", np.add, "float16"),
    ("float32", np.multiply, "float32"), ("complex64", np.add, "complex64")])
def test_cumulative_functions_take_numpys_result_type(source, ufunc, want):
    from scangen.one_shot import accumulated_dtype
    assert accumulated_dtype(ufunc, np.dtype(source)) == np.dtype(want)
    assert accumulated_dtype(ufunc, np.dtype(source), "float64") == np.dtype("float64")


def test_flattening_needs_a_reshape():
    from tests.support import FakeDeviceArray
    with pytest.raises(TypeError, match="axis=None scans x flattened.*pass an axis"):
        scangen.cumsum(FakeDeviceArray((3, 4), np.float32))


def test_rows_find_their_heads_a_run_at_a_time():
    """Along the last axis, a lane finds its run's row heads from one remainder (HeadRows)
    wherever the single pass moves warp runs, whatever its items per thread, in either
    direction (a reverse scan's heads fall at multiples of the row length in scan order
    too); heads by flags in reverse keep the per-element test."""
    for dtype, reverse in itertools.product(("int8", "float32", "float64"), (False, True)):
        rows = scangen.Scan(dtype, reverse=reverse).rows_kernel
        assert rows.scan_module.run_heads == ("rows", "row_length", "long long")
        assert "to_head" in rows.source
        assert "value_at(index_at(position, n), n)" in rows.source
    flags = dict(arguments="const float *x, float *y, const unsigned char *flags",
                 input_expr="x[i]", output_statement="y[i] = item;",
                 _segment_heads=HeadFlags("flags"))
    assert scangen.ScanKernel(np.float32, "add", **flags).scan_module.run_heads[0] == "flags"
    assert scangen.ScanKernel(np.float32, "add", reverse=True, **flags).scan_module \
        .run_heads is None


STEP_MEAN = dict(arguments="const float *x, float *mean", input_expr="x[i]",
                 output_statement="mean[i] = item / (float)(step + 1);")


def test_each_kernel_of_lines_gives_the_output_its_step_and_line():
    """``step`` is i's place in its line's scan and ``line`` its line's index: a 1-D scan's
    position and 0, the rows kernel's remainder and quotient by the row length; the columns
    kernel's column runs and row tiles say them."""
    kernel = scangen.ScanKernel(np.float32, "add", **STEP_MEAN)
    assert kernel.scan_module.hooks.line_places == LinePlaces("position", "0")
    rows = kernel.lines.rows_kernel.scan_module.hooks.line_places
    assert rows == LinePlaces("position % row_length", "index_at(position, n) / row_length")
    columns = kernel.lines.columns_kernel
    assert columns.scan_module.hooks.line_places == LinePlaces(None, None)
    assert "run.first_step + k, run.column" in columns.source
    assert "position - line_start" in columns.source
    reverse = scangen.ScanKernel(np.float32, "add", reverse=True, **STEP_MEAN)
    assert "n / row_length - 1 - row" in reverse.lines.columns_kernel.source
    # a statement that reads neither compiles as before: the kernels' places go unused
    assert "(void)step, (void)line;" in render(scangen.Scan(np.float32).kernel.scan_module).text


@pytest.mark.parametrize("options,error,message", [
    (dict(is_segment_start_expr="i % 7 == 0"), ValueError,
     "segmented scan cannot read step.*axis="),
    (dict(is_segment_start_expr="i % 7 == 0", output_statement="mean[i] = line;"),
     ValueError, "segmented scan cannot read line"),
    (dict(preamble="__device__ const int step = 2;"), ValueError,
     "preamble names a step of its own"),
    (dict(input_expr="x[i] * step"), ValueError, "input_expr reads step, which only the "
     "output statement sees"),
    (dict(input_expr="x[line]"), ValueError, "input_expr reads line"),
    (dict(is_segment_start_expr="step == 0", output_statement="mean[i] = item;"), ValueError,
     "is_segment_start_expr reads step"),
    (dict(arguments="const float *x, float *mean, int step"), ArgumentError,
     "'step' is reserved"),
    (dict(arguments="const float *x, float *mean, const int *line"), ArgumentError,
     "'line' is reserved"),
])
def test_step_and_line_are_refused_where_they_would_mislead(options, error, message):
    with pytest.raises(error, match=message):
        scangen.ScanKernel(np.float32, "add", **{**STEP_MEAN, **options})


def test_a_step_of_the_users_own_still_serves_the_input():
    kernel = scangen.ScanKernel(np.float32, "add", arguments="const float *x, float *out",
                                input_expr="x[i] * step", output_statement="out[i] = item;",
                                preamble="__device__ const float step = 0.5f;")
    assert "x[i] * step" in kernel.source


@pytest.mark.parametrize("argument", ["long long *row_length", "int row_length"])
def test_head_rows_name_a_long_long_scalar(argument):
    from scangen.args import ArgumentError
    from scangen.heads import HeadRows
    with pytest.raises(ArgumentError, match="HeadRows names 'row_length', which must be a "
                                            "long long scalar"):
        ScanKernel(np.float32, "add", arguments=f"const float *x, float *out, {argument}",
                   input_expr="x[i]", output_statement="out[i] = item;",
                   _segment_heads=HeadRows("row_length"))


# --- calls without a GPU: which kernel runs, with which arguments ---------------------------

@pytest.fixture
def calls(monkeypatch):
    """Every launch, as a RecordedLaunch, instead of running it, on a simulated device."""
    from tests.support import record_launches, simulate_device

    simulate_device(monkeypatch)
    return record_launches(monkeypatch)


def device_array(shape, dtype=np.float32, address=0x10000):
    from tests.support import FakeDeviceArray
    return FakeDeviceArray(shape, dtype, address=address)


def weighted_kernel(**options):
    """A ScanKernel of the user's own hooks: x scaled by a weight argument, and an initial
    value (a scalar argument and the initial value ride along every kernel of lines)."""
    return scangen.ScanKernel(np.float32, "add", arguments="const float *x, float *out, "
                              "float weight", input_expr="weight * x[i]",
                              output_statement="out[i] = item;", initial=0.0,
                              title="weighted", **options)


#: (shape, axis, what the launched kernel's title adds to the 1-D one's, the columns
#: kernel's layout, the row length the rows kernel takes): 60 elements along each kind of
#: axis, and along an axis that holds every element.
LAUNCHES_BY_AXIS = [
    ((3, 4, 5), 0, " along an axis", (3, 20), None),
    ((3, 4, 5), 1, " along an axis", (4, 5), None),
    ((3, 4, 5), -1, " of rows", None, 5),
    ((60,), 0, "", None, None),
    ((1, 60, 1), 1, "", None, None)]


@pytest.mark.parametrize("shape,axis,title,columns,row_length", LAUNCHES_BY_AXIS)
def test_a_scan_kernel_along_an_axis_launches_the_kernel_of_its_axis(
        calls, shape, axis, title, columns, row_length):
    """The first array argument's shape along ``axis``: the user's scalars, then the row
    length where rows are segments, then the call's initial value."""
    kernel = weighted_kernel()
    kernel(device_array(shape), device_array(shape, address=0x80000), 2.5, axis=axis,
           initial=1.5)
    ((got_title, values, n, _, got_columns),) = calls
    assert (got_title, n, got_columns) == ("weighted" + title, 60, columns)
    pointers, rest = tuple(int(v) for v in values[:2]), values[2:]
    assert pointers == (0x10000, 0x80000)
    assert [float(v) for v in rest] == [2.5] + ([] if row_length is None else
                                                 [row_length]) + [1.5]
    # the same kernels each call, and the 1-D one is the kernel itself
    assert kernel.lines.kernel is kernel and kernel.lines.rows_kernel is \
        kernel.lines.rows_kernel
    assert kernel.lines.rows_kernel.made_with["arguments"].endswith(", long long row_length")


@pytest.mark.parametrize("options,message", [
    (dict(is_segment_start_expr="i % 7 == 0"), "segments, counts, last_item"),
    (dict(output_statement="out[i] = item + last_item;"), "segments, counts, last_item"),
])
def test_a_scan_kernel_along_an_axis_refuses_what_lines_cannot_give(calls, options, message):
    made = dict(arguments="const float *x, float *out", input_expr="x[i]",
                output_statement="out[i] = item;")
    kernel = scangen.ScanKernel(np.float32, "add", **{**made, **options})
    x, out = device_array((3, 4)), device_array((3, 4), address=0x80000)
    with pytest.raises(ValueError, match=message):
        kernel(x, out, axis=0)
    with pytest.raises(TypeError, match="give n= or axis=, not both"):
        weighted_kernel()(x, out, 1.0, n=12, axis=0)
    with pytest.raises(ValueError, match="axis 2 is out of range for an array of 2"):
        weighted_kernel()(x, out, 1.0, axis=2)
    weighted_kernel()(device_array((3, 0)), device_array((3, 0), address=0x80000), 1.0,
                      axis=0)  # nothing to scan: nothing launched
    assert calls == []


@pytest.mark.parametrize("shape,axis,title,columns,row_length", LAUNCHES_BY_AXIS)
def test_a_call_launches_the_kernel_of_its_axis(calls, shape, axis, title, columns,
                                                row_length):
    x, out = device_array(shape), device_array(shape, address=0x80000)
    assert scangen.Scan(np.float32)(x, out=out, axis=axis) is out
    ((got_title, values, n, _, got_columns),) = calls
    assert (got_title, n, got_columns) == ("inclusive scan" + title, 60, columns)
    expected = (0x10000, 0x80000) + (() if row_length is None else (row_length,))
    assert tuple(int(v) for v in values) == expected


def test_several_operands_are_read_and_written_apart(calls):
    """Inputs then outputs, each its own array, along the axis asked for; a dict of
    operands names the fields and comes back as a dict."""
    m, c = device_array((6, 7), np.float64), device_array((6, 7), np.float64, 0x20000)
    out_m, out_c = (device_array((6, 7), np.float64, a) for a in (0x30000, 0x40000))
    op = scangen.Operator("scan_t{b.m * a.m, b.m * a.c + b.c}", (1.0, 0.0), name="affine")
    got = scangen.associative_scan(op, {"m": m, "c": c}, axis=0, out={"m": out_m, "c": out_c})
    assert got == {"m": out_m, "c": out_c}
    ((title, values, n, _, columns),) = calls
    assert title == "inclusive scan of 2 operands along an axis" and columns == (6, 7)
    assert [int(v) for v in values] == [0x10000, 0x20000, 0x30000, 0x40000]


def test_a_linear_recurrence_call(calls):
    a, b = device_array((5, 9)), device_array((5, 9), address=0x20000)
    h = device_array((5, 9), address=0x30000)
    assert scangen.linear_recurrence(a, b, axis=1, h0=0.5, out=h) is h
    ((title, values, n, _, columns),) = calls
    assert title == "linear recurrence of rows" and columns is None
    # a, b, h, the row length, then the initial value: the map h -> 1 * h + 0.5
    assert [int(v) for v in values[:4]] == [0x10000, 0x20000, 0x30000, 9]
    assert values[4] == np.array((1.0, 0.5), "f4,f4").tobytes()


def test_operand_errors_come_before_any_launch(calls):
    a = device_array((5, 9))
    with pytest.raises(ValueError, match="operand f1 has shape"):
        scangen.associative_scan(scangen.Operator("a", 0.0), (a, device_array((5, 8))))
    with pytest.raises(ValueError, match="out must name the same operands"):
        scangen.associative_scan(scangen.Operator("a", 0.0), (a,), out=(a, a))
    with pytest.raises(ValueError, match="overlaps an operand"):
        scangen.associative_scan(scangen.Operator("a", 0.0),
                                 (a, device_array((5, 9), np.float32, 0x30000)),
                                 out=(device_array((5, 9), np.float32, 0x10004), None))
    with pytest.raises(TypeError, match="share one float or complex dtype"):
        scangen.linear_recurrence(a, device_array((5, 9), np.float64))
    with pytest.raises(ValueError, match="one shape"):
        scangen.linear_recurrence(a, device_array((9, 5)))
    for axis in (2, -3):  # refused before an output is allocated
        with pytest.raises(ValueError, match=f"axis {axis} is out of range"):
            scangen.linear_recurrence(a, device_array((5, 9), address=0x20000), axis=axis)
        with pytest.raises(ValueError, match=f"axis {axis} is out of range"):
            scangen.associative_scan(scangen.Operator("a", 0.0), (a,), axis=axis)
    assert not calls
