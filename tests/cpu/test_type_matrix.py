"""The type matrix, as CUB's tests have one: every public entry point with every element
type it documents, rendered on any machine and compiled by nvcc where it is on PATH (all
modules at once on tests.support.nvcc's pool, each once). A dtype an entry point does not
take is refused at construction with a TypeError naming the dtype and what is taken.

tests/gpu/test_type_matrix.py runs the same pairs against references."""
import importlib
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import scangen
from scangen import one_shot
from scangen.primitives import compaction, nonzero, radix
from scangen.types import MASK_C_TYPES, c_equal, element_type
from tests.support import (BFLOAT16, ELEMENT_DTYPES, MIXED, dtype_label, keep_predicate,
                           sum_operator)
from tests.support.nvcc import UNOPTIMISED, Entry, compiling, needs_nvcc, results

#: The module (scangen.primitives exports the function of the same name).
histogram = importlib.import_module("scangen.primitives.histogram")

#: What the radix passes and histograms take: keys of these dtypes only.
KEYS = radix.KEY_DTYPES
#: dtypes no entry point documents: each must be refused up front (the struct for its field).
UNDOCUMENTED = [np.dtype(np.bool_), np.dtype("datetime64[ns]"), np.dtype("U4"),
                np.dtype(object), np.dtype([("ok", np.int32), ("flag", np.bool_)])]
#: How element_type refuses those.
UNSUPPORTED = r"unsupported (value_)?dtype|which scangen cannot put in a struct"


@dataclass(frozen=True)
class EntryPoint:
    """A public entry point: ``build(dtype)`` makes its object (what a user constructs, or
    what a one-shot function builds and caches), ``takes`` the element dtypes it documents,
    ``refusal`` the pattern of its TypeError for the others."""

    name: str
    build: Callable
    takes: tuple
    refusal: str = UNSUPPORTED
    #: Why its modules are not compiled here (rendered only): where the element type meets
    #: C code no other entry point of the matrix compiles, it is compiled.
    compiled_elsewhere: str = ""


def _segmented(form, index_dtype):
    return lambda d: scangen.SegmentedScan(d, sum_operator(d)).kernel(form, np.dtype(index_dtype))


def _select(d, **options):
    return scangen.Select(d, keep_predicate(d)[0], **options)


