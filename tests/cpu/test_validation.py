"""Construction-time validation: every bad request fails in make_spec / Scan, before any
compiler or GPU, with a message that says what to change.

Call-time checks (array dtype, shape, contiguity, out) need PyCUDA and live in tests/gpu.
"""
import dataclasses

import numpy as np
import pytest

import scangen
from scangen import ALGORITHMS, Operator, Scan, make_spec
from scangen.spec import MAX_BLOCK_THREADS, MAX_STATIC_SHARED_BYTES
from scangen.tuning import max_shared_bytes


#: The algorithms whose items per thread the user picks (Scan's docstring names them).
COARSENING = ("coarsened", "warp_shuffle")


def _via_scan(*args, **kwargs):
    return Scan(*args, **kwargs).spec


#: Both public doors run the same validation.
CONSTRUCTORS = [pytest.param(make_spec, id="make_spec"), pytest.param(_via_scan, id="Scan")]


@pytest.fixture(params=CONSTRUCTORS)
def build(request):
    return request.param


# --- names ----------------------------------------------------------------------------------

def test_unknown_algorithm(build):
    with pytest.raises(ValueError, match=r"unknown algorithm 'kogge'; choose one of .*brent_kung"):
        build("int32", "add", algorithm="kogge")


def test_unknown_operator_name(build):
    with pytest.raises(ValueError, match=r"unknown operator 'sum'; built-in operators are "
                                         r"add, mul, min, max, bit_and, bit_or, bit_xor"):
        build("int32", "sum")


def test_operator_of_the_wrong_kind(build):
    with pytest.raises(TypeError, match="operator must be a name or a scangen.Operator"):
        build("int32", np.add)


@pytest.mark.parametrize("mode", ["Inclusive", "scan", "", None])
def test_unknown_mode(mode):
    with pytest.raises(ValueError, match="unknown mode .*; use 'inclusive' or 'exclusive'"):
        Scan("int32", "add", mode=mode)


def test_unknown_strategy(build):
    with pytest.raises(ValueError, match=r"unknown strategy 'decoupled'; choose one of .*"
                                         r"hierarchical.*decoupled_lookback"):
        build("int32", "add", strategy="decoupled")


# --- section size -------------------------------------------------------------------------

@pytest.mark.parametrize("section_size", [1000, 3, 6, 1023, 1025, 0, 1, -1, -1024])
def test_section_size_must_be_a_positive_power_of_two(build, section_size):
    # 1 is refused too: a section of one element never shrinks the totals to scan.
    with pytest.raises(ValueError, match=f"section_size must be a power of two of at least 2, "
                                         f"not {section_size}"):
        build("int32", "add", algorithm="kogge_stone", section_size=section_size)


@pytest.mark.parametrize("section_size", [True, 64.0, "64", 2.0**10])
def test_section_size_must_be_an_int(build, section_size):
    with pytest.raises(TypeError, match="section_size must be an int"):
        build("int32", "add", section_size=section_size)


@pytest.mark.parametrize("algorithm,section_size,items,threads,largest", [
    ("naive", 2048, None, 2048, 1024),
    ("kogge_stone", 2048, None, 2048, 1024),
    ("kogge_stone_double_buffered", 2048, None, 2048, 1024),
    ("warp_shuffle", 4096, 1, 4096, 1024),
    ("brent_kung", 4096, None, 2048, 2048),
    ("coarsened", 8192, 4, 2048, 4096),
    ("coarsened", 2048, 1, 2048, 1024),
])
def test_section_too_large_for_1024_threads(build, algorithm, section_size, items, threads,
                                            largest):
    with pytest.raises(ValueError, match=rf"section_size {section_size} needs {threads} threads "
                                         rf"per block with {algorithm}.*the limit is "
                                         rf"{MAX_BLOCK_THREADS}: use section_size <= {largest}"):
        build("float32", "add", algorithm=algorithm, section_size=section_size,
              items_per_thread=items)


def test_coarsened_too_large_suggests_more_items(build):
    with pytest.raises(ValueError, match="or more items_per_thread"):
        build("int32", "add", algorithm="coarsened", section_size=8192, items_per_thread=4)


@pytest.mark.parametrize("algorithm,section_size,items,block", [
    ("kogge_stone", 1024, None, 1024),
    ("warp_shuffle", 1024, 1, 1024),
    ("brent_kung", 2048, None, 1024),
    ("coarsened", 4096, 4, 1024),
    ("coarsened", 8192, 8, 1024),
    ("coarsened", 4, 4, 1),
    ("brent_kung", 2, None, 1),
    ("kogge_stone", 2, None, 2),
])
def test_largest_and_smallest_sections_that_fit(build, algorithm, section_size, items, block):
    spec = build("float32", "add", algorithm=algorithm, section_size=section_size,
                 items_per_thread=items)
    assert spec.section_size == section_size
    assert spec.block_size == block
    assert spec.block_size * spec.items_per_thread == section_size


