"""SegmentedScan without a GPU: the kernel of each form, offsets validation, nvcc."""

import numpy as np
import pytest

import scangen

from tests.support import needs_nvcc
from scangen.segmented import _check_offsets


def test_each_form_is_a_segmented_scan_kernel():
    seg = scangen.SegmentedScan(np.float64, scangen.LAST_NONZERO, mode="exclusive")
    forms = {"flags": (np.bool_, "flags[i] != 0"),
             "keys": (np.int32, "i == 0 || keys[i] != keys[i - 1]"),
             "offsets": (np.int64, "scangen_is_offset(offsets, offset_count, i)")}
    for form, (dtype, head) in forms.items():
        kernel = seg.kernel(form, np.dtype(dtype))
        assert kernel.scan_module.hooks.is_segment_start_expr == head
        assert kernel.scan_module.hooks.output_statement == "out[i] = prev_item;"
        assert kernel.spec.segmented and kernel.dtype == np.float64
    assert seg.kernel("keys", np.dtype(np.int32)) is seg.kernel("keys", np.dtype(np.int32))


@needs_nvcc
def test_every_form_compiles():
    seg = scangen.SegmentedScan(np.uint64, "max", reverse=True, strategy="hierarchical")
    for form, dtype in (("flags", np.uint8), ("keys", np.int64), ("offsets", np.int32)):
        seg.kernel(form, np.dtype(dtype)).check_compile()


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
