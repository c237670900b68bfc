"""A bad value of any public parameter is refused where it is given, before any GPU work:
a TypeError or ValueError whose message names the parameter as the user wrote it (never
an internal name such as scangen_initial, never an error of numpy or of Python's
unhashable-type check). One table per layer: constructors, the one-shot functions,
call-time values that need no GPU to check (seen through device arrays without memory),
scangen.DevicePointer; and nvcc's errors, described from its log without a GPU."""
import numpy as np
import pytest

import scangen
from scangen.args import ArgumentError
from scangen.compile import describe_compile_error
from scangen.interop import parse_cuda_array_interface
from scangen.render import ModuleSource
from tests.support import FakeDeviceArray, simulate_device

AFFINE_PAIR = np.dtype([("m", np.float64), ("c", np.float64)])
COMPOSE = scangen.Operator("scan_t{b.m * a.m, b.m * a.c + b.c}", identity=(1.0, 0.0),
                           name="compose")
HOOKS = dict(arguments="const int *x, int *out", input_expr="x[i]",
             output_statement="out[i] = item;")


def scan_kernel(dtype=np.int32, operator="add", **changes):
    return scangen.ScanKernel(dtype, operator, **{**HOOKS, **changes})


def case(name, make, error, message):
    return pytest.param(make, error, message, id=name)


#: The options every scan-based constructor passes on to its ScanKernel, each with bad
#: values: (parameter, value, error, what the message says).
SCAN_OPTIONS = [
    ("algorithm", "fast", ValueError, r"unknown algorithm 'fast'; choose one of"),
    ("algorithm", 5, ValueError, "unknown algorithm 5"),
    ("algorithm", ["warp_shuffle"], ValueError, r"unknown algorithm \['warp_shuffle'\]"),
    ("section_size", 3, ValueError, "section_size must be a power of two of at least 2, not 3"),
    ("section_size", 0, ValueError, "section_size must be a power of two"),
    ("section_size", 1.5, TypeError, "section_size must be an int, not 1.5"),
    ("section_size", "1024", TypeError, "section_size must be an int"),
    ("section_size", True, TypeError, "section_size must be an int, not True"),
    ("section_size", 1 << 20, ValueError, "section_size 1048576 .*needs"),
    ("items_per_thread", 3, ValueError, "items_per_thread must be a power of two, not 3"),
    ("items_per_thread", 0, ValueError, "items_per_thread must be a power of two"),
    ("items_per_thread", -4, ValueError, "items_per_thread must be a power of two"),
    ("items_per_thread", 2.0, TypeError, "items_per_thread must be an int"),
    ("strategy", "fastest", ValueError, r"unknown strategy 'fastest'; choose one of"),
    ("strategy", None, ValueError, "unknown strategy None"),
    ("strategy", ["auto"], ValueError, r"unknown strategy \['auto'\]"),
    ("tuning", {"block": 128}, TypeError, "tuning must be a scangen.Tuning, not dict"),
    ("tuning", "default", TypeError, "tuning must be a scangen.Tuning, not str"),
    ("reverse", "no", TypeError, "reverse must be True or False, not 'no'"),
    ("reverse", None, TypeError, "reverse must be True or False, not None"),
    ("reverse", 1, TypeError, "reverse must be True or False, not 1"),
]

#: dtype values no scan takes.
BAD_DTYPES = [
    (None, TypeError, r"dtype is required: a numpy dtype"),
    ("nope", TypeError, r"dtype is not a numpy dtype: 'nope'"),
    ("U3", TypeError, r"unsupported dtype str96; scangen supports"),
    (bool, TypeError, r"unsupported dtype bool"),
    (object, TypeError, r"unsupported dtype object"),
    (np.dtype(">i4"), TypeError, r"dtype >i4 is not in the machine's byte order"),
    (np.dtype((np.float32, 4)), TypeError, r"dtype: a sub-array dtype"),
    (np.dtype([]), TypeError, r"structured dtype \[\] has no data"),
    (np.dtype([("int", np.int32)]), TypeError, r"field 'int' of .* C\+\+ keyword"),
    (np.dtype([("__half", np.float16)]), TypeError, r"field '__half' of .* starts with '_'"),
    (np.dtype([("scangen_m", np.int32)]), TypeError, r"field 'scangen_m' .* 'scangen_'"),
]

