"""SegmentedScan without a GPU: the kernel of each form, the heads kernel of the offsets form,
offsets validation, nvcc. (The offsets form's plan, run on the host: test_module_plans.)"""

import numpy as np
import pytest

import scangen

from tests.support import needs_nvcc
from scangen.segmented import _check_offsets


def test_each_form_is_a_segmented_scan_kernel():
    seg = scangen.SegmentedScan(np.float64, scangen.LAST_NONZERO, mode="exclusive")
    forms = {"flags": (np.bool_, "flags[i] != 0"),
             "keys": (np.int32, "i == 0 || keys[i] != keys[i - 1]")}
    for form, (dtype, head) in forms.items():
        kernel = seg.kernel(form, np.dtype(dtype))
        assert kernel.scan_module.hooks.is_segment_start_expr == head
        assert kernel.scan_module.hooks.output_statement == "out[i] = prev_item;"
        assert kernel.spec.segmented and kernel.dtype == np.float64
    assert seg.kernel("keys", np.dtype(np.int32)) is seg.kernel("keys", np.dtype(np.int32))
    # offsets: each segment in tiles of its own (one kernel for either offset dtype, whose
    # layout kernel reads that dtype), or head bits the scan by head bits reads
    tiles = seg.segment_tiles_kernel
    hooks = tiles.scan_module.hooks
    assert hooks.segment_tiles and not tiles.spec.segmented
    assert hooks.output_statement == "out[i] = prev_item;" and tiles.dtype == np.float64
    for dtype, c_type in ((np.int32, "int"), (np.int64, "long long")):
        assert seg.kernel("offsets", dtype) is tiles
        layout = seg.layout_kernel(dtype)
        assert layout.dtype == np.int64 and layout.spec.operator.name == "add"
        assert layout.arguments[0].declaration == f"const {c_type} *offsets"
        assert seg.layout_kernel(dtype) is layout


def test_offsets_become_head_bits_one_offset_a_thread():
    """The heads kernel sets a bit per offset below n, for int32 and int64 offsets, and
    checks them where given a verdict word; no element-wise search is left in any form's
    scan. The scan by head bits takes a lane's run of heads from one word."""
    seg = scangen.SegmentedScan(np.float32)
    for dtype, c_type in ((np.int32, "int"), (np.int64, "long long")):
        module = seg.heads_module(dtype)
        assert module == seg.heads_module(np.dtype(dtype)) and module.offset_dtype == dtype
        (name, parameters), = module.entry_points()
        assert name == "segment_heads"
        assert [p.declaration for p in parameters] == [
            f"const {c_type} *__restrict__ offsets", "unsigned *__restrict__ heads",
            "long long *verdict", "long long offset_count", "long long n"]
        assert "atomicOr(heads + (start >> 5), 1u << (start & 31));" in module.source
        assert "__syncthreads_or(bad)" in module.source
        assert f"segment_heads(const {c_type} *__restrict__ offsets" in module.source
    assert seg.heads_module() == seg.heads_module(np.int64)
    for form in ("flags", "keys"):
        assert "offsets" not in seg.kernel(form).source
    bits = seg.bits_kernel
    assert bits.scan_module.run_heads == ("bits", "heads", "unsigned")
    assert bits.scan_module.hooks.is_segment_start_expr == "(heads[i >> 5] >> (i & 31) & 1u) != 0"
    assert bits.arguments[1].declaration == "const unsigned *heads" and "offsets" not in \
        bits.source
    with pytest.raises(TypeError, match="offsets has dtype uint32; use one of int32, int64"):
        seg.heads_module(np.uint32)


@needs_nvcc
def test_every_form_compiles():
    seg = scangen.SegmentedScan(np.uint64, "max", reverse=True, strategy="hierarchical")
    for form, dtype in (("flags", np.uint8), ("keys", np.int64)):
        seg.kernel(form, np.dtype(dtype)).check_compile()
    for dtype in (np.int32, np.int64):
        seg.heads_module(dtype).check_compile()


@pytest.mark.parametrize("offsets,n,message", [
    ([1, 5], 5, "must run from 0 to len"), ([0, 4], 5, "must run from 0 to len"),
    ([], 0, "must run from 0 to len"), ([0, 4, 2, 5], 5, r"offsets\[1\] = 4 > offsets\[2\] = 2"),
])
def test_bad_offsets(offsets, n, message):
    with pytest.raises(ValueError, match=message):
        _check_offsets(np.array(offsets, np.int64), n)


def test_good_offsets_pass():
    for offsets, n in (([0], 0), ([0, 0, 0], 0), ([0, 3, 3, 5], 5), ([0, 5], 5)):
        _check_offsets(np.array(offsets, np.int64), n)


