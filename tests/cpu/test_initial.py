"""initial= beyond real scalars and single segments, without a GPU: struct, complex and
bfloat16 initial values passed as their bytes (aligned in the launch as C aligns the
parameter), every segment of a SegmentedScan and every row of a 2-D Scan starting from the
initial value. The kernels render and compile, and their plans, interpreted in numpy
(tests/support/plan_machine.py), agree with the reference."""
import concurrent.futures
import os
import struct

import numpy as np
import pytest

import scangen
from scangen.args import launch_format
from scangen.args import convert_scalar
from scangen.spec import MODES, STRATEGIES
from scangen.types import element_type
from tests.support import (AFFINE, AFFINE_PAIR, AFFINE_PAIRS, ARGMAX, BFLOAT16, VALUE_INDEX,
                           assert_scan_equal, exact_affine_pairs, needs_bfloat16, operator,
                           random_input, scan_reference, segmented_reference)
from tests.support import needs_nvcc
from tests.support.plan_machine import PlanMachine, ScanHooks


#: (dtype, operator, an initial value) passed as bytes: no struct-module code fits them.
BY_BYTES = [(AFFINE_PAIR, AFFINE_PAIRS, (2.0, -1.5)),
            (VALUE_INDEX, ARGMAX, np.array((7, 3), VALUE_INDEX)[()]),
            (np.dtype(np.complex64), "mul", 0.5 - 2j), (np.dtype(np.complex128), "add", 3 + 0j)]


@pytest.mark.parametrize("dtype,op,initial", BY_BYTES)
def test_struct_and_complex_initials_go_by_their_bytes(dtype, op, initial):
    scan = scangen.Scan(dtype, op, initial=initial)
    argument = scan.kernel.arguments[-1]
    etype = element_type(dtype)
    assert argument.name == "scangen_initial" and argument.value_type == etype
    assert f"{etype.c_name} scangen_initial;" in scan.source
    want = np.array(initial, dtype).tobytes()
    assert convert_scalar(argument, initial) == want
    # the constructor's value is kept as numpy's, and converted again by every call
    assert convert_scalar(argument, scan.kernel.initial) == want


@needs_bfloat16
def test_bfloat16_initial_goes_by_its_bytes():
    scan = scangen.Scan(BFLOAT16, "max", initial=1.5)
    argument = scan.kernel.arguments[-1]
    assert argument.value_type == element_type(BFLOAT16)
    assert "__nv_bfloat16 scangen_initial;" in scan.source
    assert convert_scalar(argument, 1.5) == convert_scalar(argument, scan.kernel.initial) == \
        np.array(1.5, BFLOAT16).tobytes()


def test_half_initial_stays_a_struct_module_code():
    argument = scangen.Scan(np.float16, "add", initial=1.5).kernel.arguments[-1]
    assert argument.value_type is None and argument.launch_format == "e"


@pytest.mark.parametrize("dtype,op,initial", BY_BYTES)
def test_the_bytes_sit_where_c_puts_the_parameter(dtype, op, initial):
    """After an int the struct module would put bytes at once; C aligns the parameter."""
    kernel = scangen.ScanKernel(dtype, op, arguments="const scan_t *x, int k, scan_t *out, "
                                "unsigned char tag", input_expr="x[i]",
                                output_statement="out[i] = item;", initial=initial)
    alignment = element_type(dtype).alignment
    for entry in kernel.scan_module.kernels:
        text = launch_format(entry.parameters(kernel.arguments))
        if "s" not in text:
            continue  # a kernel of the totals: no user arguments
        before = text[:text.index(f"{dtype.itemsize}s")]
        assert struct.calcsize(before) % alignment == 0, text
        assert struct.calcsize(before) - struct.calcsize(before.rstrip("x")) < alignment


@pytest.mark.parametrize("initial,error,message", [
    ((1.0, 2.0, 3.0), ValueError, r"^initial \(.*\): 3 values for 2 fields \(m, c\)"),
    (1.0, TypeError, "is not a tuple of field values"),
    ((1.0, "two"), ValueError, "does not fit"),
])
def test_bad_struct_initials(initial, error, message):
    with pytest.raises(error, match=message):
        scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS, initial=initial)


