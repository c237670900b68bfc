"""Every public kernel class is inspected the same way, without a GPU: ``.source`` (its CUDA),
``.plan(n)`` where one scan does its work, ``.check_compile()`` (nvcc from PATH) and a repr
that names its dtype and options."""


import numpy as np
import pytest

import scangen
import scangen.compile
import scangen.primitives.compaction
from scangen.arith import ceil_div
from scangen.modules import ModulePlan
from scangen.plan import BufferArg, Plan
from tests.support import ARGMAX, VALUE_INDEX, needs_nvcc

#: id -> (build, what the repr names, entry points the source defines, whether one scan does
#: its work: its plan is that scan's).
#: Options differ from the defaults where a class has any, so the repr must show them.
CLASSES = {
    "Scan": (lambda: scangen.Scan(np.int16, "max", mode="exclusive", reverse=True),
             ["Scan(int16", "'max'", "mode='exclusive'", "reverse=True", "algorithm="],
             ["scan_one_section_user"], True),
    "Scan of a struct": (lambda: scangen.Scan(VALUE_INDEX, ARGMAX),
                         ["Scan([('value', '<i4'), ('index', '<i8')]", "'argmax'"],
                         ["scan_one_section_user"], True),
    "SegmentedScan of a struct": (lambda: scangen.SegmentedScan(VALUE_INDEX, ARGMAX),
                                  ["SegmentedScan([('value', '<i4'), ('index', '<i8')]", "'argmax'"],
                                  ["scan_one_section_user"], True),
    "ScanKernel": (lambda: scangen.ScanKernel(np.float32, "min", arguments="const float *x",
                                              input_expr="x[i]", output_statement=""),
                   ["ScanKernel(float32", "'min'", "input_expr='x[i]'"],
                   ["scan_one_section_user"], True),
    "SegmentedScan": (lambda: scangen.SegmentedScan(np.float64, "mul", mode="exclusive",
                                                    initial=2.0, strategy="hierarchical"),
                      ["SegmentedScan(float64", "'mul'", "mode='exclusive'", "initial=",
                       "strategy='hierarchical'", "section_size="],
                      ["scan_sections_user", "add_prefixes_user"], True),
    "Select": (lambda: scangen.Select(np.uint16, "x % 3 == 0", keep=False),
               ["Select(uint16", "'x % 3 == 0'", "keep=False", "items_per_thread="],
               ["scan_one_section_user"], True),
    "Select flags": (lambda: scangen.Select(np.complex64, flags=np.int8, algorithm="brent_kung"),
                     ["Select(complex64", "flags=int8", "algorithm='brent_kung'"],
                     ["scan_one_section_user"], True),
    "Partition": (lambda: scangen.Partition(np.float32, "x < 0.0f"),
                  ["Partition(float32", "'x < 0.0f'", "strategy="],
                  ["scan_one_section_user"], True),
    "Unique": (lambda: scangen.Unique(np.int64, section_size=256),
               ["Unique(int64", "section_size=256"], ["scan_one_section_user"], True),
    "RunLengthEncode": (lambda: scangen.RunLengthEncode(np.uint8),
                        ["RunLengthEncode(uint8", "algorithm="],
                        ["scan_one_section_user"], True),
    "FlatNonzero": (lambda: scangen.FlatNonzero(np.float16, section_size=512),
                    ["FlatNonzero(float16", "section_size=512"], ["scan_one_section_user"],
                    True),
    "FlatNonzero bool": (lambda: scangen.FlatNonzero(np.bool_, strategy="reduce_then_scan"),
                         ["FlatNonzero(bool", "strategy='reduce_then_scan'"],
                         ["scan_one_section_user", "reduce_sections_user"], True),
    "RadixSort": (lambda: scangen.RadixSort(np.float64, np.int32),
                  ["RadixSort(float64", "value_dtype=int32"],
                  ["radix_digit_counts", "radix_onesweep"], False),
    "RadixDigitOffsets": (lambda: scangen.RadixDigitOffsets(np.uint32, bits=6),
                          ["RadixDigitOffsets(uint32", "bits=6"],
                          ["radix_tile_counts", "radix_tile_places", "scan_one_section_user"],
                          False),
    "RadixDigitOffsets wide": (lambda: scangen.RadixDigitOffsets(np.int16, bits=12),
                               ["RadixDigitOffsets(int16", "bits=12"],
                               ["radix_onesweep", "radix_places_from_order",
                                "radix_digit_starts"], False),
    "Histogram": (lambda: scangen.Histogram(np.int32), ["Histogram(int32"],
                  ["histogram_counts"], False),
}


