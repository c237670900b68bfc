"""ScanKernel without a GPU: argument parsing, hook validation, strategy/last_item rules,
source and plan, and the launch-side argument conversion (with GPU arrays simulated by
objects exposing __cuda_array_interface__)."""
import numpy as np
import pytest

import scangen
from scangen.args import ArgumentError, c_parameters, launch_format, parse_arguments
from scangen import UserCodeError
from scangen import interop
from scangen.heads import HeadBits, HeadFlags, HeadKeys
from scangen.kernel import HeldElement, MaskInput
from scangen.tuning import HELD_ELEMENT_BYTES
from scangen.runtime import launcher
from tests.support import COMPACTION, FakeDeviceArray, simulate_device
from tests.support import needs_nvcc


def compaction(**kwargs):
    return scangen.ScanKernel(np.int64, "add", **{**COMPACTION, **kwargs})


# --- arguments ---------------------------------------------------------------------------

def test_arguments_round_trip_to_c_and_launch_format():
    args = parse_arguments("const float *x, float* out, unsigned long long *count, int k, "
                           "double scale, const my_pair_t *pairs")
    assert [a.name for a in args] == ["x", "out", "count", "k", "scale", "pairs"]
    assert c_parameters(args) == ("const float *x, float *out, unsigned long long *count, "
                                  "int k, double scale, const my_pair_t *pairs")
    assert launch_format(args) == "PPPidP"
    assert args[0].scalar_dtype == np.float32 and args[5].scalar_dtype is None
    assert parse_arguments("") == () and parse_arguments("  ") == ()
    # __restrict__ (or restrict) after the star is kept: the compiler may reorder around it
    restricted = parse_arguments("const float *__restrict__ x, float * restrict out, int k")
    assert [a.restrict for a in restricted] == [True, True, False]
    assert c_parameters(restricted) == "const float *__restrict__ x, float *__restrict__ out, int k"


@pytest.mark.parametrize("text,message", [
    ("float x[]", "arrays are passed as pointers"),
    ("float **x", "pointers to pointers"),
    ("x", "needs a type and a name"),
    ("float *x,", "empty argument"),
    ("float *x, int x", "declared twice"),
    ("my_t value", "scalar arguments must have one of the types"),
    ("int n", "argument name 'n' is reserved"),
    ("const int *item", "'item' is reserved"),
    ("int (*f)(int)", "cannot parse"),
    ("float * const x", "cannot parse"),
])
def test_bad_arguments_name_the_piece(text, message):
    with pytest.raises(ArgumentError, match=message):
        parse_arguments(text)


def test_arguments_must_be_a_string():
    with pytest.raises(TypeError, match="arguments must be a string"):
        scangen.ScanKernel(np.int32, "add", arguments=["int *x"], input_expr="x[i]",
                           output_statement="")


# --- hooks -------------------------------------------------------------------------------

@pytest.mark.parametrize("field,code,message", [
    ("input_expr", "", "input_expr is empty"),
    ("input_expr", "x[i]; out[0] = 1", "single C expression"),
    ("input_expr", "a); } int y = (1", "single C expression"),
    ("input_expr", "x[i]) + (1", "unmatched"),
    ("input_expr", "(x[i]", "unclosed"),
    ("output_statement", "if (i) { out[i] = item;", "unclosed"),
    ("output_statement", "out[i] = item; }", "unmatched"),
])
def test_hooks_that_escape_their_place_are_refused(field, code, message):
    with pytest.raises(UserCodeError, match=f"{field}.*{message}|{message}"):
        compaction(**{field: code})


def test_brackets_in_strings_and_comments_do_not_count():
    kernel = compaction(output_statement='out[i] = x[i]; // ) } ]\n /* ( */ if (0) printf("(");')
    assert 'printf("(");' in kernel.source


def test_last_item_needs_a_strategy_that_knows_the_total():
    uses_total = dict(output_statement="out[i] = x[i] / (float)last_item;")
    for strategy in ("chained", "decoupled_lookback"):
        with pytest.raises(ValueError, match="last_item.*'reduce_then_scan', 'hierarchical'"):
            compaction(strategy=strategy, **uses_total)
    kernel = compaction(strategy="auto", **uses_total)
    assert "scan_tiles_user" not in kernel.source
    assert kernel.plan(1 << 20).strategy == "reduce_then_scan"
    assert compaction(strategy="auto").plan(1 << 20).strategy == "decoupled_lookback"