def test_bad_complex_initial():
    with pytest.raises(TypeError, match="is not a number"):
        scangen.Scan(np.complex64, "add", initial="1+2j")


def test_a_launch_converts_the_initial_value_before_anything_runs():
    """Scan and SegmentedScan launch through launch_converted, which converts the initial
    value (the constructor's or the call's) as a call does; n = 0 launches nothing."""
    kernel = scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS, initial=(1.0, 0.0)).kernel
    addresses = (np.uintp(0x1000), np.uintp(0x2000))
    kernel.launch_converted(addresses, 0)
    kernel.launch_converted(addresses, 0, initial=np.array((2.0, 1.0), AFFINE_PAIR)[()])
    with pytest.raises(ValueError, match=r"^initial \(.*\): 1 values for 2 fields"):
        kernel.launch_converted(addresses, 0, initial=(2.0,))
    plain = scangen.SegmentedScan(np.int32, "add").kernel("flags", np.dtype(np.bool_))
    with pytest.raises(TypeError, match="built without initial="):
        plain.launch_converted(addresses + (np.uintp(0x3000),), 0, initial=3)


def test_segments_and_rows_render_with_an_initial_value():
    seg = scangen.SegmentedScan(np.int32, scangen.LAST_NONZERO, mode="exclusive", initial=5)
    for form, dtype in (("flags", np.bool_), ("keys", np.int64)):
        kernel = seg.kernel(form, np.dtype(dtype))
        hooks = kernel.scan_module.hooks
        assert hooks.initial and hooks.is_segment_start_expr and kernel.initial == 5
        source = kernel.source
        assert "value_combine(scangen_initial, item_acc.value)" in source
        assert "value_combine(scangen_initial, restarts_at(i, n) ? scan_identity() : " \
               "prev_acc.value)" in source
    # Offsets: each segment in tiles of its own, the values alone combined.
    tiles = seg.kernel("offsets", np.int32)
    assert tiles is seg.segment_tiles_kernel and tiles.initial == 5
    assert tiles.scan_module.hooks.initial and tiles.scan_module.hooks.segment_tiles
    assert "value_combine(scangen_initial, item_acc)" in tiles.source
    rows = scangen.Scan(AFFINE_PAIR, AFFINE_PAIRS, initial=(1.0, 2.0)).rows_kernel
    assert [a.name for a in rows.arguments] == ["x", "out", "row_length", "scangen_initial"]
    assert rows.initial == np.array((1.0, 2.0), AFFINE_PAIR)[()]


def _inputs(rng, dtype, op_name, n):
    if dtype == AFFINE_PAIR:
        return exact_affine_pairs(rng, n)
    return random_input(rng, dtype, op_name, n)


def _first(rng, dtype, op_name):
    return _inputs(rng, dtype, op_name, 1)[0]


#: Non-commutative operators: 8-byte values, 16-byte values (a split tile status) and a
#: 16-byte struct, each exact, so the interpreted plans must agree to the bit.
INTERPRETED = [("uint64", "affine_then"), ("int32", "last_nonzero"),
               (AFFINE_PAIR, "affine_pairs")]


def _operator(name):
    return AFFINE_PAIRS if name == "affine_pairs" else operator(name)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,op_name", INTERPRETED, ids=[name for _, name in INTERPRETED])
def test_interpreted_segments_start_from_initial(strategy, mode, dtype, op_name, rng):
    op = _operator(op_name)
    seg = scangen.SegmentedScan(dtype, op, mode=mode, initial=_first(rng, dtype, op_name),
                                algorithm="kogge_stone", section_size=4, strategy=strategy)
    kernel = seg.kernel("flags", np.dtype(np.uint8))
    machine = PlanMachine(rng, ticket_start=int(rng.integers(0, 2**40)))
    for n in (1, 3, 4, 5, 16, 17, 65, 300):
        x = _inputs(rng, dtype, op_name, n)
        initial = _first(rng, dtype, op_name)
        for density in (0.0, 0.1, 1.0):  # one segment .. single-element segments
            heads = (rng.random(n) < density).astype(np.uint8)
            got = machine.run(kernel.plan(n), ScanHooks(x, mode, heads=heads, initial=initial))
            want = segmented_reference(x, heads, op, mode, initial=initial)
            np.testing.assert_array_equal(got, want, err_msg=f"n={n} density={density}")