def test_every_public_kernel_class_is_covered():
    classes = {name for name in scangen.__all__ if isinstance(getattr(scangen, name), type)
               and hasattr(getattr(scangen, name), "source")}
    covered = {case.split()[0] for case in CLASSES}
    assert classes == covered


@pytest.mark.parametrize("case", CLASSES)
def test_source_defines_the_entry_points(case):
    build, _, entry_points, _ = CLASSES[case]
    source = build().source
    assert isinstance(source, str)
    for name in entry_points:
        assert f"{name}(" in source, name


@pytest.mark.parametrize("case", CLASSES)
def test_repr_names_dtype_and_options(case):
    build, names, _, _ = CLASSES[case]
    text = repr(build())
    assert " object at 0x" not in text
    for name in names:
        assert name in text, (name, text)


@pytest.mark.parametrize("case", CLASSES)
def test_plan_lists_launches(case):
    plan = CLASSES[case][0]().plan(1000)
    # a scan's plan where one scan does the work, else the primitive's own
    assert isinstance(plan, Plan if CLASSES[case][3] else ModulePlan)
    assert plan.n == 1000 and plan.launches
    assert "n=1000" in str(plan)


@pytest.mark.parametrize("case", CLASSES)
def test_check_compile_hands_every_module_to_nvcc(case, monkeypatch):
    """Without nvcc: what check_compile would compile covers the source (every module it
    prints) and nothing fails before nvcc."""
    compiled = []
    record = lambda module: compiled.append(module.module_source().text)  # noqa: E731
    monkeypatch.setattr(scangen.compile, "check_with_nvcc", record)  # every class calls it
    obj = CLASSES[case][0]()
    obj.check_compile()
    assert compiled
    source = obj.source
    assert all(text in source for text in compiled[:1])
    assert sum(len(text) for text in compiled) >= len(source) - len(compiled)


def test_segmented_source_is_the_flags_form_built_at_construction():
    seg = scangen.SegmentedScan(np.int32, "add")
    assert seg.source == seg.kernel("flags", np.bool_).source
    assert "flags[i] != 0" in seg.source
    # offsets: segments in tiles of their own, or where a strategy is named head bits
    assert seg.kernel("offsets") is seg.segment_tiles_kernel
    assert seg.segment_tiles_kernel.scan_module.hooks.segment_tiles
    named = scangen.SegmentedScan(np.int32, "add", strategy="chained")
    assert named.segment_tiles_kernel is None and named.kernel("offsets") is named.bits_kernel
    assert "segment_heads(const long long" in seg.heads_module().source
    assert "keys[i] != keys[i - 1]" in seg.kernel("keys", np.uint8).source


def test_segmented_plan_takes_a_form_and_index_dtype():
    seg = scangen.SegmentedScan(np.float32, "max", reverse=True)
    for form in ("flags", "keys"):
        plan = seg.plan(5000, form=form)
        assert plan.launches and f"by {form}" in str(plan)
        assert plan.scan_module == seg.kernel(form).scan_module
    # offsets in no more segments than sections: the offsets checked, the checkpoint a
    # checked call waits for, the layout's scan, the segment tiles' scan
    section = seg.segment_tiles_kernel.spec.section_size
    plan = seg.plan(5000, form="offsets", index_dtype=np.int32)
    assert isinstance(plan, ModulePlan) and "by int32 offsets" in str(plan)
    heads, checked, layout, tiles = plan.steps
    assert heads.kernel.module == seg.heads_module(np.int32)
    assert dict(heads.args)["heads"] is None  # checking only
    assert checked.name == "offsets checked"
    assert layout.kernel is seg.layout_kernel(np.int32) and layout.n == 2
    assert tiles.kernel is seg.segment_tiles_kernel and tiles.layout == 1
    assert plan.launches[-1].kernel.name == "scan_segments_user"
    segments = ceil_div(5000, section)
    assert len(seg.plan(5000, form="offsets", segments=segments).steps) == 4
    # more segments than sections: head bits set by the heads kernel, the scan by them
    plan = seg.plan(5000, form="offsets", index_dtype=np.int32, segments=segments + 1)
    heads, checked, scan = plan.steps
    assert dict(heads.args)["heads"] is not None and checked.name == "offsets checked"
    assert scan.kernel is seg.bits_kernel
    assert plan.launches[1:] == seg.bits_kernel.plan(5000).launches
    assert seg.plan(100, form="keys", index_dtype=np.int8).scan_module == \
        seg.kernel("keys", np.dtype(np.int8)).scan_module
    # the default index dtypes
    assert seg.kernel("offsets") is seg.kernel("offsets", np.int64)
    assert seg.kernel("keys") is seg.kernel("keys", np.dtype(np.int64))