EVERY = tuple(ELEMENT_DTYPES)
#: Why some entry points' modules are rendered here but not compiled (see compiled_elsewhere).
SAME = "the class it caches builds the same modules (test_one_shot_classes_are_the_classes)"
NEGATED = "Select's modules with the condition negated"
HEADS = "the heads come from an index array; the values are met as in SegmentedScan_flags"
KEYS_COMPILED = "test_compile_nvcc's radix_histogram batch compiles every key dtype's modules"
KEY_REFUSAL = "cannot be radix sorted; key dtypes are uint8, uint16"
#: What flatnonzero takes: a zero of its own (no struct), and bool.
NONZERO = tuple(d for d in EVERY if d.fields is None) + (np.dtype(np.bool_),)
NONZERO_REFUSAL = "flatnonzero takes bool, int8 .. uint64, float16"
ENTRY_POINTS = [
    EntryPoint("Scan", lambda d: scangen.Scan(d, sum_operator(d)), EVERY),
    # inclusive_scan and exclusive_scan build and cache Scans so
    EntryPoint("inclusive_scan", lambda d: one_shot._scan(d, sum_operator(d), "inclusive", None,
                                                          False, False, ()), EVERY,
               compiled_elsewhere=SAME),
    EntryPoint("exclusive_scan", lambda d: one_shot._scan(d, sum_operator(d), "exclusive", None,
                                                          False, False, ()), EVERY,
               compiled_elsewhere="Scan's values in the other mode"),
    EntryPoint("ScanKernel", lambda d: scangen.ScanKernel(
        d, sum_operator(d), arguments="const scan_t *x, scan_t *out", input_expr="x[i]",
        output_statement="out[i] = prev_item;", reverse=True, title="type matrix"), EVERY),
    EntryPoint("SegmentedScan_flags", _segmented("flags", np.bool_), EVERY),
    EntryPoint("SegmentedScan_offsets", _segmented("offsets", np.int64), EVERY,
               compiled_elsewhere="it scans with SegmentedScan_flags' kernel; its heads "
                                  "kernel takes no element type (test_segmented compiles it)"),
    EntryPoint("SegmentedScan_keys", _segmented("keys", np.int32), EVERY,
               compiled_elsewhere=HEADS),
    EntryPoint("Select_predicate", _select, EVERY),
    EntryPoint("Select_flags", lambda d: scangen.Select(d, flags=np.bool_), EVERY),
    # select, remove_if, partition, unique and run_length_encode build and cache these
    EntryPoint("select_predicate", lambda d: compaction._select(
        d, keep_predicate(d)[0], None, True), EVERY, compiled_elsewhere=SAME),
    EntryPoint("select_flags", lambda d: compaction._select(d, None, np.dtype(np.bool_), True),
               EVERY, compiled_elsewhere=SAME),
    EntryPoint("remove_if_predicate", lambda d: compaction._select(
        d, keep_predicate(d)[0], None, False), EVERY, compiled_elsewhere=NEGATED),
    EntryPoint("remove_if_flags", lambda d: compaction._select(d, None, np.dtype(np.int32),
                                                               False), EVERY,
               compiled_elsewhere=NEGATED),
    EntryPoint("Partition", lambda d: scangen.Partition(d, keep_predicate(d)[0]), EVERY),
    EntryPoint("partition", lambda d: compaction._partition(d, keep_predicate(d)[0]), EVERY,
               compiled_elsewhere=SAME),
    EntryPoint("Unique", scangen.Unique, EVERY),
    EntryPoint("unique", compaction._unique, EVERY, compiled_elsewhere=SAME),
    EntryPoint("RunLengthEncode", scangen.RunLengthEncode, EVERY),
    EntryPoint("run_length_encode", compaction._run_length_encode, EVERY,
               compiled_elsewhere=SAME),
    EntryPoint("FlatNonzero", scangen.FlatNonzero, NONZERO, NONZERO_REFUSAL),
    EntryPoint("flatnonzero", nonzero._flatnonzero, NONZERO, NONZERO_REFUSAL,
               compiled_elsewhere=SAME),
    EntryPoint("RadixSort_keys", scangen.RadixSort, KEYS, KEY_REFUSAL, KEYS_COMPILED),
    EntryPoint("RadixSort_values", lambda d: scangen.RadixSort(np.uint32, d), EVERY),
    EntryPoint("radix_sort_values", lambda d: radix._radix_sort(np.dtype(np.uint64), d), EVERY,
               compiled_elsewhere="RadixSort_values' values, with other keys"),
    EntryPoint("argsort", lambda d: radix._radix_sort(d, np.dtype(np.int64), True), KEYS,
               KEY_REFUSAL, KEYS_COMPILED),
    EntryPoint("RadixDigitOffsets", scangen.RadixDigitOffsets, KEYS, KEY_REFUSAL, KEYS_COMPILED),
    EntryPoint("radix_digit_offsets", lambda d: radix._digit_offsets(d, 8), KEYS, KEY_REFUSAL,
               KEYS_COMPILED),
    EntryPoint("Histogram", scangen.Histogram, KEYS, "histogram takes a dtype of uint8, uint16",
               KEYS_COMPILED),
    EntryPoint("histogram", histogram._histogram, KEYS, "histogram takes a dtype of uint8, uint16",
               KEYS_COMPILED),
]


def taken(point):
    return [pytest.param(point, d, id=f"{point.name}-{dtype_label(d)}") for d in point.takes]


def refused(point):
    return [pytest.param(point, d, id=f"{point.name}-{dtype_label(d)}")
            for d in [*EVERY, *UNDOCUMENTED] if d not in point.takes]


# --- every documented pair renders; every other dtype is refused ---------------------------

@pytest.mark.parametrize("point,dtype", [p for e in ENTRY_POINTS for p in taken(e)])
def test_every_documented_dtype_renders(point, dtype):
    thing = point.build(dtype)
    # bool, no element type, is a mask's C type (flatnonzero's)
    etype = None if dtype == np.bool_ else element_type(dtype)
    c_name = MASK_C_TYPES[dtype] if etype is None else etype.c_name
    assert c_name in thing.source, f"{point.name} of {dtype} renders no {c_name}"
    for spec in thing.modules_to_compile():
        text = spec.module_source().text
        code = re.search(rf"^(?!\s*//).*\b{c_name}\b", text, re.M)  # its first use in code
        for header in () if etype is None else etype.includes:
            assert code is None or text.index(f"#include <{header}>") < code.start()