CONSTRUCTORS = [
    ("ScanKernel", lambda **o: scan_kernel(**o)),
    ("Scan", lambda **o: scangen.Scan(np.int32, "add", **o)),
    ("SegmentedScan", lambda **o: scangen.SegmentedScan(np.int32, "add", **o)),
    ("Select", lambda **o: scangen.Select(np.float32, "x > 0", **o)),
    ("Partition", lambda **o: scangen.Partition(np.float32, "x > 0", **o)),
    ("Unique", lambda **o: scangen.Unique(np.int32, **o)),
    ("RunLengthEncode", lambda **o: scangen.RunLengthEncode(np.int32, **o)),
    ("inclusive_scan", lambda **o: scangen.inclusive_scan(np.arange(4), **o)),
]
#: Constructors without reverse= (a compaction keeps order by what it is).
NO_REVERSE = {"Select", "Partition", "Unique", "RunLengthEncode"}

CASES = [
    case(f"{who}-{parameter}={value!r}",
         lambda make=make, parameter=parameter, value=value: make(**{parameter: value}),
         error, message)
    for who, make in CONSTRUCTORS for parameter, value, error, message in SCAN_OPTIONS
    if not (parameter == "reverse" and who in NO_REVERSE)
    and not (who == "inclusive_scan" and isinstance(value, (list, dict)))
] + [
    case(f"{who}-dtype={dtype!r}", lambda make=make, dtype=dtype: make(dtype), error, message)
    for who, make in [
        ("ScanKernel", lambda d: scan_kernel(d, scangen.Operator("a", (0,)))),
        ("Scan", lambda d: scangen.Scan(d, scangen.Operator("a", (0,)))),
        ("SegmentedScan", lambda d: scangen.SegmentedScan(d, scangen.Operator("a", (0,)))),
        ("Select", lambda d: scangen.Select(d, "true")),
        ("Partition", lambda d: scangen.Partition(d, "true")),
        ("Unique", scangen.Unique), ("RunLengthEncode", scangen.RunLengthEncode),
    ]
    for dtype, error, message in BAD_DTYPES
] + [
    # operator
    case("Scan-operator=name", lambda: scangen.Scan(np.int32, "plus"), ValueError,
         r"unknown operator 'plus'; built-in operators are add"),
    case("Scan-operator=int", lambda: scangen.Scan(np.int32, 5), TypeError,
         "operator must be a name or a scangen.Operator, not int"),
    case("ScanKernel-operator=None", lambda: scan_kernel(operator=None), TypeError,
         "operator must be a name or a scangen.Operator, not NoneType"),
    case("SegmentedScan-operator=bitwise float",
         lambda: scangen.SegmentedScan(np.float32, "bit_and"), TypeError,
         "operator 'bit_and' is bitwise and needs an integer dtype, not float32"),
    case("Scan-operator=struct builtin", lambda: scangen.Scan(AFFINE_PAIR, "add"), TypeError,
         "built-in operator 'add' takes scalar types"),
    case("Scan-operator=complex max", lambda: scangen.Scan(np.complex64, "max"), TypeError,
         "operator 'max' needs real values"),
    case("Operator-expression=int", lambda: scangen.Operator(5, 0), TypeError,
         "operator 'user_op' expression must be a string of C code in a and b, not int"),
    case("Operator-expression=empty", lambda: scangen.Operator(" ", 0), ValueError,
         "operator expression is empty"),
    case("Operator-expression=statements", lambda: scangen.Operator("a; b", 0),
         scangen.UserCodeError, "operator 'user_op' expression must be a single C expression"),
    case("Operator-expression=unclosed comment", lambda: scangen.Operator("a+b /* x", 0),
         scangen.UserCodeError, "operator 'user_op' expression has an unclosed comment"),
    case("Operator-preamble=unclosed", lambda: scangen.Operator("f(a, b)", 0, preamble="{"),
         scangen.UserCodeError, "operator 'user_op' preamble has an unclosed '{'"),
    case("Operator-name", lambda: scangen.Operator("a", 0, name="my op"), ValueError,
         "operator name 'my op' must be a C identifier"),
    case("Operator-identity=word", lambda: scangen.Operator("a", "largest"), ValueError,
         r"identity 'largest' is not a number or one of lowest, highest"),
    case("Operator-identity=too big", lambda: scangen.Scan(np.int8, scangen.Operator(
        "a", 300, name="wide")), ValueError, "identity 300 of operator 'wide' does not fit int8"),
    case("Operator-identity=word for a struct", lambda: scangen.Scan(AFFINE_PAIR,
         scangen.Operator("a", "highest")), TypeError, "identity 'highest' of operator"),
    case("Operator-identity=fields", lambda: scangen.Scan(AFFINE_PAIR, scangen.Operator(
        "a", (1.0,))), ValueError, "1 values for 2 fields"),
    # mode
    case("Scan-mode", lambda: scangen.Scan(np.int32, mode="prefix"), ValueError,
         r"unknown mode 'prefix'; use 'inclusive' or 'exclusive'"),
    case("Scan-mode=list", lambda: scangen.Scan(np.int32, mode=["inclusive"]), ValueError,
         "unknown mode"),
    case("SegmentedScan-mode", lambda: scangen.SegmentedScan(np.int32, mode=None), ValueError,
         "unknown mode None"),
    case("exclusive_scan-options", lambda: scangen.exclusive_scan(np.arange(4), mode="x"),
         TypeError, "keyword argument 'mode'"),
    # result_dtype
    case("Scan-result_dtype=nope", lambda: scangen.Scan(np.int32, result_dtype="nope"),
         TypeError, "result_dtype is not a numpy dtype: 'nope'"),
    case("Scan-result_dtype=narrower", lambda: scangen.Scan(np.int32, result_dtype=np.int8),
         TypeError, "result_dtype int8 cannot hold every int32 value"),
    case("Scan-result_dtype=bool", lambda: scangen.Scan(np.int32, result_dtype=bool),
         TypeError, "unsupported result_dtype bool"),
    case("inclusive_scan-result_dtype", lambda: scangen.inclusive_scan(
        np.arange(4), result_dtype="nope"), TypeError, "result_dtype is not a numpy dtype"),
    # initial
    case("Scan-initial=too big", lambda: scangen.Scan(np.int8, "add", initial=1000),
         ValueError, r"^initial \(int8\): 1000 does not fit int8 \[-128, 127\]$"),
    case("Scan-initial=str", lambda: scangen.Scan(np.int32, initial="1"), TypeError,
         r"^initial \(int32\) needs an int, not '1'$"),
    case("Scan-initial=float for int", lambda: scangen.Scan(np.int32, initial=0.5), TypeError,
         r"^initial \(int32\) needs an int"),
    case("Scan-initial=struct fields", lambda: scangen.Scan(AFFINE_PAIR, COMPOSE,
         initial=(1.0,)), ValueError, r"^initial \(.*\): 1 values for 2 fields \(m, c\)"),
    case("Scan-initial=complex for float", lambda: scangen.Scan(np.complex64, initial="x"),
         TypeError, r"^initial \(complex64\): 'x' is not a number"),
    case("SegmentedScan-initial", lambda: scangen.SegmentedScan(np.int8, initial=1000),
         ValueError, r"^initial \(int8\): 1000 does not fit int8"),
    case("ScanKernel-initial", lambda: scan_kernel(np.uint8, initial=-1), ValueError,
         r"^initial \(uint8\): -1 does not fit uint8 \[0, 255\]"),
    # the ScanKernel's own parameters
    case("ScanKernel-arguments=int", lambda: scan_kernel(arguments=5), TypeError,
         "arguments must be a string of C parameters, not int"),
    case("ScanKernel-arguments=array", lambda: scan_kernel(arguments="const int x[4]"),
         ArgumentError, r"cannot parse argument 'const int x\[4\]'"),
    case("ScanKernel-arguments=keyword", lambda: scan_kernel(arguments="const int *class"),
         ArgumentError, r"argument 'const int \*class': 'class' is a C\+\+ keyword"),
    case("ScanKernel-arguments=reserved", lambda: scan_kernel(arguments="const int *item"),
         ArgumentError, "argument name 'item' is reserved"),
    case("ScanKernel-arguments=twice", lambda: scan_kernel(arguments="int *x, int *x"),
         ArgumentError, "argument 'x' is declared twice"),
    case("ScanKernel-arguments=struct scalar", lambda: scan_kernel(arguments="float2 v"),
         ArgumentError, "scalar arguments must have one of the types"),
    case("ScanKernel-input_expr=None", lambda: scan_kernel(input_expr=None), TypeError,
         "input_expr must be a string of C code, not NoneType"),
    case("ScanKernel-input_expr=statement", lambda: scan_kernel(input_expr="x[i]; out[0] = 1"),
         scangen.UserCodeError, "input_expr must be a single C expression"),
    case("ScanKernel-input_expr=unclosed comment", lambda: scan_kernel(input_expr="x[i] /*"),
         scangen.UserCodeError, "input_expr has an unclosed comment"),
    case("ScanKernel-output_statement=unbalanced",
         lambda: scan_kernel(output_statement="out[i] = item; }"), scangen.UserCodeError,
         r"output_statement has an unmatched '\}'"),
    case("ScanKernel-output_statement=unclosed string",
         lambda: scan_kernel(output_statement='printf("%d, item);'), scangen.UserCodeError,
         "output_statement has an unclosed string literal"),
    case("ScanKernel-preamble=int", lambda: scan_kernel(preamble=0), TypeError,
         "preamble must be a string of C code, not int"),
    case("ScanKernel-preamble=unclosed comment",
         lambda: scan_kernel(preamble="/* helpers\nint f(int v) { return v; }"),
         scangen.UserCodeError, "preamble has an unclosed comment"),
    case("ScanKernel-is_segment_start_expr=int", lambda: scan_kernel(is_segment_start_expr=1),
         TypeError, "is_segment_start_expr must be a string of C code, not int"),
    case("ScanKernel-is_segment_start_expr=statements",
         lambda: scan_kernel(is_segment_start_expr="x[i]; 1"), scangen.UserCodeError,
         "is_segment_start_expr must be a single C expression"),
    case("ScanKernel-counts=str", lambda: scan_kernel(np.int64, counts="yes"), TypeError,
         "counts must be True or False, not 'yes'"),
    case("ScanKernel-counts on floats", lambda: scan_kernel(np.float32, counts=True),
         ValueError, "counts=True counts with add over an integer type"),
    case("ScanKernel-last_item with chained",
         lambda: scan_kernel(output_statement="out[i] = last_item;", strategy="chained"),
         ValueError, "last_item"),
    case("ScanKernel-title", lambda: scan_kernel(title=None), TypeError,
         "title must be a string, not NoneType"),
    case("SegmentedScan-unknown option", lambda: scangen.SegmentedScan(np.int32, modes="x"),
         TypeError, "unexpected keyword argument 'modes'"),
    # Select, Partition: predicate, flags
    case("Select-neither", lambda: scangen.Select(np.float32), ValueError,
         r"give a predicate or the dtype of a flags mask \(flags=\).*not neither"),
    case("Select-both", lambda: scangen.Select(np.float32, "x > 0", flags=np.bool_),
         ValueError, r"give a predicate or the dtype of a flags mask \(flags=\).*not both"),
    case("Select-flags=float", lambda: scangen.Select(np.float32, flags=np.float32), TypeError,
         "flags must be bool or an integer dtype, not float32"),
    case("Select-flags=nope", lambda: scangen.Select(np.float32, flags="nope"), TypeError,
         "flags= takes the dtype of the mask"),
    case("Select-keep=no", lambda: scangen.Select(np.float32, "x > 0", keep="no"), TypeError,
         "keep"),
    case("Select-predicate=int", lambda: scangen.Select(np.float32, 5), TypeError,
         "predicate must be a string of C code, not int"),
    case("Select-predicate=statements", lambda: scangen.Select(np.float32, "x > 0; x = 1"),
         scangen.UserCodeError, "predicate must be a single C expression"),
    case("Select-predicate=unclosed", lambda: scangen.Select(np.float32, "(x > 0"),
         scangen.UserCodeError, r"predicate has an unclosed '\('"),
    case("Partition-predicate=None", lambda: scangen.Partition(np.float32, None), TypeError,
         "predicate must be a string of C code, not NoneType"),
    case("Partition-predicate=comment", lambda: scangen.Partition(np.float32, "x > 0 /* y"),
         scangen.UserCodeError, "predicate has an unclosed comment"),
    # RadixSort, RadixDigitOffsets, Histogram
    case("RadixSort-key_dtype=nope", lambda: scangen.RadixSort("nope"), TypeError,
         "key_dtype is not a numpy dtype: 'nope'"),
    case("RadixSort-key_dtype=None", lambda: scangen.RadixSort(None), TypeError,
         "key_dtype is required"),
    case("RadixSort-key_dtype=complex", lambda: scangen.RadixSort(np.complex64), TypeError,
         "keys of dtype complex64 cannot be radix sorted; key dtypes are"),
    case("RadixSort-key_dtype=struct", lambda: scangen.RadixSort(AFFINE_PAIR), TypeError,
         "cannot be radix sorted; key dtypes are"),
    case("RadixSort-value_dtype=nope", lambda: scangen.RadixSort(np.uint32, "nope"), TypeError,
         "value_dtype is not a numpy dtype: 'nope'"),
    case("RadixSort-value_dtype=bool", lambda: scangen.RadixSort(np.uint32, bool), TypeError,
         "unsupported value_dtype bool"),
    case("RadixDigitOffsets-key_dtype", lambda: scangen.RadixDigitOffsets("u3"), TypeError,
         "key_dtype is not a numpy dtype: 'u3'"),
    case("RadixDigitOffsets-bits=0", lambda: scangen.RadixDigitOffsets(np.uint32, bits=0),
         ValueError, r"bits=0: a digit has 1..16 bits"),
    case("RadixDigitOffsets-bits=str", lambda: scangen.RadixDigitOffsets(np.uint32, "8"),
         TypeError, "bits must be an int, not '8'"),
    case("Histogram-dtype=nope", lambda: scangen.Histogram("nope"), TypeError,
         "dtype is not a numpy dtype: 'nope'"),
    case("Histogram-dtype=complex", lambda: scangen.Histogram(np.complex64), TypeError,
         "histogram takes a dtype of .*, not complex64"),
    case("Histogram-dtype=float16", lambda: scangen.Histogram(np.float16), TypeError,
         "histogram takes a dtype of .*, not float16"),
    # one-shot functions: what they check before any array is looked at
    case("inclusive_scan-operator", lambda: scangen.inclusive_scan(np.arange(4), "a + b"),
         ValueError, r"operator 'a \+ b' is not a built-in .* it needs identity="),
    case("exclusive_scan-identity", lambda: scangen.exclusive_scan(
        np.arange(4), "add", identity=0), ValueError,
         "identity= goes with an operator written as a C expression"),
    case("inclusive_scan-identity=word", lambda: scangen.inclusive_scan(
        np.arange(4), "a < b ? a : b", identity="biggest"), ValueError,
         "identity 'biggest' is not a number"),
    case("inclusive_scan-options", lambda: scangen.inclusive_scan(np.arange(4), size=3),
         TypeError, "unexpected keyword argument 'size'"),
    case("inclusive_scan-options=unhashable", lambda: scangen.inclusive_scan(
        np.arange(4), algorithm=["naive"]), TypeError,
         r"scan option algorithm=\['naive'\] must be hashable"),
    case("exclusive_scan-tuning=dict", lambda: scangen.exclusive_scan(
        np.arange(4), tuning={"block": 128}), TypeError,
         r"scan option tuning=\{'block': 128\} must be hashable"),
    case("inclusive_scan-x=list", lambda: scangen.inclusive_scan([1, 2, 3]), TypeError,
         "x must be a pycuda GPUArray or another CUDA array .* not list"),
    case("select-x=None", lambda: scangen.select(None, "x > 0"), TypeError,
         "x must be a pycuda GPUArray or another CUDA array .* not NoneType"),
    case("select-predicate", lambda: scangen.select(np.arange(4.0)), ValueError,
         "give a predicate or the dtype of a flags mask"),
    case("remove_if-predicate", lambda: scangen.remove_if(np.arange(4.0), "x >; 0"),
         scangen.UserCodeError, "predicate must be a single C expression"),
    case("partition-predicate", lambda: scangen.partition(np.arange(4.0), None), TypeError,
         "predicate must be a string of C code"),
    case("unique-x", lambda: scangen.unique([1, 2]), TypeError, "x must be a pycuda GPUArray"),
    case("run_length_encode-x", lambda: scangen.run_length_encode("abc"), TypeError,
         "x must be a pycuda GPUArray"),
    case("radix_sort-keys", lambda: scangen.radix_sort(np.zeros(4, np.complex64)), TypeError,
         "keys of dtype complex64 cannot be radix sorted"),
    case("radix_sort-values", lambda: scangen.radix_sort(np.zeros(4, np.uint32), [1, 2]),
         TypeError, "values must be a pycuda GPUArray"),
    case("argsort-keys", lambda: scangen.argsort(np.zeros(4, np.float16)), TypeError,
         "keys of dtype float16 cannot be radix sorted"),
    case("radix_digit_offsets-bits", lambda: scangen.radix_digit_offsets(
        np.zeros(4, np.uint32), 0, bits=20), ValueError, "bits=20: a digit has 1..16 bits"),
    case("histogram-x", lambda: scangen.histogram(np.zeros(4, np.complex64), 4, (0, 1)),
         TypeError, "histogram takes a dtype of .*, not complex64"),
]


