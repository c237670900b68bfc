"""Shared memory: the defaults fit every algorithm, value width and kind of scan.

A section the user leaves unnamed must fit the static shared memory of a block (48 KiB)
whatever is scanned: wide structs, segmented (value, head) pairs, counting scans. These
build every algorithm x strategy x value width with no section named, check the spec,
render it, and compile a few with nvcc where it is on PATH.
"""
import dataclasses
import shutil

import numpy as np
import pytest

from scangen import ALGORITHMS, STRATEGIES, Scan, ScanKernel, SegmentedScan, tuning
from scangen.spec import MAX_STATIC_SHARED_BYTES
from tests.support import COMPACTION, WIDE_STRUCTS, field_sums

NVCC = shutil.which("nvcc")

#: From 1-byte integers to a 48-byte struct.
DTYPES = [np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.float32), np.dtype(np.float64),
          np.dtype(np.complex128), *WIDE_STRUCTS.values()]


def _operator(dtype):
    return field_sums(dtype) if dtype.names else "add"


def _tuned(spec, counts=False):
    """(section, items per thread) the defaults start from, before any shrinking."""
    if spec.algorithm == "warp_shuffle":
        tile = tuning.COUNTING if counts else tuning.fast_path(spec.acc_itemsize)
        return tile.section_size, tile.items_per_thread
    return tuning.DEFAULT_SECTION_SIZE, ALGORITHMS[spec.algorithm].default_items_per_thread


def _check_default(spec, counts=False):
    """The default fits, and is the first that fits of the tuned tile and its halvings:
    first of the items per thread (coarsening algorithms), then of the threads."""
    assert spec.shared_bytes <= MAX_STATIC_SHARED_BYTES, spec
    section, items = _tuned(spec, counts)
    coarsening = ALGORITHMS[spec.algorithm].coarsening_is_parameter
    while True:
        candidate = dataclasses.replace(spec, section_size=section, items_per_thread=items)
        if candidate.shared_bytes <= MAX_STATIC_SHARED_BYTES:
            break
        section //= 2
        if coarsening and items > 1:
            items //= 2
    assert (spec.section_size, spec.items_per_thread) == (section, items), spec


def _name(dtype):
    return f"struct{dtype.itemsize}" if dtype.names else dtype.name


@pytest.mark.parametrize("segmented", [False, True], ids=["plain", "segmented"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_the_default_section_fits(dtype, algorithm, segmented):
    for strategy in STRATEGIES:
        if segmented:
            kernel = SegmentedScan(dtype, _operator(dtype), algorithm=algorithm,
                                   strategy=strategy).kernel("flags", np.dtype(np.bool_))
        else:
            kernel = Scan(dtype, _operator(dtype), algorithm=algorithm, strategy=strategy)
        _check_default(kernel.spec)
        assert kernel.spec.segmented == segmented
        assert "__global__" in kernel.source


def test_the_reported_struct_with_double_buffering():
    """(count, mean, m2) with kogge_stone_double_buffered and no section: two buffers of
    1024 24-byte values do not fit; half of them do."""
    dtype = WIDE_STRUCTS[24]
    scan = Scan(dtype, field_sums(dtype), algorithm="kogge_stone_double_buffered")
    assert scan.spec.section_size == 512
    _check_default(scan.spec)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_the_default_counting_section_fits(dtype, algorithm):
    for strategy in ("auto", "hierarchical", "reduce_then_scan"):
        kernel = ScanKernel(dtype, "add", counts=True, algorithm=algorithm, strategy=strategy,
                            arguments="const float *x, long long *out",
                            input_expr="x[i] > 0.5f", output_statement="out[i] = item;")
        _check_default(kernel.spec, counts=True)
        assert "__global__" in kernel.source


def test_the_tuned_tiles_are_kept_where_they_fit():
    """The shrinking leaves alone every default that fitted before."""
    assert Scan(np.float32).spec.section_size == tuning.fast_path(4).section_size
    assert Scan(np.float64).spec.section_size == tuning.fast_path(8).section_size
    counting = ScanKernel("int32", counts=True, **COMPACTION)
    assert (counting.spec.section_size, counting.spec.items_per_thread) == \
        (tuning.COUNTING.section_size, tuning.COUNTING.items_per_thread)
    for algorithm in ALGORITHMS:
        assert Scan(np.int32, algorithm=algorithm).spec.section_size == \
            (tuning.fast_path(4).section_size if algorithm == "warp_shuffle"
             else tuning.DEFAULT_SECTION_SIZE)


def test_only_what_the_user_left_unnamed_shrinks():
    dtype = WIDE_STRUCTS[48]
    # items per thread named: the section shrinks around them
    spec = Scan(dtype, field_sums(dtype), algorithm="coarsened", items_per_thread=2).spec
    assert spec.items_per_thread == 2 and spec.shared_bytes <= MAX_STATIC_SHARED_BYTES
    # a named section is the user's: refused, not shrunk
    with pytest.raises(ValueError, match="section_size 1024 of .* with coarsened needs"):
        Scan(dtype, field_sums(dtype), algorithm="coarsened", section_size=1024)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("algorithm,dtype,segmented", [
    ("kogge_stone_double_buffered", WIDE_STRUCTS[24], False),
    ("coarsened", WIDE_STRUCTS[32], True),
    ("warp_shuffle", WIDE_STRUCTS[48], True),
    ("brent_kung", WIDE_STRUCTS[12], True),
], ids=["double_buffered-24", "coarsened-32-segmented", "warp_shuffle-48-segmented",
        "brent_kung-12-segmented"])
def test_shrunk_defaults_compile(algorithm, dtype, segmented):
    if segmented:
        kernel = SegmentedScan(dtype, field_sums(dtype), algorithm=algorithm).kernel(
            "flags", np.dtype(np.bool_))
    else:
        kernel = Scan(dtype, field_sums(dtype), algorithm=algorithm)
    kernel.check_compile()