#: float32's tuned block (scangen.tuning.SCAN), which a named section keeps.
TUNED_BLOCK = scangen.tuning.SCAN.tile(4).block_size


@pytest.mark.parametrize("algorithm,section_size,block,items", [
    ("warp_shuffle", 1024, TUNED_BLOCK, 1024 // TUNED_BLOCK),
    ("warp_shuffle", 8192, TUNED_BLOCK, 8192 // TUNED_BLOCK),
    ("warp_shuffle", 64, 64, 1), ("warp_shuffle", 2, 2, 1),
    ("coarsened", 4096, TUNED_BLOCK, 4096 // TUNED_BLOCK), ("coarsened", 128, 128, 1),
])
def test_naming_a_section_keeps_the_tuned_block_size(build, algorithm, section_size, block,
                                                     items):
    """A named section of a coarsening algorithm derives the items per thread."""
    spec = build("float32", "add", algorithm=algorithm, section_size=np.int64(section_size))
    assert (spec.block_size, spec.items_per_thread) == (block, items)


def test_section_smaller_than_items_per_thread(build):
    with pytest.raises(ValueError, match="section_size 2 is smaller than items_per_thread 4"):
        build("int32", "add", algorithm="coarsened", section_size=2, items_per_thread=4)
    with pytest.raises(ValueError, match="section_size 4 is smaller than items_per_thread 8"):
        build("int32", "add", algorithm="warp_shuffle", section_size=4, items_per_thread=8)


# --- shared memory ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,section_size,items", [
    ("float64", 32768, 32), ("int64", 32768, 32), ("float32", 65536, 64), ("uint8", 262144, 256),
])
def test_section_too_large_for_shared_memory(build, dtype, section_size, items):
    """Past what a Hopper block may opt in to (scangen.tuning.MAX_SHARED_BYTES_OPTIN)."""
    with pytest.raises(ValueError, match=rf"{dtype} with coarsened needs \d+ bytes of shared "
                                         rf"memory; the limit of a block on sm_90 is "
                                         rf"{227 * 1024}: use a smaller section_size"):
        build(dtype, "add", algorithm="coarsened", section_size=section_size,
              items_per_thread=items)


def test_the_tuned_tile_of_wide_values_fits_shared_memory():
    """The tuned tile for values past 8 bytes (256 threads x 4) takes fewer items a thread
    where a section would not fit: a segmented scan of a 32-byte struct scans 40-byte
    (value, head) pairs, which 256 x 4 cannot hold."""
    from tests.support import MIXED, MIXED_COMBINE

    segmented = scangen.SegmentedScan(MIXED, MIXED_COMBINE).kernel("flags", np.dtype(bool))
    assert (segmented.spec.block_size, segmented.spec.items_per_thread) == (256, 2)
    assert segmented.spec.shared_bytes <= MAX_STATIC_SHARED_BYTES
    assert (Scan(MIXED, MIXED_COMBINE).spec.block_size,
            Scan(MIXED, MIXED_COMBINE).spec.items_per_thread) == (256, 4)


@pytest.mark.parametrize("dtype,section_size,items", [
    ("float64", 4096, 8), ("float32", 8192, 8), ("int16", 16384, 16), ("uint8", 32768, 32),
])
def test_shared_memory_up_to_the_limit_is_accepted(build, dtype, section_size, items):
    spec = build(dtype, "add", algorithm="coarsened", section_size=section_size,
                 items_per_thread=items)
    assert spec.shared_bytes <= MAX_STATIC_SHARED_BYTES


def test_every_accepted_spec_fits_the_limits():
    """Sweep sizes and coarsening factors: what make_spec accepts fits one block and the
    shared memory of a Hopper block (past 48 KiB, dynamically); what it refuses, it
    refuses with ValueError."""
    accepted = 0
    for algorithm in ALGORITHMS:
        items_choices = [1, 2, 4, 8, 16, 32, 64] if algorithm in COARSENING else [None]
        for dtype in ("uint8", "float32", "float64"):
            for items in items_choices:
                for exponent in range(0, 17):
                    try:
                        spec = make_spec(dtype, "max", algorithm=algorithm,
                                         section_size=2**exponent, items_per_thread=items)
                    except ValueError:
                        continue
                    accepted += 1
                    assert 1 <= spec.block_size <= MAX_BLOCK_THREADS
                    assert spec.shared_bytes <= max_shared_bytes("sm_90")
                    assert spec.dynamic_shared == (spec.shared_bytes > MAX_STATIC_SHARED_BYTES)
                    assert spec.shared_bytes >= spec.section_size * spec.etype.itemsize
                    assert spec.block_size * spec.items_per_thread == spec.section_size
    assert accepted > 100


# --- items per thread -----------------------------------------------------------------------

def test_the_coarsening_algorithms():
    assert {name for name, algo in ALGORITHMS.items() if algo.coarsening_is_parameter} == \
        set(COARSENING)


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a not in COARSENING])
def test_items_per_thread_is_refused_where_the_algorithm_fixes_it(build, algorithm):
    fixed = ALGORITHMS[algorithm].default_items_per_thread
    with pytest.raises(ValueError, match=rf"{algorithm} scans {fixed} item\(s\) per thread; "
                                         "items_per_thread is a parameter of"):
        build("int32", "add", algorithm=algorithm, section_size=256, items_per_thread=8)