@pytest.mark.parametrize("point,dtype", [p for e in ENTRY_POINTS for p in refused(e)])
def test_every_other_dtype_is_refused_up_front(point, dtype):
    with pytest.raises(TypeError, match=point.refusal) as caught:
        point.build(dtype)
    if point.refusal != UNSUPPORTED:  # names the dtype refused (element_type's too, its way)
        assert str(dtype) in str(caught.value)


def test_the_matrix_covers_every_type_and_entry_point():
    names = {dtype_label(d) for d in EVERY}
    assert names >= {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                     "float16", "float32", "float64", "complex64", "complex128"}
    assert BFLOAT16 is None or "bfloat16" in names
    assert sum(d.fields is not None for d in EVERY) == 2
    # every primitive, as its module lists it (scangen.primitives), and the scans
    for name in ["Scan", "ScanKernel", "SegmentedScan", "inclusive_scan", "exclusive_scan",
                 *scangen.primitives.__all__]:
        assert name in scangen.__all__
        assert any(re.fullmatch(rf"{name}(_\w+)?", p.name) for p in ENTRY_POINTS), name


@pytest.mark.parametrize("dtype", [pytest.param(d, id=dtype_label(d)) for d in EVERY])
def test_one_shot_classes_are_the_classes(dtype):
    """What select, partition, unique, run_length_encode, flatnonzero and inclusive_scan build
    and cache has the modules of the class the matrix compiles (so those are not compiled twice)."""
    predicate, op = keep_predicate(dtype)[0], sum_operator(dtype)
    pairs = [(compaction._select(dtype, predicate, None, True), scangen.Select(dtype, predicate)),
             (compaction._select(dtype, None, np.dtype(np.bool_), True),
              scangen.Select(dtype, flags=np.bool_)),
             (compaction._partition(dtype, predicate), scangen.Partition(dtype, predicate)),
             (compaction._unique(dtype), scangen.Unique(dtype)),
             (compaction._run_length_encode(dtype), scangen.RunLengthEncode(dtype)),
             (one_shot._scan(dtype, op, "inclusive", None, False, False, ()),
              scangen.Scan(dtype, op))]
    if dtype in NONZERO:
        pairs.append((nonzero._flatnonzero(dtype), scangen.FlatNonzero(dtype)))
    for cached, made in pairs:
        assert cached.modules_to_compile() == made.modules_to_compile()


# --- the docstrings say what is taken --------------------------------------------------------

@pytest.mark.parametrize("thing", [scangen.Scan, scangen.ScanKernel, scangen.SegmentedScan,
                                   scangen.Select, scangen.Partition, scangen.Unique,
                                   scangen.RunLengthEncode])
def test_docstrings_of_every_type_entry_points_name_every_type(thing):
    doc = " ".join(thing.__doc__.split())
    for name in ("int8 .. uint64", "float16", "float32", "float64", "complex64", "complex128",
                 "bfloat16", "structured dtype"):
        assert name in doc, f"{thing.__name__}'s docstring does not name {name}"


def test_docstrings_of_key_entry_points_name_their_keys():
    assert "Keys: uint8..uint64, int8..int64, float32, float64" in \
        " ".join(scangen.RadixSort.__doc__.split())
    assert "Dtypes: the integers, float32, float64." in scangen.Histogram.__doc__


# --- what the element types bring to a compaction ----------------------------------------------

def test_a_compaction_brings_its_element_type_before_the_predicate():
    """The element type's headers and declarations come first; the predicate's function is
    scangen's own code, the predicate alone the user's (so errors blame the right piece)."""
    select = scangen.Select(MIXED, "x.flag > 1")
    text = select.source
    assert text.index("#include <cuda_fp16.h>") < text.index("struct scangen_struct1") < \
        text.index("bool scangen_keep(const scangen_struct1 x, long long i)")
    source = select.kernel.scan_module.module_source()
    assert set(source.user_spans) == {"predicate", "input_expr", "output_statement",
                                      "operator", "dtype"}
    line = text[:text.index("bool scangen_keep(")].count("\n") + 1
    assert source.user_piece_at(line) is None
    assert "// user preamble" not in text