@pytest.mark.parametrize("make,error,message", CASES)
def test_a_bad_value_is_refused_naming_the_parameter(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_one_shot_scan_of_a_struct_takes_an_initial_value():
    """The cached scan behind a one-shot call with initial= is built with a value of the
    scan type (a struct's too), so only the device is missing here."""
    x = np.zeros(4, AFFINE_PAIR)
    with pytest.raises(scangen.GPUUnavailableError):
        scangen.inclusive_scan(x, COMPOSE, initial=(2.0, 1.0))
    with pytest.raises(scangen.GPUUnavailableError):
        scangen.exclusive_scan(np.zeros(4, np.complex64), initial=1 + 2j)


# --- call-time values, through device arrays without memory behind them -------------------

@pytest.fixture
def no_gpu(monkeypatch):
    simulate_device(monkeypatch)


def device(n, dtype, address=0x10000):
    return FakeDeviceArray(n, dtype, address)


def scan_kernel_call(*args, **keywords):
    return scan_kernel(initial=0)(*args, **keywords)


CALL_CASES = [
    # ScanKernel: pointers, scalars, n, stream, initial
    case("ScanKernel-pointer=int", lambda: scan_kernel_call(5, device(4, np.int32)), TypeError,
         r"argument 'x' \(const int \*x\) needs a device array or a scangen.DevicePointer, not "
         r"the int 5"),
    case("ScanKernel-pointer=numpy int", lambda: scan_kernel_call(
        device(4, np.int32), np.uint64(0x20000)), TypeError, "argument 'out' .* not the int"),
    case("ScanKernel-pointer=host array", lambda: scan_kernel_call(
        np.zeros(4, np.int32), device(4, np.int32)), TypeError,
         "argument 'x' .* not a host numpy array .*to_gpu"),
    case("ScanKernel-pointer=float", lambda: scan_kernel_call(device(4, np.int32), 1.5),
         TypeError, "argument 'out' .* not float 1.5"),
    case("ScanKernel-pointer=None", lambda: scan_kernel_call(device(4, np.int32), None),
         TypeError, "argument 'out' .* not NoneType None"),
    case("ScanKernel-pointer=bool", lambda: scan_kernel_call(True, device(4, np.int32)),
         TypeError, "argument 'x' .* not bool True"),
    case("ScanKernel-pointer=wrong dtype", lambda: scan_kernel_call(
        device(4, np.int64), device(4, np.int32)), TypeError,
         r"argument 'x' is declared const int \*x \(int32\) but the array has dtype int64"),
    case("ScanKernel-pointer=wrong DevicePointer dtype", lambda: scan_kernel_call(
        device(4, np.int32), scangen.DevicePointer(0x20000, np.float32, 4)), TypeError,
         r"argument 'out' is declared int \*out \(int32\) but the array has dtype float32"),
    case("ScanKernel-arguments=too few", lambda: scan_kernel_call(device(4, np.int32)),
         TypeError, r"takes 2 argument\(s\) \(x, out\) before n= and stream=, got 1"),
    case("ScanKernel-n=too large", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), n=5), ValueError,
         "n=5 is larger than the first array argument 'x' \\(4 elements\\)"),
    case("ScanKernel-n=past a DevicePointer", lambda: scan_kernel_call(
        scangen.DevicePointer(0x20000, np.int32, 3), device(4, np.int32), n=4), ValueError,
         "n=4 is larger than the first array argument 'x' \\(3 elements\\)"),
    case("ScanKernel-n=-1", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), n=-1), ValueError,
         "n must be a non-negative int, not -1"),
    case("ScanKernel-n=float", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), n=2.0), ValueError,
         "n must be a non-negative int, not 2.0"),
    case("ScanKernel-stream=str", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), stream="default"), TypeError,
         "stream= takes a pycuda Stream, a CuPy or torch stream"),
    case("ScanKernel-stream=-1", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), stream=-1), ValueError,
         "stream= handle -1 is not a CUstream"),
    case("ScanKernel-initial per call", lambda: scan_kernel_call(
        device(4, np.int32), device(4, np.int32), initial=1 << 31), ValueError,
         r"^initial \(int32\): 2147483648 does not fit int32"),
    case("ScanKernel-initial per call without one", lambda: scan_kernel()(
        device(4, np.int32), device(4, np.int32), initial=1), TypeError,
         "this kernel was built without initial="),
    case("ScanKernel-scalar", lambda: scangen.ScanKernel(
        np.int32, "add", arguments="const int *x, int k", input_expr="x[i] * k",
        output_statement="")(device(4, np.int32), 2.5), TypeError,
         r"argument 'k' \(int k\) needs an int, not 2.5"),
    # Scan, SegmentedScan: x, out, initial
    case("Scan-x=wrong dtype", lambda: scangen.Scan(np.int32)(device(4, np.float32)),
         TypeError, "x has dtype float32, but this scan was built for int32"),
    case("Scan-out=wrong dtype", lambda: scangen.Scan(np.int32)(
        device(4, np.int32), device(4, np.int64, 0x20000)), TypeError,
         "out has dtype int64, but this scan writes int32"),
    case("Scan-out=wrong length", lambda: scangen.Scan(np.int32)(
        device(4, np.int32), device(3, np.int32, 0x20000)), ValueError, "out"),
    case("Scan-x=host", lambda: scangen.Scan(np.int32)(np.zeros(4, np.int32)), TypeError,
         "x must be a pycuda GPUArray or another CUDA array .*copy it to the GPU first"),
    case("Scan-initial per call", lambda: scangen.Scan(np.int8, initial=0)(
        device(4, np.int8), initial=128), ValueError, r"^initial \(int8\): 128 does not fit"),
    case("SegmentedScan-no heads", lambda: scangen.SegmentedScan(np.int32)(
        device(4, np.int32)), TypeError, "flags=, offsets= or keys="),
    # RadixSort, RadixDigitOffsets, Histogram
    case("RadixSort-keys=wrong dtype", lambda: scangen.RadixSort(np.uint32)(
        device(4, np.int32)), TypeError, "keys has dtype int32; expected uint32"),
    case("RadixSort-begin_bit", lambda: scangen.RadixSort(np.uint32)(
        device(4, np.uint32), begin_bit=-1), ValueError,
         r"begin_bit=-1 is outside the key's 32 bits"),
    case("RadixSort-end_bit", lambda: scangen.RadixSort(np.uint8)(
        device(4, np.uint8), end_bit=9), ValueError, r"end_bit=9 is outside the key's 8 bits"),
    case("RadixSort-end_bit=float", lambda: scangen.RadixSort(np.uint8)(
        device(4, np.uint8), end_bit=8.0), TypeError, "end_bit must be an int"),
    case("RadixSort-begin past end", lambda: scangen.RadixSort(np.uint32)(
        device(4, np.uint32), begin_bit=9, end_bit=8), ValueError,
         "begin_bit=9 is past end_bit=8"),
    case("RadixSort-descending", lambda: scangen.RadixSort(np.uint32)(
        device(4, np.uint32), descending="yes"), TypeError,
         "descending must be True or False, not 'yes'"),
    case("RadixSort-values=wrong length", lambda: scangen.RadixSort(np.uint32, np.int32)(
        device(4, np.uint32), device(3, np.int32, 0x20000)), ValueError,
         "values has 3 elements; expected 4"),
    case("RadixSort-values not carried", lambda: scangen.RadixSort(np.uint32)(
        device(4, np.uint32), device(4, np.int32, 0x20000)), TypeError,
         "sorts keys only; build it with value_dtype"),
    case("RadixDigitOffsets-shift", lambda: scangen.RadixDigitOffsets(np.uint32)(
        device(4, np.uint32), 32), ValueError, r"shift=32 is outside the key's"),
    case("RadixDigitOffsets-descending", lambda: scangen.RadixDigitOffsets(np.uint32)(
        device(4, np.uint32), 0, descending=None), TypeError,
         "descending must be True or False, not None"),
    case("argsort-descending", lambda: scangen.argsort(device(4, np.uint32), descending=1),
         TypeError, "descending must be True or False, not 1"),
    case("Histogram-bins=0", lambda: scangen.Histogram(np.float32)(
        device(4, np.float32), 0, (0, 1)), ValueError, "bins must be at least 1, not 0"),
    case("Histogram-bins=str", lambda: scangen.Histogram(np.float32)(
        device(4, np.float32), "10", (0, 1)), TypeError, "bins must be an int"),
    case("Histogram-range=None", lambda: scangen.Histogram(np.float32)(
        device(4, np.float32), 4, None), TypeError, r"range=\(low, high\) is required"),
    case("Histogram-range=three", lambda: scangen.Histogram(np.float32)(
        device(4, np.float32), 4, (0, 1, 2)), TypeError,
         r"range must be a pair of numbers \(low, high\), not \(0, 1, 2\)"),
    case("Histogram-range=number", lambda: scangen.histogram(
        device(4, np.float32), 4, 1.0), TypeError, "range must be a pair of numbers"),
    case("Histogram-range=reversed", lambda: scangen.histogram(
        device(4, np.float32), 4, (1, 0)), ValueError, "the low end is past the high end"),
    case("Histogram-range=nan", lambda: scangen.histogram(
        device(4, np.float32), 4, (0, np.nan)), ValueError, "must be finite"),
    case("Histogram-x=wrong dtype", lambda: scangen.Histogram(np.float32)(
        device(4, np.float64), 4, (0, 1)), TypeError, "x has dtype float64; expected float32"),
]