@pytest.mark.parametrize("algorithm", COARSENING)
def test_items_per_thread_is_a_parameter_of_the_coarsening_algorithms(build, algorithm):
    for items in (1, 2, 4, 8, 16):
        spec = build("int32", "add", algorithm=algorithm, section_size=1024,
                     items_per_thread=items)
        assert spec.items_per_thread == items and spec.block_size == 1024 // items


@pytest.mark.parametrize("algorithm,items", [("kogge_stone", 1), ("brent_kung", 2),
                                             ("warp_shuffle", 1), ("naive", 1)])
def test_naming_an_algorithms_own_items_per_thread_is_fine(build, algorithm, items):
    assert build("int32", "add", algorithm=algorithm, section_size=256,
                 items_per_thread=items).items_per_thread == items


@pytest.mark.parametrize("items", [3, 6, 0, -4])
def test_items_per_thread_must_be_a_power_of_two(build, items):
    with pytest.raises(ValueError, match=f"items_per_thread must be a power of two, not {items}"):
        build("int32", "add", algorithm="coarsened", section_size=1024, items_per_thread=items)


@pytest.mark.parametrize("items", [True, 4.0, "4"])
def test_items_per_thread_must_be_an_int(build, items):
    with pytest.raises(TypeError, match="items_per_thread must be an int"):
        build("int32", "add", algorithm="coarsened", section_size=1024, items_per_thread=items)


# --- operators and types ------------------------------------------------------------------