@pytest.mark.parametrize("strategy", ["auto", "reduce_then_scan", "decoupled_lookback"])
@pytest.mark.parametrize("dtype,op_name", INTERPRETED, ids=[name for _, name in INTERPRETED])
def test_interpreted_rows_start_from_initial(strategy, dtype, op_name, rng):
    op = _operator(op_name)
    for mode in MODES:
        scan = scangen.Scan(dtype, op, mode=mode, initial=_first(rng, dtype, op_name),
                            algorithm="kogge_stone", section_size=4, strategy=strategy)
        machine = PlanMachine(rng)
        for rows, length in ((1, 17), (7, 3), (5, 4), (3, 5), (40, 1)):
            x = _inputs(rng, dtype, op_name, rows * length)
            initial = _first(rng, dtype, op_name)
            heads = np.arange(rows * length) % length == 0
            got = machine.run(scan.rows_kernel.plan(x.size),
                              ScanHooks(x, mode, heads=heads, initial=initial))
            want = np.concatenate([scan_reference(row, op, mode, initial=initial)
                                   for row in x.reshape(rows, length)])
            np.testing.assert_array_equal(got, want, err_msg=f"{rows} rows of {length}")


def test_the_interpreter_notices_an_initial_value_left_out(rng):
    """The comparison above sees the difference: a non-identity initial value under a
    non-commutative operator changes every segment's start, so a plan run without it
    disagrees with the reference at each of them."""
    initial = random_input(rng, "uint64", "affine_then", 1)[0]
    seg = scangen.SegmentedScan(np.uint64, AFFINE, initial=initial, section_size=4,
                                algorithm="kogge_stone")
    x = random_input(rng, "uint64", "affine_then", 50)
    heads = (rng.random(50) < 0.2).astype(np.uint8)
    plan = seg.kernel("flags", np.dtype(np.uint8)).plan(50)
    want = segmented_reference(x, heads, AFFINE, "inclusive", initial=initial)
    got = PlanMachine(rng).run(plan, ScanHooks(x, "inclusive", heads=heads, initial=initial))
    np.testing.assert_array_equal(got, want)
    left_out = PlanMachine(rng).run(plan, ScanHooks(x, "inclusive", heads=heads))
    starts = np.union1d([0], np.flatnonzero(heads))
    assert starts.size > 3 and np.all(left_out[starts] != want[starts])


def test_float_initial_in_segments_is_within_tolerance(rng):
    """A float add with an initial value: the reference through scan_reference's tolerance."""
    seg = scangen.SegmentedScan(np.float64, "add", initial=0.25, section_size=8,
                                algorithm="kogge_stone", strategy="hierarchical")
    x = random_input(rng, np.float64, "add", 333)
    heads = (rng.random(333) < 0.05).astype(np.uint8)
    got = PlanMachine(rng).run(seg.kernel("flags", np.dtype(np.uint8)).plan(333),
                               ScanHooks(x, "inclusive", heads=heads, initial=0.25))
    assert_scan_equal(got, segmented_reference(x, heads, scangen.BUILTIN_OPERATORS["add"],
                                               "inclusive", initial=0.25), np.float64, 333)


@needs_nvcc
def test_initial_modules_compile():
    kernels = [scangen.SegmentedScan(AFFINE_PAIR, AFFINE_PAIRS, mode="exclusive",
                                     initial=(1.0, 0.0), reverse=True, strategy=strategy)
               .kernel("offsets", np.dtype(np.int64)) for strategy in STRATEGIES]
    kernels += [scangen.Scan(VALUE_INDEX, ARGMAX, initial=(0, -1), strategy="chained")
                .rows_kernel,
                scangen.Scan(np.complex128, "mul", initial=1j, strategy="decoupled_lookback"),
                scangen.SegmentedScan(np.uint64, operator("affine_then"), initial=1 << 32)
                .kernel("keys", np.dtype(np.int32))]
    if BFLOAT16 is not None:
        kernels.append(scangen.Scan(BFLOAT16, "add", initial=0.5, strategy="hierarchical")
                       .rows_kernel)
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda k: k.check_compile(), kernels))
