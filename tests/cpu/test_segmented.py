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