@pytest.mark.parametrize("op", ["bit_and", "bit_or", "bit_xor"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bitwise_operators_need_integers(build, op, dtype):
    with pytest.raises(TypeError, match=f"operator '{op}' is bitwise and needs an integer dtype, "
                                        f"not {dtype}"):
        build(dtype, op)


@pytest.mark.parametrize("dtype,identity,message", [
    ("int8", 300, r"identity 300 of operator 'user_op' does not fit int8: 300 does not fit "
                  r"int8 \[-128, 127\]"),
    ("uint32", -1, r"identity -1 of operator 'user_op' does not fit uint32"),
    ("uint64", 2**64, r"does not fit uint64"),
    ("float32", 0.1, r"identity 0.1 of operator 'user_op' does not fit float32: 0.1 is not "
                     r"exactly representable as float32"),
    ("float32", float("nan"), r"identity nan of operator 'user_op' does not fit float32: NaN "
                              r"cannot be an identity"),
    ("float64", float("nan"), r"NaN cannot be an identity"),
    ("int32", float("nan"), r"identity nan of operator 'user_op' does not fit int32"),
    ("int32", float("inf"), r"identity inf of operator 'user_op' does not fit int32"),
])
def test_identity_that_does_not_fit_the_dtype(build, dtype, identity, message):
    with pytest.raises(ValueError, match=message):
        build(dtype, Operator("a + b", identity))


def test_fractional_identity_on_an_integer_dtype():
    for dtype, identity in [("int32", 0.5), ("uint8", 2.75), ("int64", -0.25)]:
        with pytest.raises(ValueError, match=f"identity {identity} of operator 'user_op' does "
                                             f"not fit {dtype}"):
            make_spec(dtype, Operator("a + b", identity))


def test_integral_float_identity_on_an_integer_dtype_is_fine(build):
    assert build("int32", Operator("a * b", 1.0)).identity_literal == \
        build("int32", Operator("a * b", 1)).identity_literal


def test_identity_that_does_not_fit_one_dtype_fits_another(build):
    op = Operator("a < b ? b : a", -1, name="max_from_minus_one")
    assert build("int8", op).identity_literal
    with pytest.raises(ValueError, match="max_from_minus_one"):
        build("uint8", op)


def test_empty_expression():
    for expression in ("", "  \n"):
        with pytest.raises(ValueError, match="operator expression is empty; write a C expression "
                                             "in a and b"):
            Operator(expression, 0)


@pytest.mark.parametrize("name", ["last non-zero", "2nd", "a+b", ""])
def test_operator_name_must_be_a_c_identifier(name):
    with pytest.raises(ValueError, match="must be a C identifier"):
        Operator("a + b", 0, name=name)


@pytest.mark.parametrize("dtype,message", [
    ("clongdouble", "unsupported dtype complex256; scangen supports int8, uint8, int16, "
                    "uint16, int32, uint32, int64, uint64, float32, float64, float16, "
                    "complex64, complex128"),
    (np.longdouble, "unsupported dtype float128"),
    (bool, "unsupported dtype bool"),
    (np.bool_, "unsupported dtype bool"),
    (np.dtype([("m", np.float64), ("z", np.bool_)]), "field 'z' .* has type bool"),
    (np.dtype([("o", object)]), "field 'o' .* has type object"),
    (np.dtype((np.float32, 4)), "a sub-array dtype .* is not an element type"),
    (object, "unsupported dtype object"),
    ("int128", "not a numpy dtype: 'int128'"),
    ("uint256", "not a numpy dtype"),
    ("datetime64[s]", "unsupported dtype datetime64"),
])
def test_unsupported_dtype(build, dtype, message):
    with pytest.raises(TypeError, match=message):
        build(dtype, "add")


# --- what a valid spec is ------------------------------------------------------------------

def test_spec_is_frozen_hashable_and_equal_for_equal_requests():
    one = make_spec("int32", "add", algorithm="coarsened", section_size=512)
    two = make_spec(np.int32, scangen.BUILTIN_OPERATORS["add"],
                    algorithm="coarsened", section_size=512, items_per_thread=512 // TUNED_BLOCK)
    assert one == two and hash(one) == hash(two)
    assert one != make_spec("int32", "add", algorithm="coarsened", section_size=1024)
    assert one != make_spec("int32", "add", algorithm="coarsened", section_size=512,
                            tuning=scangen.Tuning(backoff_max_ns=512))
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.section_size = 1024


def test_defaults_are_valid_and_documented_names():
    for dtype in ("int8", "float32", "float64"):
        spec = make_spec(dtype)
        assert spec.algorithm in ALGORITHMS and spec.tuning == scangen.Tuning()
        assert spec.strategy in scangen.STRATEGIES and spec.operator.name == "add"
        assert Scan(dtype).spec == spec
    # naming only the algorithm (or only the section) fills in the rest validly
    for algorithm in ALGORITHMS:
        spec = make_spec("int32", algorithm=algorithm)
        assert spec.block_size * spec.items_per_thread == spec.section_size
        assert make_spec("int32", algorithm=algorithm, section_size=None) == spec
    assert make_spec("int32", algorithm="kogge_stone", section_size=64).section_size == 64


def test_scan_construction_does_not_need_a_gpu():
    scan = Scan("uint16", "bit_xor", mode="exclusive", algorithm="brent_kung", section_size=64)
    assert scan.dtype == np.dtype("uint16")
    assert "brent_kung" in repr(scan) and "bit_xor" in repr(scan)


@pytest.mark.parametrize("expression,message", [
    ("a); } int x = (1", "single C expression"),
    ("a + b; a", "single C expression"),
    ("(a + b", "unclosed"),
    ("a + b)", "unmatched"),
    ("a + b /* x", r"unclosed comment \('/\*' without '\*/'\)"),
    ("a /* c */ + b /* x", "unclosed comment"),
    ('a + b + "x', "unclosed string literal"),
])
def test_operator_expression_must_be_one_expression(expression, message):
    with pytest.raises(scangen.UserCodeError, match=f"operator 'bad' expression .*{message}"):
        scangen.Operator(expression, 0, name="bad")


def test_operator_preamble_brackets_must_balance():
    with pytest.raises(scangen.UserCodeError, match="operator 'bad' preamble has an unclosed"):
        scangen.Operator("f(a, b)", 0, name="bad", preamble="int f(int a, int b) { return a;")
    with pytest.raises(scangen.UserCodeError, match="operator 'bad' preamble has an unclosed "
                                                    "comment"):
        scangen.Operator("f(a, b)", 0, name="bad", preamble="/* f: the sum\nint f(int a, "
                         "int b) { return a + b; }")
    # ';' and strings with brackets are fine in a preamble, and comment marks in strings
    # and quotes in comments are neither
    scangen.Operator("f(a, b)", 0, name="ok", preamble='// ) {\nint f(int a, int b) '
                     '{ const char *s = "}/*"; return a + b; } /* " */ // /*')


def test_numpy_integers_work_wherever_an_int_does():
    scan = Scan(np.int32, Operator("a + b", np.int16(0), name="plus"),
                section_size=np.int32(256), items_per_thread=np.int64(2))
    assert scan.spec.section_size == 256 and scan.spec.items_per_thread == 2
    assert scan.plan(np.int64(1000)).n == 1000
    assert str(scan.plan(np.uint32(1000))) == scan.plan(1000).describe()