@pytest.mark.parametrize("make,error,message", CALL_CASES)
def test_a_bad_call_is_refused_naming_the_parameter(no_gpu, make, error, message):
    with pytest.raises(error, match=message):
        make()


# --- scangen.DevicePointer ---------------------------------------------------------------

@pytest.mark.parametrize("args,error,message", [
    (("0x1000", np.int32, 4), TypeError, r"DevicePointer address must be an int .* not '0x1000'"),
    ((True, np.int32, 4), TypeError, "DevicePointer address must be an int"),
    ((4096.0, np.int32, 4), TypeError, "DevicePointer address must be an int"),
    ((-8, np.int32, 4), ValueError, "DevicePointer address -8 is not a 64-bit device address"),
    ((1 << 64, np.int32, 4), ValueError, "is not a 64-bit device address"),
    ((0, np.int32, 4), ValueError, r"DevicePointer address is 0 \(null\) for 4 elements"),
    ((0x1002, np.int32, 4), ValueError, "DevicePointer address 0x1002 is not aligned to 4 bytes"),
    ((0x1000, None, 4), TypeError, "DevicePointer dtype is required"),
    ((0x1000, "nope", 4), TypeError, "DevicePointer dtype is not a numpy dtype: 'nope'"),
    ((0x1000, np.int32, -1), ValueError, "DevicePointer size must be >= 0, not -1"),
    ((0x1000, np.int32, 4.0), TypeError, "DevicePointer size must be an int"),
])
def test_a_bad_device_pointer_is_refused(args, error, message):
    with pytest.raises(error, match=message):
        scangen.DevicePointer(*args)


