"""Scan's result_dtype, reverse, initial and 2-D rows, without a GPU: validation, the kernels
they render, nvcc compiling them, and the references the GPU tests use."""

import numpy as np
import pytest

import scangen
from tests.support import (AFFINE, BFLOAT16, flipped, needs_bfloat16, random_input,
                           scan_reference)
from tests.support import needs_nvcc



def test_result_dtype_converts_each_input():
    scan = scangen.Scan(np.uint8, "add", result_dtype=np.int64)
    assert scan.input_dtype == np.uint8 and scan.dtype == np.int64
    assert "const unsigned char *x" in scan.source and "(long long)(x[i])" in scan.source
    assert "typedef long long scan_t;" in scan.source
    assert "(long long)(x[i])" not in scangen.Scan(np.uint8, "add").source


@pytest.mark.parametrize("dtype,result", [(np.int64, np.float32), (np.float64, np.float32),
                                          (np.int32, np.uint32), (np.uint64, np.int64)])
def test_result_dtype_must_hold_the_input(dtype, result):
    with pytest.raises(TypeError, match="cannot hold every"):
        scangen.Scan(dtype, "add", result_dtype=result)


def test_reverse_and_initial_render():
    scan = scangen.Scan(np.int32, scangen.LAST_NONZERO, reverse=True, initial=7)
    source = scan.source
    assert "return n - 1 - position;" in source and "combine(later, earlier)" in source
    assert "int scangen_initial;" in source
    assert "value_combine(scangen_initial, item_acc)" in source
    assert scan.kernel.initial == np.int32(7)
    forward = scangen.Scan(np.int32, scangen.LAST_NONZERO).source
    assert "return position;" in forward and "scangen_initial" not in forward


def test_initial_is_checked_like_an_argument():
    with pytest.raises(ValueError, match=r"^initial \(int32\): 1099511627776 does not fit "
                                         r"int32 \[-2147483648, 2147483647\]$"):
        scangen.Scan(np.int8, "add", result_dtype=np.int32, initial=1 << 40)
    with pytest.raises(TypeError, match=r"^initial \(int32\) needs an int, not 0.5$"):
        scangen.Scan(np.int32, "add", initial=0.5)
    kernel = scangen.ScanKernel(np.int32, "add", arguments="const int *x, int *out",
                                input_expr="x[i]", output_statement="out[i] = item;")
    with pytest.raises(TypeError, match="built without initial="):
        kernel(0x1000, 0x2000, n=4, initial=3)


def test_rows_kernel_segments_by_row():
    scan = scangen.Scan(np.float64, "max", mode="exclusive", reverse=True)
    rows = scan.rows_kernel
    assert rows.scan_module.hooks.is_segment_start_expr == "i % row_length == 0"
    assert "long long row_length;" in rows.source
    assert "return i == n - 1 || is_segment_start(i + 1, n);" in rows.source
    assert "scangen_initial" not in rows.source
    # every row starts from the initial value (tests/cpu/test_initial.py runs the plans)
    assert scangen.Scan(np.int32, "add", initial=1).rows_kernel.initial == 1


@needs_nvcc
@pytest.mark.parametrize("strategy", ["auto", "hierarchical", "chained"])
def test_option_modules_compile(strategy):
    for scan in (scangen.Scan(np.uint8, "add", result_dtype=np.int64, reverse=True, initial=3,
                              strategy=strategy),
                 scangen.Scan(np.uint64, AFFINE, mode="exclusive", reverse=True,
                              strategy=strategy)):
        scan.check_compile()
    scangen.Scan(np.int16, scangen.LAST_NONZERO, reverse=True, strategy=strategy) \
        .rows_kernel.check_compile()


# --- the references themselves, against the definitions, one element at a time ----------

def test_suffix_and_initial_references_follow_the_definitions(rng):
    for op_name, op, dtype in (("affine_then", AFFINE, np.uint64),
                               ("last_nonzero", scangen.LAST_NONZERO, np.int32)):
        x = random_input(rng, dtype, op_name, 57)
        init = x[3]
        for mode in ("inclusive", "exclusive"):
            want_suffix, want_initial = [], []
            for i in range(x.size):
                tail = x[i:] if mode == "inclusive" else x[i + 1:]
                acc = dtype(op.identity)
                for value in tail:  # x[i] op x[i+1] op ... in array order
                    acc = op.reference(acc, value)
                want_suffix.append(acc)
                head = x[: i + 1] if mode == "inclusive" else x[:i]
                acc = init
                for value in head:
                    acc = op.reference(acc, value)
                want_initial.append(acc)
            np.testing.assert_array_equal(scan_reference(x, op, mode, reverse=True),
                                          np.array(want_suffix, dtype))
            np.testing.assert_array_equal(scan_reference(x, op, mode, initial=init),
                                          np.array(want_initial, dtype))
    assert flipped(AFFINE).reference(np.uint64(5), np.uint64(7)) == \
        AFFINE.reference(np.uint64(7), np.uint64(5))