def test_construction_errors():
    with pytest.raises(ValueError, match="unknown mode"):
        scangen.SegmentedScan(np.int32, mode="both")
    with pytest.raises(TypeError, match="bitwise"):
        scangen.SegmentedScan(np.float32, "bit_and")


# --- along the rows of an N-D array --------------------------------------------------------

@pytest.fixture
def launches(monkeypatch):
    """Every scan launch, recorded instead of run, on a simulated device."""
    from tests.support import record_launches, simulate_device

    simulate_device(monkeypatch)
    return record_launches(monkeypatch)


def device_array(shape, dtype, address):
    from tests.support import FakeDeviceArray
    return FakeDeviceArray(shape, dtype, address=address)


def test_rows_kernels_start_a_segment_at_each_row():
    seg = scangen.SegmentedScan(np.float64, scangen.LAST_NONZERO, mode="exclusive",
                                reverse=True)
    for form, dtype, head in (("flags", np.uint8, "flags[i] != 0"),
                              ("keys", np.int32, "i == 0 || keys[i] != keys[i - 1]")):
        kernel = seg.rows_kernel(form, dtype)
        hooks = kernel.scan_module.hooks
        assert hooks.is_segment_start_expr == f"i % row_length == 0 || {head}"
        assert [a.name for a in kernel.arguments] == ["x", form, "out", "row_length"]
        assert kernel.arguments[-1].declaration == "long long row_length"
        assert hooks.reverse and hooks.output_statement == "out[i] = prev_item;"
        assert kernel.scan_module.run_heads is None  # the heads come with each item
        assert seg.rows_kernel(form, np.dtype(dtype)) is kernel
        assert kernel is not seg.kernel(form, dtype)
    with pytest.raises(ValueError, match="offsets= are CSR offsets of a 1-D array"):
        seg.rows_kernel("offsets")


@pytest.mark.parametrize("form,dtype", [("flags", np.bool_), ("keys", np.int64)])
@pytest.mark.parametrize("shape", [(3, 1000), (2, 3, 7), (1, 500), (4, 1), (0, 9), (9, 0)])
def test_rows_launch_with_their_length(launches, form, dtype, shape):
    seg = scangen.SegmentedScan(np.float32, "add", initial=1.0)
    x = device_array(shape, np.float32, 0x10000)
    index = device_array(shape, dtype, 0x80000)
    out = device_array(shape, np.float32, 0x100000)
    assert seg(x, out, axis=-1, initial=2.5, **{form: index}) is out
    n = int(np.prod(shape))
    if n == 0:
        assert launches == []
        return
    (launch,) = launches
    assert launch.n == n and launch.values[:3] == (0x10000, 0x80000, 0x100000)
    assert float(launch.values[-1]) == 2.5  # the call's initial value, last
    if n == shape[-1]:  # one row: the 1-D form
        assert launch.title == f"segmented inclusive scan by {form}"
        assert len(launch.values) == 4
    else:
        assert launch.title == f"segmented inclusive scan of rows by {form}"
        assert launch.values[3] == shape[-1]


def test_rows_refuse_what_they_cannot_scan(launches):
    seg = scangen.SegmentedScan(np.float32)
    x = device_array((3, 40), np.float32, 0x10000)
    flags = device_array((3, 40), np.bool_, 0x80000)
    with pytest.raises(ValueError, match="along its last axis only .* not axis 0"):
        seg(x, flags=flags, axis=0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        seg(x, flags=flags, axis=2)
    with pytest.raises(ValueError, match="offsets= are CSR offsets of a 1-D array"):
        seg(x, offsets=device_array(4, np.int64, 0x80000))
    with pytest.raises(ValueError, match=r"flags has shape \(120,\); expected x's shape"):
        seg(x, flags=device_array(120, np.bool_, 0x80000))
    with pytest.raises(ValueError, match=r"out has shape \(40, 3\)"):
        seg(x, device_array((40, 3), np.float32, 0x100000), flags=flags)
    with pytest.raises(TypeError, match="out has dtype float64; expected float32"):
        seg(x, device_array((3, 40), np.float64, 0x100000), flags=flags)
    with pytest.raises(TypeError, match="keys has dtype float32"):
        seg(x, keys=device_array((3, 40), np.float32, 0x80000))
    with pytest.raises(ValueError, match="axis 1 is out of range"):
        seg(device_array(40, np.float32, 0x10000), flags=device_array(40, np.bool_, 0x80000),
            axis=1)
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        seg(device_array((), np.float32, 0x10000), flags=device_array((), np.bool_, 0x80000))
    assert launches == []


@needs_nvcc
def test_rows_kernels_compile():
    seg = scangen.SegmentedScan(np.uint64, scangen.LAST_NONZERO, reverse=True)
    seg.rows_kernel("flags").check_compile()
    seg.rows_kernel("keys", np.int32).check_compile()