@pytest.mark.parametrize("statement,used", [
    ("out[i] = x[i] / (float)last_item;", True),
    ("out[i] = item; /* not last_item */ // nor last_item", False),
    ('out[i] = item; if (i == 0) printf("last_item");', False),
    ("const long long last_items = item; out[i] = last_items;", False),
    ("out[i] = my_last_item(item);", False),
    ("out[i] = item + pairs[i].last_item + ns::last_item;", False),
    ("out[i] = item + pairs[i].last_item + last_item;", True),
])
def test_last_item_is_a_use_of_the_name_as_a_c_token(statement, used):
    kernel = compaction(output_statement=statement)
    hooks = kernel.scan_module.hooks
    assert hooks.uses_last_item == used
    assert hooks.library_names_used == ({"last_item"} if used else frozenset())
    assert kernel.plan(1 << 20).strategy == ("reduce_then_scan" if used else
                                             "decoupled_lookback")


@pytest.mark.parametrize("preamble", [
    "#define TOTAL last_item",
    "  #  define TOTAL(x) ((x) + \\\n    last_item)",
    "#define RUN_START prev_last_counted",
])
def test_a_preamble_macro_may_not_hide_an_output_name(preamble):
    with pytest.raises(UserCodeError, match="preamble: a macro names (last_item|prev_last_"
                                            "counted).*write it in output_statement"):
        compaction(preamble=preamble, output_statement="out[i] = item;")


def test_a_preamble_may_use_the_output_names_otherwise():
    # a parameter of that name, a macro in a comment or a string: the output statement
    # reads none of them, so no total is needed
    kernel = compaction(
        preamble="__device__ float share(long long last_item, float v) { return v / last_item; }"
                 "\n// #define TOTAL last_item\n#define NAME \"last_item\"\n#define TOTALS 3",
        output_statement="out[i] = share(item, x[i]);")
    assert not kernel.scan_module.hooks.uses_last_item
    assert kernel.plan(1 << 20).strategy == "decoupled_lookback"


def test_source_holds_the_hooks_and_plan_needs_no_gpu():
    kernel = compaction(strategy="hierarchical", section_size=256)
    source = kernel.source
    for piece in ("const float *x;", "float *out;", "long long *count;",
                  "x[i] > 0.5f ? 1 : 0", "*count = item;", "typedef long long scan_t;",
                  'extern "C" __global__'):
        assert piece in source
    plan = kernel.plan(np.int64(100_000))
    names = [launch.kernel.name for launch in plan.launches]
    assert names[0] == "scan_sections_user" and names[-1] == "add_prefixes_user"
    assert str(plan) == plan.describe() and "<arguments>" in str(plan)


def test_scan_modules_differ_by_every_hook_and_equal_otherwise():
    base = compaction().scan_module
    assert compaction().scan_module == base and hash(compaction().scan_module) == hash(base)
    for change in (dict(input_expr="x[i] > 0.25f ? 1 : 0"),
                   dict(output_statement="out[i] = item;"),
                   dict(preamble="// helpers"),
                   dict(arguments="const float *x, float *out, long long *total"),
                   dict(tuning=scangen.Tuning(backoff_min_ns=16))):
        if "arguments" in change:
            change["output_statement"] = "if (i == n - 1) *total = item;"
        assert compaction(**change).scan_module != base, change


def test_scan_is_a_scan_kernel():
    for mode, output in (("inclusive", "out[i] = item;"), ("exclusive", "out[i] = prev_item;")):
        scan = scangen.Scan(np.float32, "add", mode=mode)
        hooks = scan.kernel.scan_module.hooks
        assert hooks.input_expr == "x[i]" and hooks.output_statement == output
        assert scan.source == scan.kernel.source


# --- call-time argument conversion (no GPU: objects with __cuda_array_interface__) --------

@pytest.fixture
def no_pycuda(monkeypatch):
    """Convert arguments without pycuda or a GPU (tests.support.simulate_device)."""
    simulate_device(monkeypatch)


def convert(kernel, *args, n=None):
    spec = kernel.scan_module
    return interop.convert_arguments(spec.hooks.arguments, spec.scan.etype.dtype, args, n)[:2]


def test_n_defaults_to_the_first_array(no_pycuda):
    kernel = compaction()
    values, n = convert(kernel, FakeDeviceArray(10, np.float32, 0x1000),
                        FakeDeviceArray(20, np.float32), FakeDeviceArray(1, np.int64))
    assert n == 10 and values[0] == 0x1000
    pointers = (scangen.DevicePointer(0x2000, np.float32, 10),
                scangen.DevicePointer(0x3000, np.int64, 1))
    values, n = convert(kernel, FakeDeviceArray(10, np.float32), *pointers, n=np.int32(4))
    assert n == 4 and values[1:] == (0x2000, 0x3000)
    # a pointer counts as an array: its size is n's default, its dtype is checked
    assert convert(kernel, scangen.DevicePointer(0x1000, np.float32, 7), *pointers)[1] == 7