#: result_dtype pairs beyond the integer and float widenings: half precision to float,
#: real to complex, complex to wider complex; how C spells each conversion of x[i].
CONVERSIONS = [
    (np.float16, np.float32, "(float)(x[i])"),
    (np.float16, np.float64, "(double)(float)(x[i])"),
    (np.uint8, np.float16, "(__half)(float)(x[i])"),
    (np.float32, np.complex64, "scangen_complex64{x[i], 0.0f}"),
    (np.int16, np.complex128, "scangen_complex128{(double)(x[i]), 0.0}"),
    (np.float16, np.complex64, "scangen_complex64{(float)(x[i]), 0.0f}"),
    (np.complex64, np.complex128, "scangen_complex128{(double)(x[i]).re, (double)(x[i]).im}"),
]


@pytest.mark.parametrize("dtype,result,spelled", CONVERSIONS)
def test_result_dtype_conversions_are_spelled_in_c(dtype, result, spelled):
    scan = scangen.Scan(dtype, "add", result_dtype=result)
    assert scan.kernel.scan_module.hooks.input_expr == spelled
    source = scan.source
    # the input's type is declared (or its header included) beside the result's
    assert f"const {scangen.ELEMENT_TYPES[np.dtype(dtype)].c_name} *x;" in source
    for etype in (scangen.ELEMENT_TYPES[np.dtype(d)] for d in (dtype, result)):
        assert all(f"#include <{h}>" in source for h in etype.includes)
        assert etype.declarations in source


@pytest.mark.parametrize("dtype,result", [
    (np.complex64, np.float64), (np.complex128, np.complex64), (np.float32, np.int64),
    (np.float64, np.float32), (np.int16, np.float16), (np.float64, np.complex64),
])
def test_result_dtype_conversions_numpy_calls_unsafe_are_refused(dtype, result):
    assert not np.can_cast(dtype, result, "safe")
    with pytest.raises(TypeError, match=f"result_dtype {np.dtype(result)} cannot hold every "
                                        f"{np.dtype(dtype)} value"):
        scangen.Scan(dtype, "add", result_dtype=result)


def test_result_dtype_conversions_of_structs_are_refused_naming_the_pair():
    pair = np.dtype([("m", np.float64), ("c", np.float64)])
    sums = scangen.Operator("scan_t{a.m + b.m, a.c + b.c}", (0.0, 0.0), name="sums")
    wider = np.dtype([("m", np.float64), ("c", np.float64), ("k", np.int64)])
    with pytest.raises(TypeError, match=r"no conversion from \[\('m'.* to \[\('m'.*'k'"):
        scangen.Scan(pair, sums, result_dtype=wider)
    with pytest.raises(TypeError, match=r"no conversion from float64 to \[\('m'"):
        scangen.Scan(np.float64, sums, result_dtype=pair)
    assert scangen.Scan(pair, sums, result_dtype=pair).dtype == pair  # the same: no conversion


@needs_bfloat16
@pytest.mark.parametrize("dtype,result,spelled", [
    (BFLOAT16, np.float32, "(float)(x[i])"), (BFLOAT16, np.float64, "(double)(float)(x[i])"),
    (BFLOAT16, np.complex128, "scangen_complex128{(double)(float)(x[i]), 0.0}"),
    (np.int8, BFLOAT16, "(__nv_bfloat16)(float)(x[i])")])
def test_bfloat16_conversions(dtype, result, spelled):
    scan = scangen.Scan(dtype, "add", result_dtype=result)
    assert scan.kernel.scan_module.hooks.input_expr == spelled
    assert "#include <cuda_bf16.h>" in scan.source
    # numpy's safe casting refuses both: 16-bit integers and float16 do not fit bfloat16's
    # 8-bit mantissa, bfloat16's exponents do not fit float16's
    with pytest.raises(TypeError, match="cannot hold every int16 value"):
        scangen.Scan(np.int16, "add", result_dtype=BFLOAT16)
    with pytest.raises(TypeError, match="cannot hold every bfloat16 value"):
        scangen.Scan(BFLOAT16, "add", result_dtype=np.float16)


@needs_nvcc
def test_conversion_modules_compile():
    for dtype, result, _ in CONVERSIONS:
        scangen.Scan(dtype, "add", result_dtype=result, strategy="hierarchical").check_compile()


def test_initial_with_half_values_is_a_launch_argument():
    scan = scangen.Scan(np.float16, "add", initial=1.5)
    assert "__half scangen_initial;" in scan.source
    assert scan.kernel.initial == np.float16(1.5) and scan.kernel.initial.dtype == np.float16