def test_segmented_check_compile_compiles_every_form_or_the_one_named(monkeypatch):
    titles = []
    monkeypatch.setattr(scangen.compile, "check_with_nvcc", lambda module: titles.append(
        module.hooks.title if hasattr(module, "hooks") else module.description))
    seg = scangen.SegmentedScan(np.uint32, "bit_xor")
    seg.check_compile()  # every module once
    section = seg.segment_tiles_kernel.spec.section_size
    offsets = ["segmented inclusive scan by head bits",
               f"segment tiles of {section} from int64 offsets",
               "segmented inclusive scan by offsets, each segment in tiles of its own"]
    assert titles == ["segmented inclusive scan by flags", "segment heads from int64 offsets",
                      *offsets, "segmented inclusive scan by keys"]
    titles.clear()
    seg.check_compile(form="offsets", index_dtype=np.int32)
    assert titles == ["segment heads from int32 offsets",
                      *(title.replace("int64", "int32") for title in offsets)]


@pytest.mark.parametrize("call,error,message", [
    (lambda seg: seg.plan(10, form="rows"), ValueError, "form='rows': use 'flags', 'offsets'"),
    (lambda seg: seg.check_compile(form="key"), ValueError, "form='key'"),
    (lambda seg: seg.plan(10, form="keys", index_dtype=np.bool_), TypeError,
     "keys has dtype bool; use one of int8"),
    (lambda seg: seg.plan(10, form="offsets", index_dtype=np.uint32), TypeError,
     "offsets has dtype uint32; use one of int32, int64"),
    (lambda seg: seg.check_compile(index_dtype=np.int32), TypeError, "give form= too"),
    (lambda seg: seg.plan(10, form="flags", segments=3), TypeError,
     "segments= is the offsets form's"),
    (lambda seg: seg.plan(10, form="offsets", segments=0), ValueError,
     r"number of segments \(an int of at least 1\), not 0"),
    (lambda seg: seg.plan(10, form="offsets", segments=-2), ValueError, "not -2"),
    (lambda seg: seg.plan(10, form="offsets", segments=1.5), ValueError, "not 1.5"),
    (lambda seg: seg.plan(10, form="offsets", segments=True), ValueError, "not True"),
])
def test_segmented_inspection_refuses_unknown_forms_and_dtypes(call, error, message):
    with pytest.raises(error, match=message):
        call(scangen.SegmentedScan(np.int64, "add"))


def test_run_length_encode_plans_its_heads_scan_and_lengths_from_two_to_the_32():
    rle = scangen.RunLengthEncode(np.int32)
    assert rle.plan(2**32 - 1).scan_module == rle.kernel.scan_module
    wide = rle.plan(2**32)
    heads, lengths = rle.wide_kernels()
    assert wide.steps[0].kernel is heads and wide.steps[0].n == 2**32
    assert wide.launches[:-1] == heads.plan(2**32).launches
    last = wide.launches[-1]
    assert last.kernel.module == lengths and last.kernel.name == "run_lengths"
    assert dict(last.args) == {"starts": BufferArg("starts"), "counts": BufferArg("counts"),
                               "runs": BufferArg("count"), "end": 2**32}
    assert "run_lengths<<<" in str(wide) and "run_length_encode heads" in str(wide)


@needs_nvcc
def test_segmented_check_compile_runs_nvcc_on_every_form():
    # A non-commutative operator: each form's kernel keeps the operands in order.
    scangen.SegmentedScan(np.uint64, scangen.LAST_NONZERO, mode="exclusive").check_compile()


@needs_nvcc
def test_segmented_check_compile_names_the_operator_of_a_form_that_fails():
    broken = scangen.Operator("a +* b", 0, name="typo")
    seg = scangen.SegmentedScan(np.int32, broken)
    with pytest.raises(scangen.ScanCompileError, match="in your operator"):
        seg.check_compile(form="keys", index_dtype=np.int16)