def test_call_errors_name_the_argument(no_pycuda):
    kernel = compaction()
    x, out, count = (FakeDeviceArray(10, np.float32), FakeDeviceArray(10, np.float32),
                     FakeDeviceArray(1, np.int64))
    with pytest.raises(TypeError, match=r"takes 3 argument\(s\) \(x, out, count\).*got 2"):
        convert(kernel, x, out)
    with pytest.raises(ValueError, match="n=11 is larger than the first array argument 'x'"):
        convert(kernel, x, out, count, n=11)
    with pytest.raises(TypeError, match=r"'x' is declared const float \*x \(float32\) but the "
                                        r"array has dtype float64"):
        convert(kernel, FakeDeviceArray(10, np.float64), out, count)
    with pytest.raises(TypeError, match="'out'.*needs a device array or a scangen.DevicePointer"
                                        ", not a host numpy array"):
        convert(kernel, x, np.zeros(10, np.float32), count)
    with pytest.raises(TypeError, match=r"'x' \(const float \*x\) needs a device array .*not "
                                        r"the int 5 .*DevicePointer\(address, dtype, size\)"):
        convert(kernel, 5, out, count)
    with pytest.raises(TypeError, match="'count'.*needs a device array.*not the int"):
        convert(kernel, x, out, np.uint64(0x3000))
    with pytest.raises(TypeError, match=r"'x' is declared const float \*x \(float32\) but the "
                                        r"array has dtype float64"):
        convert(kernel, scangen.DevicePointer(0x1000, np.float64, 10), out, count)
    with pytest.raises(ValueError, match="n=11 is larger than the first array argument 'x'"):
        convert(kernel, scangen.DevicePointer(0x1000, np.float32, 10), out, count, n=11)
    with pytest.raises(TypeError, match="n= is required"):
        empty = scangen.ScanKernel(np.int32, "add", arguments="int k", input_expr="k",
                                   output_statement="")
        convert(empty, 3)
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        convert(kernel, x, out, count, n=-1)
    scalars = scangen.ScanKernel(np.int32, "add", arguments="const int *x, int *out, int k, "
                                 "float w", input_expr="x[i] * k", output_statement="out[i] = item;")
    xi, oi = FakeDeviceArray(4, np.int32), FakeDeviceArray(4, np.int32)
    values, _ = convert(scalars, xi, oi, np.int64(3), 0.5)
    assert values[2] == np.int32(3) and values[2].dtype == np.int32
    assert values[3] == np.float32(0.5) and values[3].dtype == np.float32
    with pytest.raises(TypeError, match="'k'.*needs an int"):
        convert(scalars, xi, oi, 1.5, 0.5)
    with pytest.raises(ValueError, match=r"argument 'k' \(int k\): 2147483648 does not fit "
                                         r"int32 \["):
        convert(scalars, xi, oi, 1 << 31, 0.5)
    with pytest.raises(TypeError, match="'w'.*needs a number"):
        convert(scalars, xi, oi, 1, "0.5")
    with pytest.raises(TypeError, match="'x' .*needs a device array.*not bool True"):
        convert(scalars, True, oi, 1, 0.5)


# --- segmented scans ---------------------------------------------------------------------

def segmented(dtype, **kwargs):
    return scangen.ScanKernel(
        dtype, scangen.LAST_NONZERO,
        arguments="const scan_t *x, const unsigned char *heads, scan_t *out, scan_t *total",
        input_expr="x[i]", is_segment_start_expr="heads[i] != 0",
        output_statement="out[i] = prev_item; if (i == n - 1) *total = last_item;", **kwargs)


@pytest.mark.parametrize("dtype,acc_bytes,packed", [
    ("int8", 2, True), ("int16", 4, True), ("float32", 8, False), ("float64", 16, False)])