def test_a_device_pointer_describes_its_memory():
    pointer = scangen.DevicePointer(np.uint64(0x2000), AFFINE_PAIR, 3)
    assert (pointer.ptr, pointer.dtype, pointer.size, pointer.nbytes) == \
        (0x2000, AFFINE_PAIR, 3, 48)
    interface = pointer.__cuda_array_interface__
    assert interface["shape"] == (3,) and interface["data"] == (0x2000, False)
    parsed = parse_cuda_array_interface(interface)
    assert parsed.dtype == AFFINE_PAIR and parsed.ptr == 0x2000
    assert scangen.DevicePointer(0, np.int8, 0).size == 0  # an empty array may be null
    assert "DevicePointer(0x2000" in repr(pointer)
    assert "DevicePointer" in scangen.__all__ and "DevicePointer" in scangen.ScanKernel.__doc__


# --- nvcc's errors, from its log -----------------------------------------------------------

def module(lines_before=60, piece="operator", body="a + b /* x", lines_after=800):
    """A module of about 860 lines with one user piece in it, as rendered."""
    text = "\n".join([f"// scangen line {k}" for k in range(lines_before)]
                     + [f"// user {piece} {{", body, f"// }} user {piece}"]
                     + [f"// scangen line {k}" for k in range(lines_after)])
    return ModuleSource(text, ("kernel",))