@pytest.mark.parametrize("dtype", [np.float16] + ([BFLOAT16] if BFLOAT16 is not None else []))
def test_a_half_element_meets_the_predicate_as_a_float(dtype):
    """CUDA's __half and __nv_bfloat16 do not compare with a float literal (x > 0.5f is
    ambiguous to nvcc); the predicate sees the value as a float, exactly."""
    text = scangen.Select(dtype, "x > 0.5f").source
    assert "bool scangen_keep(const float x, long long i)" in text


def test_equality_is_numpys_scalar_by_scalar():
    assert c_equal(element_type(np.int32), "a", "b") == "a == b"
    assert c_equal(element_type(np.float16), "a", "b") == "(float)a == (float)b"
    assert c_equal(element_type(np.complex128), "a", "b") == "a.re == b.re && a.im == b.im"
    assert c_equal(element_type(MIXED), "a", "b") == (
        "(a.flag == b.flag) && (a.v == b.v) && (a.idx[0] == b.idx[0]) && "
        "(a.idx[1] == b.idx[1]) && ((a.inner.a == b.inner.a) && "
        "((float)a.inner.h == (float)b.inner.h))")
    for thing in (scangen.Unique(MIXED), scangen.RunLengthEncode(np.complex64)):
        assert "(i == 0 || !scangen_equal(x[i], x[i - 1]))" in thing.source


def test_a_kernel_declares_the_types_its_arguments_name():
    """ScanKernel's types=: the headers and declarations of dtypes besides the scan type,
    each once; two struct dtypes of one C name are refused."""
    kernel = scangen.ScanKernel(np.int64, "add", arguments="const __half *h, const "
                                "scangen_complex64 *c, long long *out",
                                input_expr="(float)h[i] > c[i].re ? 1 : 0",
                                output_statement="out[i] = item;",
                                types=(np.float16, np.complex64, np.float16))
    text = kernel.source
    assert text.count("#include <cuda_fp16.h>") == 1
    assert text.count("struct scangen_complex64\n") == 1
    other = np.dtype([("m", np.int8)])
    with pytest.raises(TypeError, match="cannot share a module .* scangen_struct0"):
        scangen.ScanKernel(MIXED, sum_operator(MIXED), arguments="const scan_t *x, "
                           "scan_t *out", input_expr="x[i]", output_statement="out[i] = item;",
                           types=(other,))


# --- Select's flags take the mask's dtype ----------------------------------------------------

@pytest.mark.parametrize("mask", [np.zeros(3, bool), np.ones(4, np.int32)])
def test_select_takes_the_dtype_of_a_mask_and_says_so_for_a_mask(mask):
    with pytest.raises(TypeError, match=r"takes the dtype of the mask, not the mask \(an array "
                                        rf"of {mask.dtype}\).*flags=mask.dtype.*sel\(x, mask\)"):
        scangen.Select(np.float32, flags=mask)
    assert scangen.Select(np.float32, flags=mask.dtype).flags_dtype == mask.dtype


def test_select_refuses_flags_that_name_no_dtype():
    with pytest.raises(TypeError, match="flags= takes the dtype of the mask .* not 3"):
        scangen.Select(np.float32, flags=3)
    with pytest.raises(TypeError, match="flags must be bool or an integer dtype, not float16"):
        scangen.Select(np.float32, flags=np.float16)


# --- nvcc compiles every documented pair -------------------------------------------------------

COMPILED = [p for p in ENTRY_POINTS if not p.compiled_elsewhere]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Entry point name -> Futures of every module of its documented pairs, compiled
    unoptimised (every stage runs; what C code of a type cannot do fails there too)."""
    batches = {point.name: [Entry(f"{point.name} {dtype_label(d)}", spec)
                            for d in point.takes for spec in point.build(d).modules_to_compile()]
               for point in COMPILED}
    with compiling(batches, tmp_path_factory.mktemp("type_matrix"), UNOPTIMISED) as futures:
        yield futures


@needs_nvcc
@pytest.mark.parametrize("point", COMPILED, ids=lambda p: p.name)
def test_every_documented_dtype_compiles(compiled, point):
    done = results(compiled, point.name)
    failed = [r for r in done if r.returncode != 0]
    report = "\n".join(line for r in failed for line in r.diagnostics("error"))
    assert not failed, (f"nvcc failed on {len(failed)} module(s) of {point.name}:\n{report}\n"
                        f"--- log of the first ---\n{failed[0].log[-4000:]}")
    warnings = [line for r in done for line in r.diagnostics("warning")]
    assert not warnings, "\n".join(warnings)