def test_segmented_scans_combine_value_head_pairs(dtype, acc_bytes, packed):
    from scangen.strategies.tile_state import TileState

    kernel = segmented(dtype, strategy="hierarchical", section_size=256)
    spec = kernel.spec
    assert spec.segmented and spec.acc_itemsize == acc_bytes
    assert TileState(spec.acc_itemsize).packed == packed
    source = kernel.source
    assert "struct acc_t" in source and "heads[i] != 0" in source
    assert "// user is_segment_start_expr {" in source
    # temporaries hold pairs
    plan = kernel.plan(10_000)
    totals = next(t for t in plan.temporaries if t.name == "totals0")
    assert totals.nbytes == (-(-10_000 // 256) + 1) * acc_bytes


def test_segment_start_must_be_an_expression():
    with pytest.raises(UserCodeError, match="is_segment_start_expr must be a single C expression"):
        scangen.ScanKernel(np.int32, "add", arguments="const int *x, int *out",
                           input_expr="x[i]", is_segment_start_expr="x[i] == 0; x[0] = 1",
                           output_statement="out[i] = item;")


@needs_nvcc
@pytest.mark.parametrize("strategy", ["auto", "hierarchical", "reduce_then_scan"])
@pytest.mark.parametrize("dtype", ["int8", "float64"])
def test_segmented_modules_compile(strategy, dtype):
    segmented(dtype, strategy=strategy).check_compile()


@needs_nvcc
def test_segmented_single_pass_compiles_and_errors_name_the_piece():
    scangen.ScanKernel(np.float32, "max", arguments="const float *x, float *out",
                       input_expr="x[i]", is_segment_start_expr="i % 100 == 0",
                       output_statement="out[i] = item;",
                       strategy="decoupled_lookback").check_compile()
    broken = scangen.ScanKernel(np.float32, "max", arguments="const float *x, float *out",
                                input_expr="x[i]", is_segment_start_expr="heads[i]",
                                output_statement="out[i] = item;")
    with pytest.raises(scangen.ScanCompileError, match="in your is_segment_start_expr"):
        broken.check_compile()


@pytest.mark.parametrize("name", ["partial", "totals", "prefixes", "status", "status_values",
                                  "ticket", "ticket_base", "epoch"])
def test_argument_names_of_scangens_own_parameters_are_refused(name):
    with pytest.raises(ArgumentError, match=f"'{name}' are reserved.*rename yours"):
        scangen.ScanKernel(np.float32, "add", arguments=f"const float *x, float *{name}",
                           input_expr="x[i]", output_statement=f"{name}[i] = item;")


@pytest.mark.parametrize("name", ["int", "class", "template", "and", "NULL"])
def test_argument_names_cpp_takes_are_refused(name):
    with pytest.raises(ArgumentError, match=f"'{name}' is a C\\+\\+ keyword or a macro"):
        scangen.ScanKernel(np.float32, "add", arguments=f"const float *x, float *{name}",
                           input_expr="x[i]", output_statement="")


def test_a_title_stays_on_its_comment_line():
    kernel = compaction(title="compaction\nof x  ")
    assert kernel.source.splitlines()[0].startswith("// scangen: compaction of x;")


# --- counts=True: compaction places counted with warp ballots ------------------------------

def test_counting_kernels_count_with_ballots_in_every_user_body():
    kernel = compaction(counts=True, strategy="auto")
    assert kernel.scan_module.counts_by_ballots
    assert kernel.scan_module != compaction().scan_module
    source = kernel.source
    for body in ("scan_one_section", "reduce_sections", "scan_seeded", "scan_tiles"):
        assert f"void {body}(const UserIO &io" in source, body
    assert "load_ballots" in source and "load_ballots" not in compaction().source
    shape = scangen.tuning.COUNTING.tile()  # the counting tile, unless a section is named
    assert (kernel.spec.block_size, kernel.spec.items_per_thread) == \
        (shape.block_size, shape.items_per_thread)
    assert compaction(counts=True, section_size=1024).spec.section_size == 1024
    # A condition of the user's (not a mask) takes one pass at every size, unless told:
    # reduce_then_scan would evaluate it twice.
    assert kernel.spec.tuning == scangen.tuning.COUNTING_CONDITION_TUNING
    assert kernel.plan(1 << 40).strategy == "decoupled_lookback"
    # A mask's counting scan takes reduce_then_scan from COUNTING_TUNING's bytes of int64
    # counts: its first pass loads the mask 16 bytes a lane.
    masked = mask_kernel()
    assert masked.spec.tuning == scangen.tuning.COUNTING_TUNING
    switch = scangen.tuning.COUNTING_TUNING.auto_reduce_then_scan_min_bytes // 8
    assert switch == 1 << 25
    assert masked.plan(switch).strategy == "reduce_then_scan"
    assert masked.plan(switch - 1).strategy == "decoupled_lookback"
    told = compaction(counts=True, tuning=scangen.Tuning(auto_reduce_then_scan_min_bytes=64))
    assert told.plan(10_000).strategy == "reduce_then_scan"
    # Blocks of less than a warp scan the 0s and 1s as values.
    narrow = compaction(counts=True, section_size=32, items_per_thread=2)
    assert not narrow.scan_module.counts_by_ballots and "load_ballots" not in narrow.source


def mask_kernel(argument="const int *keep", mask=MaskInput("keep"), **options):
    """A counting ScanKernel whose input is the mask ``keep`` (as Select's flags)."""
    return scangen.ScanKernel(np.int64, "add", arguments=f"{argument}, long long *out",
                              **{"output_statement": "out[i] = item;", "counts": True,
                                 "_input": mask, **options})


def test_a_mask_input_is_counted_from_16_byte_loads():
    for flags, word in ((np.bool_, "unsigned char"), (np.int16, "unsigned short"),
                        (np.int64, "unsigned long long")):
        for keep in (True, False):
            select = scangen.Select(np.float32, flags=flags, keep=keep)
            assert select.kernel.scan_module.counted_mask == ("flags", word, keep)
            assert "count_mask_sections(io.flags, first, totals)" in select.kernel.source
    # the MaskInput writes the expression the other kernels count by ballots
    kernel = mask_kernel()
    assert kernel.scan_module.counted_mask == ("keep", "unsigned int", True)
    assert kernel.scan_module.hooks.input_expr == "(keep[i] != 0) ? 1 : 0"
    dropped = mask_kernel(mask=MaskInput("keep", keep=False))
    assert dropped.scan_module.counted_mask == ("keep", "unsigned int", False)
    assert dropped.scan_module.hooks.input_expr == "(!(keep[i] != 0)) ? 1 : 0"
    # the same expression written as input_expr is the user's: counted by ballots
    by_hand = compaction(counts=True, arguments="const int *keep, long long *out",
                         input_expr="(keep[i] != 0) ? 1 : 0", output_statement="out[i] = item;")
    assert by_hand.scan_module.counted_mask is None
    assert "count_mask_section" not in by_hand.source
    # no 16-byte loads: a predicate, reverse, last_counted, sections the loads don't fill
    assert scangen.Select(np.float32, "x > 0").kernel.scan_module.counted_mask is None
    for options in (dict(reverse=True), dict(output_statement="out[i] = last_counted;"),
                    dict(section_size=64, items_per_thread=2)):
        kernel = mask_kernel(**options)
        assert kernel.scan_module.counts_by_ballots
        assert kernel.scan_module.counted_mask is None, options
        assert "count_mask_section" not in kernel.source


@pytest.mark.parametrize("options,error,message", [
    (dict(mask=MaskInput("flags")), ArgumentError,
     r"MaskInput names 'flags', which is none of the arguments \(keep, out\)"),
    (dict(argument="const float *keep"), ArgumentError,
     r"MaskInput's argument 'keep' \(const float \*keep\) must point to integers or bools"),
    (dict(argument="int keep"), ArgumentError, r"argument 'keep' \(int keep\) must point"),
    (dict(argument="const my_t *keep"), ArgumentError, "must point to integers or bools"),
    (dict(counts=False), ValueError, r"MaskInput \('keep'\) is an input to count: pass "
                                     r"counts=True"),
    (dict(input_expr="keep[i]"), TypeError, r"give input_expr or _input \(a MaskInput\)"),
    (dict(mask="keep[i] != 0"), TypeError, "_input must be a scangen.kernel.MaskInput, not str"),
])
def test_a_mask_input_names_a_pointer_to_integers(options, error, message):
    with pytest.raises(error, match=message):
        mask_kernel(**options)


def element_kernel(arguments="const float *x, float *out", element=HeldElement("x", np.float32),
                   **options):
    """A counting ScanKernel whose hooks read x[i] as a HeldElement (as Select's predicate)."""
    return scangen.ScanKernel(np.int64, "add", arguments=arguments,
                              **{"input_expr": "element > 0.5f ? 1 : 0",
                                 "output_statement": "if (item != prev_item) out[prev_item] = element;",
                                 "counts": True, "_element": element, **options})


def test_a_held_element_is_loaded_once_where_a_thread_holds_it():
    kernel = element_kernel()
    source = kernel.source
    assert kernel.scan_module.holds_elements
    assert "UserIO::element_t elements[ITEMS_PER_THREAD];" in source
    # the hooks see the element; a kernel that does not hold it reads x[i] where they run
    assert "typedef float element_t;" in source and "return x[i];" in source
    assert "io.output(position, n, item, before, last_item, held.elements[k]);" in source
    # a thread's elements past tuning.HELD_ELEMENT_BYTES, or no ballots: not held
    wide = element_kernel(section_size=4096, items_per_thread=32)
    assert 32 * 4 > HELD_ELEMENT_BYTES and not wide.scan_module.holds_elements
    assert "unsigned rows[ITEMS_PER_THREAD];" in wide.source
    narrow = element_kernel(section_size=32, items_per_thread=2)
    assert not narrow.scan_module.counts_by_ballots and not narrow.scan_module.holds_elements
    assert "element_t elements[" not in narrow.source


@pytest.mark.parametrize("options,error,message", [
    (dict(element=HeldElement("y", np.float32)), ValueError,
     r"_element names 'y', which must be a pointer argument to float"),
    (dict(element=HeldElement("x", np.float64)), ValueError, "pointer argument to double"),
    (dict(arguments="float x, float *out"), ValueError, "pointer argument to float"),
    (dict(arguments="const float *x, float *out, int element"), ArgumentError,
     "argument name 'element' is the held element's"),
    (dict(counts=False), ValueError, r"_element \(a HeldElement\) is for counting scans"),
    (dict(element="x"), TypeError, "_element must be a scangen.kernel.HeldElement, not str"),
])
def test_a_held_element_is_a_pointer_argument_of_a_counting_scan(options, error, message):
    with pytest.raises(error, match=message):
        element_kernel(**options)


def head_kernel(argument="const unsigned char *heads", heads=HeadFlags("heads"), **options):
    """A segmented ScanKernel whose heads are the flags ``heads`` (as SegmentedScan's)."""
    return scangen.ScanKernel(np.float32, "add",
                              arguments=f"const scan_t *x, {argument}, scan_t *out",
                              **{"input_expr": "x[i]", "output_statement": "out[i] = item;",
                                 "_segment_heads": heads, **options})


def test_typed_heads_are_loaded_a_run_at_a_time():
    """SegmentedScan's flags and keys forms pass their heads typed (HeadFlags, HeadKeys):
    one-byte flags, and keys of any width, in a single pass that moves warp runs of 4, 8 or
    16 items in array order, are read a run at a time; wider flags, reverse scans and other
    tiles read each item's head with it."""
    seg = scangen.SegmentedScan(np.float32)
    for flags, c_type in ((np.bool_, "bool"), (np.uint8, "unsigned char"),
                          (np.int8, "signed char")):
        kernel = seg.kernel("flags", flags)
        assert kernel.scan_module.run_heads == ("flags", "flags", c_type)
        assert kernel.scan_module.hooks.is_segment_start_expr == "flags[i] != 0"
        assert "load_run_heads(io, start, n)" in kernel.source
        assert "io.input_without_head(" in kernel.source
    for keys, c_type in ((np.int8, "signed char"), (np.uint16, "unsigned short"),
                         (np.int32, "int"), (np.int64, "long long")):
        kernel = seg.kernel("keys", keys)
        assert kernel.scan_module.run_heads == ("keys", "keys", c_type)
        assert kernel.scan_module.hooks.is_segment_start_expr == \
            "i == 0 || keys[i] != keys[i - 1]"
        assert f"typedef {c_type} head_key_t;" in kernel.source
    for items in (4, 8, 16):
        assert head_kernel(items_per_thread=items, section_size=256 * items) \
            .scan_module.run_heads == ("flags", "heads", "unsigned char")
    # the same expression written as is_segment_start_expr is the user's: read per item
    by_hand = scangen.ScanKernel(np.float32, "add",
                                 arguments="const scan_t *x, const bool *heads, scan_t *out",
                                 input_expr="x[i]", output_statement="out[i] = item;",
                                 is_segment_start_expr="heads[i] != 0")
    assert by_hand.scan_module.run_heads is None
    for kernel in (by_hand, seg.kernel("flags", np.int32),
                   scangen.SegmentedScan(np.float32, reverse=True).kernel("flags"),
                   scangen.SegmentedScan(np.float32, reverse=True).kernel("keys"),
                   head_kernel(items_per_thread=2, section_size=512),
                   head_kernel(algorithm="kogge_stone"),
                   head_kernel(tuning=scangen.Tuning(tile_warp_runs=False))):
        assert kernel.scan_module.run_heads is None
        assert "input_without_head" not in kernel.source
    assert "input_without_head" not in scangen.Scan(np.float32).source


@pytest.mark.parametrize("options,error,message", [
    (dict(heads=HeadFlags("flags")), ArgumentError,
     r"HeadFlags names 'flags', which is none of the arguments \(x, heads, out\)"),
    (dict(argument="const float *heads"), ArgumentError,
     r"HeadFlags's argument 'heads' \(const float \*heads\) must point to integers or bools"),
    (dict(is_segment_start_expr="heads[i]"), TypeError,
     r"give is_segment_start_expr or _segment_heads \(a HeadFlags\), not both"),
    (dict(heads="heads[i] != 0"), TypeError,
     r"_segment_heads must be a scangen.heads.SegmentHeads \(HeadFlags, HeadKeys, HeadRows "
     r"or HeadBits\), not str"),
    (dict(heads=HeadKeys("heads"), argument="const double *heads"), ArgumentError,
     r"HeadKeys's argument 'heads' \(const double \*heads\) must point to integers"),
    (dict(heads=HeadBits("heads"), argument="const int *heads"), ArgumentError,
     r"HeadBits's argument 'heads' \(const int \*heads\) must point to unsigned 32-bit "
     r"words"),
])
def test_head_flags_name_a_pointer_to_integers(options, error, message):
    with pytest.raises(error, match=message):
        head_kernel(**options)


def test_input_expr_is_required():
    with pytest.raises(TypeError, match="input_expr must be a string of C code, not NoneType"):
        scangen.ScanKernel(np.int64, "add", arguments="long long *out",
                           output_statement="out[i] = item;")


@pytest.mark.parametrize("per_block", [1, 3, 16])
def test_a_mask_first_pass_block_counts_several_sections(per_block):
    tuning = scangen.Tuning(mask_sections_per_block=per_block)
    select = scangen.Select(np.float32, flags=np.bool_, strategy="reduce_then_scan",
                            tuning=tuning)
    assert select.kernel.scan_module.counted_sections_per_block == per_block
    assert f"static const int COUNTED_SECTIONS = {per_block};" in select.kernel.source
    sections = 301
    section = select.kernel.spec.section_size
    first, *inner, last = select.kernel.plan(section * sections - 5).launches
    assert (first.kernel.name, first.grid) == ("reduce_sections_user", -(-sections // per_block))
    assert last.grid == sections and all(launch.grid <= sections for launch in inner)
    # a predicate is counted by ballots, a section a block, whatever the tuning
    predicate = scangen.Select(np.float32, "x > 0", strategy="reduce_then_scan", tuning=tuning)
    assert predicate.kernel.scan_module.counted_sections_per_block == 1
    assert predicate.kernel.plan(section * sections).launches[0].grid == sections
    for wrong in (0, 17, 2.0, True):
        with pytest.raises(ValueError, match="mask_sections_per_block must be an int"):
            scangen.Tuning(mask_sections_per_block=wrong)


@pytest.mark.parametrize("dtype,operator,segments", [
    (np.float32, "add", None), (np.int64, "max", None), (np.int64, "add", "i % 7 == 0")])
def test_counts_needs_integer_add_without_segments(dtype, operator, segments):
    with pytest.raises(ValueError, match="counts=True counts with add over an integer type"):
        scangen.ScanKernel(dtype, operator, arguments="const float *x, scan_t *out",
                           input_expr="x[i] > 0 ? 1 : 0", output_statement="out[i] = item;",
                           is_segment_start_expr=segments, counts=True)


def last_counted_kernel(dtype="int64", **options):
    return scangen.ScanKernel(dtype, "add", arguments="const int *x, long long *lasts",
                              input_expr="x[i] & 1", output_statement="lasts[i] = last_counted;",
                              counts=True, **options)


def test_last_counted_packs_count_and_index():
    kernel = last_counted_kernel()
    assert kernel.scan_module.tracks_last_counted
    assert "typedef unsigned long long acc_t;" in kernel.source
    assert "const long long last_counted = (long long)(item_acc & LAST_MASK) - 1;" \
        in kernel.source
    assert scangen.ScanKernel(
        np.int64, "add", arguments="const int *x, long long *out", input_expr="x[i] & 1",
        output_statement="out[i] = prev_last_counted;", counts=True
    ).scan_module.tracks_last_counted
    plain = compaction(counts=True)
    assert not plain.scan_module.tracks_last_counted and "LAST_MASK" not in plain.source
    # the name in a comment or a string, a longer name or a member is no use of it
    for statement in ('out[i] = item; /* last_counted */ // prev_last_counted',
                      'if (i == 0) printf("last_counted");',
                      "const long long last_counted_here = item; out[i] = last_counted_here;",
                      "out[i] = runs[i].last_counted + runs[i].prev_last_counted;"):
        assert not scangen.ScanKernel(
            np.int64, "add", arguments="const int *x, long long *out, const run_t *runs",
            input_expr="x[i] & 1", output_statement=statement, counts=True
        ).scan_module.tracks_last_counted, statement
    assert kernel.plan(2 ** 32 - 1).n == 2 ** 32 - 1
    with pytest.raises(ValueError, match=r"last_counted takes at most 4294967295 indices"):
        kernel.plan(2 ** 32)


@pytest.mark.parametrize("dtype,reverse", [("int32", False), ("uint16", False),
                                           ("int64", True)])
def test_last_counted_needs_8_byte_counts_in_array_order(dtype, reverse):
    with pytest.raises(ValueError,
                       match=r"reads \(prev_\)last_counted needs a counting scan of int64"):
        last_counted_kernel(dtype, reverse=reverse)


@needs_nvcc
@pytest.mark.parametrize("strategy", ["auto", "hierarchical", "reduce_then_scan", "chained",
                                      "decoupled_lookback"])
def test_counting_modules_compile(strategy):
    compaction(counts=True, strategy=strategy).check_compile()
    scangen.ScanKernel(np.uint32, "add", arguments="const int *x, scan_t *out",
                       input_expr="x[i] & 1", output_statement="out[i] = prev_item;",
                       counts=True, reverse=True, initial=3, strategy=strategy).check_compile()
    last_counted_kernel(strategy=strategy).check_compile()
    last_counted_kernel(strategy=strategy, section_size=32, items_per_thread=2).check_compile()
    for flags, keep in ((np.bool_, True), (np.int64, False)):
        scangen.Select(np.float32, flags=flags, keep=keep, strategy=strategy).check_compile()


def test_calls_from_threads_launch_one_at_a_time(monkeypatch):
    """Runtime.launch lets one call at a time through: calls on a stream share its scratch,
    and a call's ticket base must reach the stream before a later call's (no GPU: the
    launch itself is replaced by one that notes who is inside)."""
    import threading
    import time

    runtime = launcher.Runtime(scangen.Scan("int64", "add").kernel.scan_module)
    inside, overlaps, order = [], [], []

    def launch_alone(user_values, n, stream, layout):
        inside.append(n)
        if len(inside) > 1:
            overlaps.append(tuple(inside))
        order.append(n)
        time.sleep(0.002)  # long enough for another thread to arrive meanwhile
        inside.remove(n)

    monkeypatch.setattr(runtime, "_launch", launch_alone)
    threads = [threading.Thread(target=runtime.launch, args=((), n, None))
               for n in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not overlaps
    assert sorted(order) == list(range(1, 9))
    runtime.launch((), 0, None)  # nothing to launch: not even the lock
    assert len(order) == 8


def test_vector_runs_scan_packed_words_where_the_operator_has_a_packed_form():
    """ScanModule.packed_combine: 1- and 2-byte integers read and written as the scan's own
    type under a built-in with a SIMD form; nothing for a multiply, wider or floating values,
    an input converted as it loads, a user's operator, or warp runs."""
    vector = scangen.Tuning(tile_vector_runs=True)

    def packed(dtype, op, tuning=vector, **options):
        return scangen.Scan(dtype, op, tuning=tuning, **options).kernel.scan_module.packed_combine

    assert packed("uint8", "add") == "__vadd4(a, b)"
    assert packed("int8", "add") == "__vadd4(a, b)"  # adds wrap alike, signed or not
    assert packed("int16", "max") == "__vmaxs2(a, b)"
    assert packed("uint16", "min") == "__vminu2(a, b)"
    assert packed("int8", "bit_xor") == "a ^ b"
    assert packed("uint8", "mul") is None
    assert packed("int32", "add") is None
    assert packed("float16", "add") is None
    assert packed("uint8", "add", result_dtype="int32") is None
    assert packed("uint8", scangen.Operator("(unsigned char)(a + b)", 0)) is None
    mine = scangen.Operator("(unsigned char)(a + b)", 0, packed="__vadd4(a, b)")
    assert packed("uint8", mine) == "__vadd4(a, b)"
    assert packed("int32", mine) is None
    assert packed("uint8", "add", tuning=scangen.Tuning(tile_vector_runs=False)) is None
    source = scangen.Scan("int16", "max", mode="exclusive", tuning=vector).source
    assert "__vmaxs2(a, b)" in source and "__funnelshift_l" in source