@pytest.mark.parametrize("log", [
    "module.cu(62): error: expected an expression",
    "module.cu:62:5: error: unterminated comment\n   62 | a + b /* x\n      |     ^",
    "module.cu:62:10: fatal error: nonexistent.h: No such file or directory\n"
    "compilation terminated.",
    "module.cu(62): catastrophic error: cannot open source file \"nonexistent.h\"",
])
def test_a_compile_error_names_the_piece_and_shows_only_its_lines(log):
    message = describe_compile_error(module(), log, "inclusive scan")
    assert "the first error is in your operator, line 62" in message, message
    assert "> 62 | a + b /* x" in message
    assert "scangen line 799" not in message and len(message.splitlines()) < 25, message


def test_a_long_log_is_cut_and_an_unplaced_error_shows_no_module():
    log = "\n".join(f"module.cu(62): error: number {k}" for k in range(200))
    message = describe_compile_error(module(), log, "x")
    assert "error: number 39" in message and "error: number 40" not in message
    assert "(160 more lines of nvcc's log)" in message
    unplaced = describe_compile_error(module(), "nvcc fatal: unsupported gpu architecture",
                                      "inclusive scan")
    assert "unsupported gpu architecture" in unplaced and "scangen line" not in unplaced
    assert "the object's .source" in unplaced

