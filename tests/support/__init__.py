"""What the tests share: the operator zoo (non-commutative ones first), dtype lists, input
generators, poisoned outputs, the reference with its tolerance, boundary sizes.

Import from here instead of copying a helper into a test file.
"""
import contextlib
import ctypes
import importlib
import importlib.util
import itertools
import math
import os
import re
import shutil
import sys
import types
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

import scangen
from scangen import BUILTIN_OPERATORS, ELEMENT_TYPES, LAST_NONZERO, MODES, Operator, dlpack
from scangen.ops import AFFINE_THEN
from scangen.workloads import STRUCTS
from scangen.strategies import TOTAL_NAMES, strategy_for
from scangen.strategies.single_pass import SinglePass
from scangen.types import element_type

DTYPES = [t.name for t in ELEMENT_TYPES.values()]

try:  # bfloat16 is numpy's only through ml_dtypes
    import ml_dtypes
except ImportError:
    BFLOAT16 = None
else:
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: For tests of bfloat16: they skip, saying why, where ml_dtypes is not installed.
needs_bfloat16 = pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed (pip "
                                    "install ml_dtypes): numpy has no bfloat16 without it")


def kind(dtype) -> str:
    """numpy's kind letter as scangen sees it: "f" for ml_dtypes' bfloat16 (numpy says "V")."""
    dtype = np.dtype(dtype)
    return dtype.kind if dtype.fields is not None else element_type(dtype).kind

# --- operators ---------------------------------------------------------------------------

#: x -> m*x + c (mod 2^32) packed as m << 32 | c; combine(a, b) applies a, then b. uint64 only.
AFFINE = AFFINE_THEN


def _saturating_reference(a, b):
    return np.minimum(np.asarray(a, np.uint16) + np.asarray(b, np.uint16), 255).astype(np.uint8)


#: A saturating add on uint8 through a device function in the preamble.
SATURATING_ADD = Operator(
    "sat_add(a, b)", 0, name="sat_add", reference=_saturating_reference,
    preamble="""
// saturating add: associative on non-negative values
static __device__ __forceinline__ unsigned char sat_add(unsigned char a, unsigned char b)
{
    const unsigned int s = (unsigned int)a + (unsigned int)b;
    return s > 255u ? (unsigned char)255 : (unsigned char)s;
}""")

#: A preamble with a nested aggregate initializer: "{{" is valid C and must come out verbatim.
TABLE_LOOKUP = Operator(
    "pick(a, b)", 0, name="table_pick",
    preamble="static __device__ const int kTable[2][2] = {{0, 1}, {1, 0}};\n"
             "static __device__ __forceinline__ int pick(int a, int b) "
             "{ return b != 0 ? b : a + kTable[0][0]; }")

# Struct operators (numpy structured dtypes; references work on structured arrays).

#: x -> m*x + c over float64 (m, c) pairs; combine(a, b) applies a, then b: the bench's
#: 16-byte struct scan.
AFFINE_PAIR = STRUCTS["affine-f64x2"].dtype
AFFINE_PAIRS = STRUCTS["affine-f64x2"].operator

#: A running maximum with the index where it was first reached (ties keep the first).
VALUE_INDEX = np.dtype([("value", np.int32), ("index", np.int64)], align=True)


def _argmax_reference(a, b):
    return np.where(b["value"] > a["value"], b, a)


ARGMAX = Operator("b.value > a.value ? b : a", (np.iinfo(np.int32).min, -1), name="argmax",
                  reference=_argmax_reference)

#: A struct of mixed field sizes: seven padding bytes after ``flag``, a sub-array, a nested
#: struct with a float16 field (so a struct brings cuda_fp16.h too).
MIXED = np.dtype([("flag", np.uint8), ("v", np.float64), ("idx", np.int32, (2,)),
                  ("inner", [("a", np.int16), ("h", np.float16)])], align=True)

MIXED_PREAMBLE = """
// MIXED's fields combined one by one: sums (flag wraps), maxima in the nested struct.
static __device__ __forceinline__ scan_t mixed_combine(scan_t a, scan_t b)
{
    scan_t r;
    r.flag = (unsigned char)(a.flag + b.flag);
    r.v = a.v + b.v;
    r.idx[0] = a.idx[0] + b.idx[0];
    r.idx[1] = a.idx[1] + b.idx[1];
    r.inner.a = b.inner.a > a.inner.a ? b.inner.a : a.inner.a;
    r.inner.h = (float)b.inner.h > (float)a.inner.h ? b.inner.h : a.inner.h;
    return r;
}"""


def _mixed_reference(a, b):
    out = np.empty(np.broadcast(a, b).shape, MIXED)
    with np.errstate(over="ignore"):
        out["flag"] = a["flag"] + b["flag"]
    out["v"] = a["v"] + b["v"]
    out["idx"] = a["idx"] + b["idx"]
    out["inner"]["a"] = np.maximum(a["inner"]["a"], b["inner"]["a"])
    out["inner"]["h"] = np.maximum(a["inner"]["h"], b["inner"]["h"])
    return out


#: An operator over MIXED, exact on integer-valued input (sums of small integers, maxima).
MIXED_COMBINE = Operator("mixed_combine(a, b)", (0, 0.0, (0, 0), (-32768, -np.inf)),
                         name="mixed_combine", preamble=MIXED_PREAMBLE,
                         reference=_mixed_reference)

#: Running (count, mean, M2) statistics, Chan et al.'s parallel combination.
STATS = np.dtype([("count", np.float64), ("mean", np.float64), ("m2", np.float64)])
STATS_PREAMBLE = """
static __device__ __forceinline__ scan_t merge_stats(scan_t a, scan_t b)
{
    const double count = a.count + b.count;
    if (count == 0.0)
        return a;
    const double delta = b.mean - a.mean;
    scan_t r;
    r.count = count;
    r.mean = a.mean + delta * (b.count / count);
    r.m2 = a.m2 + b.m2 + delta * delta * (a.count * b.count / count);
    return r;
}"""


def _stats_reference(a, b):
    out = np.empty(np.broadcast(a, b).shape, a.dtype)
    count = a["count"] + b["count"]
    safe = np.where(count == 0, 1, count)
    delta = b["mean"] - a["mean"]
    out["count"] = count
    out["mean"] = np.where(count == 0, a["mean"], a["mean"] + delta * (b["count"] / safe))
    out["m2"] = np.where(count == 0, a["m2"],
                         a["m2"] + b["m2"] + delta * delta * (a["count"] * b["count"] / safe))
    return out


RUNNING_STATS = Operator("merge_stats(a, b)", (0.0, 0.0, 0.0), name="running_stats",
                         preamble=STATS_PREAMBLE, reference=_stats_reference)

def _field_sums_reference(a, b):
    out = np.empty_like(a)
    for name in a.dtype.names:
        out[name] = a[name] + b[name]
    return out


def field_sums(dtype) -> Operator:
    """Field-by-field addition over a struct of scalar fields (identity: all zeros)."""
    dtype = np.dtype(dtype)
    fields = ", ".join(f"a.{name} + b.{name}" for name in dtype.names)
    return Operator(f"scan_t{{{fields}}}", tuple(0 for _ in dtype.names), name="field_sums",
                    reference=_field_sums_reference)


#: Structs of 12, 24, 32 and 48 bytes (three float32; the (count, mean, m2) of running
#: statistics; four and six float64), for wide values, each with field_sums.
WIDE_STRUCTS = {
    12: np.dtype([("x", np.float32), ("y", np.float32), ("z", np.float32)]),
    24: np.dtype([("count", np.int64), ("mean", np.float64), ("m2", np.float64)]),
    32: np.dtype([(f"f{k}", np.float64) for k in range(4)]),
    48: np.dtype([(f"f{k}", np.float64) for k in range(6)]),
}


#: Every element type scangen documents, as the type matrices take them: the scalar types,
#: bfloat16 where ml_dtypes is installed, and two struct layouts.
ELEMENT_DTYPES = [np.dtype(d) for d in DTYPES] + ([BFLOAT16] if BFLOAT16 is not None else []) \
    + [AFFINE_PAIR, MIXED]


def dtype_label(dtype) -> str:
    """A short name of an ELEMENT_DTYPES dtype, for test ids."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.fields is None else "struct_" + "_".join(dtype.names)


def sum_operator(dtype):
    """An operator every ELEMENT_DTYPES dtype takes, with a numpy reference: add for the
    scalar types, AFFINE_PAIRS and MIXED_COMBINE for the structs (add for any other, which
    refuses a struct)."""
    return {AFFINE_PAIR: AFFINE_PAIRS, MIXED: MIXED_COMBINE}.get(np.dtype(dtype),
                                                                 BUILTIN_OPERATORS["add"])


def small_values(rng, dtype, n, high):
    """n integers from [0, high) as ``dtype``: for a struct, every scalar of an element (each
    field, each sub-array element) holds its integer; for complex, the imaginary part too."""
    return integers_as(rng.integers(0, high, n), dtype)


def integers_as(values, dtype):
    """Integers as ``dtype``, as small_values makes them."""
    dtype = np.dtype(dtype)
    if dtype.fields is None:
        if kind(dtype) == "c":
            return (values + 1j * values).astype(dtype)
        return values.astype(dtype)
    out = np.zeros(len(values), dtype)
    _fill_fields(out, values)
    return out


def _fill_fields(out, values):
    if out.dtype.fields is None:
        out[...] = values.reshape(values.shape + (1,) * (out.ndim - values.ndim))
        return
    for name in out.dtype.names:
        _fill_fields(out[name], values)


def keep_predicate(dtype):
    """``(C predicate, numpy twin)`` for Select and Partition of any ELEMENT_DTYPES dtype:
    the element's first scalar (the value, a complex number's real part, a struct's first
    field, recursively; not a sub-array) above 1, at an index i with i % 3 != 1. The twin
    takes the host array and gives the mask of kept elements."""
    dtype, path, names = np.dtype(dtype), "", []
    while dtype.fields is not None:
        names.append(dtype.names[0])
        path += "." + dtype.names[0]
        dtype = dtype.fields[dtype.names[0]][0]
    if kind(dtype) == "c":
        path += ".re"

    def twin(x):
        for name in names:
            x = x[name]
        values = x.real if kind(x.dtype) == "c" else x
        return (values.astype(np.float64) > 1) & (np.arange(len(values)) % 3 != 1)

    return f"x{path} > 1 && i % 3 != 1", twin


#: Operators with a numpy twin, by name: the built-ins, then the non-commutative ones.
OPERATORS = {**BUILTIN_OPERATORS, "last_nonzero": LAST_NONZERO}


def operator(name):
    return AFFINE if name == "affine_then" else OPERATORS[name]


def valid(dtype, op):
    """Whether op takes dtype (bitwise operators need integers, min and max an order)."""
    try:
        op.check_dtype(dtype)
    except TypeError:
        return False
    return True


def type_operator_pairs():
    """Every (dtype, operator name) the library accepts among OPERATORS."""
    return [(d, o) for d, o in itertools.product(DTYPES, OPERATORS) if valid(d, OPERATORS[o])]


# --- ScanKernel hooks the tests share -------------------------------------------------------

#: Stream compaction: keep x[i] > 0.5 in order; the count of the last index is how many.
COMPACTION = dict(arguments="const float *x, float *out, long long *count",
                  input_expr="x[i] > 0.5f ? 1 : 0",
                  output_statement="if (prev_item != item) out[prev_item] = x[i]; "
                                   "if (i == n - 1) *count = item;")
#: Run-length encoding of x (counts=True): each run's value at its head, with the length of
#: the run before it (prev_last_counted is that run's head); the last run's at the end.
RUN_LENGTHS = dict(arguments="const int *x, int *values, long long *lengths, long long *runs",
                   input_expr="(i == 0 || x[i] != x[i - 1]) ? 1 : 0", counts=True,
                   output_statement="if (item != prev_item) { values[prev_item] = x[i]; "
                                    "if (prev_item > 0) lengths[prev_item - 1] = "
                                    "i - prev_last_counted; } if (i == n - 1) { "
                                    "lengths[item - 1] = n - last_counted; *runs = item; }")
#: Stable partition: the elements below the pivot first, then the others; needs the total.
PARTITION = dict(arguments="const int *x, int pivot, int *out",
                 input_expr="x[i] < pivot ? 1 : 0",
                 output_statement="if (item != prev_item) out[prev_item] = x[i]; "
                                  "else out[last_item + (i - prev_item)] = x[i];")
#: Affine maps x -> m*x + c as two arrays, packed into the uint64 AFFINE composes.
AFFINE_MAPS = dict(arguments="const unsigned int *m, const unsigned int *c, scan_t *out",
                   input_expr="((scan_t)m[i] << 32) | (scan_t)c[i]",
                   output_statement="out[i] = item;")


def counting_kernel(strategy, dtype, section_size, items_per_thread, reverse=False,
                    initial=None, last_counted=False, tuning=None):
    """counts=True: the places of the odd elements, every item, prev_item, (where the
    strategy knows it) last_item and (with last_counted) last_counted and prev_last_counted
    written out; check_counting runs it."""
    with_total = strategy in TOTAL_STRATEGIES
    return scangen.ScanKernel(
        dtype, "add", arguments="const int *x, scan_t *items, scan_t *prev_items, scan_t *last"
                                + (", long long *lasts, long long *prev_lasts"
                                   if last_counted else ""),
        input_expr="(x[i] & 1) ? 1 : 0", counts=True, reverse=reverse, initial=initial,
        output_statement="items[i] = item; prev_items[i] = prev_item;"
                         + (" if (i == 0) *last = last_item;" if with_total else "")
                         + (" lasts[i] = last_counted; prev_lasts[i] = prev_last_counted;"
                            if last_counted else ""),
        strategy=strategy, section_size=section_size, items_per_thread=items_per_thread,
        tuning=tuning)


#: Strategies that know the total before their output pass (output may use last_item), and
#: the single-pass ones (one launch, the total known only at the end): the library's own
#: lists, so a strategy added there is tested here.
TOTAL_STRATEGIES = TOTAL_NAMES
SINGLE_PASS = tuple(name for name in scangen.STRATEGIES
                    if isinstance(strategy_for(name, False), SinglePass))
#: counting_kernel's (dtype, section, items per thread, reverse, initial, last_counted):
#: blocks of one, two and eight warps; a block of 16 threads (not whole warps: values are
#: scanned, not ballots); each way of counting also with last_counted (8-byte counts only).
COUNTING_CASES = [("int64", 64, 2, False, None, False), ("int64", 64, 1, True, None, False),
                  ("uint32", 1024, 4, False, 5, False), ("int32", 256, 1, True, 3, False),
                  ("int64", 32, 2, False, None, False), ("int64", 64, 2, False, None, True),
                  ("uint64", 1024, 4, False, 5, True), ("int64", 32, 2, False, None, True)]


def check_counting(gpuarray, rng, strategy, case, tuning=None):
    """counting_kernel(strategy, *case) against the reference, sizes around its sections,
    long runs of kept and dropped elements, poisoned outputs."""
    dtype, section, items_per_thread, reverse, initial, last_counted = case
    kernel = counting_kernel(strategy, *case, tuning=tuning)
    assert kernel.scan_module.counts_by_ballots == (section // items_per_thread % 32 == 0)
    assert kernel.scan_module.tracks_last_counted == last_counted
    for n in boundary_sizes(section, rng, levels=2) + [section ** 2 * 3 + 7]:
        x = rng.integers(-1000, 1000, n).astype(np.int32)
        if n > 100:  # a long run of each kind, so whole warps and sections agree
            x[n // 4: n // 2] = 2 * (x[n // 4: n // 2] // 2)
            x[n // 2: 3 * n // 4] |= 1
        outputs = {name: guarded_output(gpuarray, rng, size, dtype_)
                   for name, size, dtype_ in (("items", n, dtype), ("prev_items", n, dtype),
                                              ("last", 1, dtype), ("lasts", n, np.int64),
                                              ("prev_lasts", n, np.int64))}
        kernel(gpuarray.to_gpu(x), *(outputs[name].out for name in ("items", "prev_items",
                                                                     "last")),
               *([outputs["lasts"].out, outputs["prev_lasts"].out] if last_counted else []))
        items, prev_items, last, lasts, prev_lasts = (
            assert_guard_untouched(guarded, name) for name, guarded in outputs.items())
        odd = (x & 1).astype(dtype)
        if reverse:
            odd = odd[::-1]
        start = np.array([0 if initial is None else initial], dtype)
        want = reference(np.concatenate([start, odd]), "add", "inclusive")
        want_items, want_prev = want[1:], want[:-1]
        if reverse:
            want_items, want_prev = want_items[::-1], want_prev[::-1]
        np.testing.assert_array_equal(items, want_items)
        np.testing.assert_array_equal(prev_items, want_prev)
        if strategy in TOTAL_STRATEGIES and n:
            assert last[0] == want[-1], n
        if last_counted:  # the index of the latest odd element so far, -1 before the first
            latest = np.maximum.accumulate(np.concatenate([[-1], np.where(x & 1, np.arange(n),
                                                                          -1)]))
            np.testing.assert_array_equal(lasts, latest[1:])
            np.testing.assert_array_equal(prev_lasts, latest[:-1])


# --- data --------------------------------------------------------------------------------

def boundary_sizes(section, rng, levels=3):
    """0, 1, both sides of the section and of section^2, past section^3, and a random size."""
    sizes = {0, 1, 2, section - 1, section, section + 1, section * section - 1,
             section * section, section * section + 1,
             int(rng.integers(2, 5 * section * section))}
    if levels >= 3:
        sizes.add(section ** 3 + 3)
    return sorted(s for s in sizes if s >= 0)


def random_input(rng, dtype, op_name, n):
    """Values that exercise the operator without being trivial (never all zeros or ones)."""
    dtype = np.dtype(dtype)
    etype = element_type(dtype)
    if op_name == "affine_then":
        m = rng.integers(0, 2**32, n, dtype=np.uint64) | np.uint64(1)
        c = rng.integers(0, 2**32, n, dtype=np.uint64)
        return (m << np.uint64(32)) | c
    if etype.is_half and op_name in ("add", "mul"):
        # Half precision holds integers exactly only up to 2048 (bfloat16: 256): sparse +-1
        # steps, a random walk kept well inside that, keep every partial sum (and product)
        # exact, so any order of combining agrees.
        exact = 2.0 ** (etype.finfo().nmant + 1)
        rate = min(0.002, (exact / 8) ** 2 / max(n, 1))
        steps = np.where(rng.random(n) < rate, rng.choice([-1.0, 1.0], n), 0.0)
        return (steps if op_name == "add" else np.where(steps == 0, 1.0, steps)).astype(dtype)
    if etype.kind in "fc" and op_name == "add":
        # Eighths from -1 to 1: a random walk whose partial sums (of any consecutive run)
        # stay far inside the mantissa (float32: up to about 2^38 elements), so every order
        # of adding is exact and the result compares exactly (assert_scan_equal).
        if etype.kind == "c":
            return ((rng.integers(-8, 9, n) + 1j * rng.integers(-8, 9, n)) / 8).astype(dtype)
        return (rng.integers(-8, 9, n) / 8).astype(dtype)
    if etype.kind == "c":
        if op_name == "mul":  # powers of i: every product is one, exact in any order
            return np.array([1, 1j, -1, -1j])[rng.integers(0, 4, n)].astype(dtype)
        return (rng.uniform(0, 1, n) + 1j * rng.uniform(-1, 1, n)).astype(dtype)
    if etype.kind == "f":
        if op_name == "mul":
            # +-1, with sparse halvings and doublings: the exponent walks far inside the
            # type's range, so every product is exact in any order.
            rate = min(0.01, 6 ** 2 / max(n, 1))
            exponent = np.where(rng.random(n) < rate, rng.choice([-1.0, 1.0], n), 0.0)
            sign = np.where(rng.random(n) < 0.3, -1.0, 1.0)
            return (sign * 2.0 ** exponent).astype(dtype)
        if op_name == "last_nonzero":
            return np.where(rng.random(n) < 0.7, 0, rng.normal(size=n)).astype(dtype)
        return rng.uniform(0.0, 1.0, n).astype(dtype)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if op_name == "last_nonzero":
        values[rng.random(n) < 0.7] = 0
    if op_name == "bit_and":
        values |= rng.integers(0, info.max, n, dtype=dtype, endpoint=True)  # keep bits alive
    return values


def exact_affine_pairs(rng, n):
    """AFFINE_PAIR maps x -> m*x + c with m = +-1 and small integer c: every composition is
    exact in float64 (and still depends on the order), so any grouping agrees exactly."""
    x = np.zeros(n, AFFINE_PAIR)
    x["m"] = rng.choice([-1.0, 1.0], n)
    x["c"] = rng.integers(-8, 9, n)
    return x


def value_index_input(rng, n):
    """VALUE_INDEX values with many ties (ARGMAX keeps the first), each with its index."""
    x = np.zeros(n, VALUE_INDEX)
    x["value"], x["index"] = rng.integers(0, 20, n), np.arange(n)
    return x


def random_chunks(rng, n, most=None):
    """Chunk sizes that add up to n, in random order: empty and one-element chunks among
    them, and the rest cut at random places."""
    most = max(1, n // 4) if most is None else most
    sizes = [0, 1, 0] if n >= 1 else [0, 0]
    left = n - sum(sizes)
    while left:
        size = int(rng.integers(1, min(most, left) + 1))
        sizes.append(size)
        left -= size
    return tuple(int(s) for s in rng.permutation(sizes))


def zeros_and_others(rng, dtype, n):
    """About half zeros, the rest nonzero, as numpy.flatnonzero tells them apart: bool, the
    integers (their extremes among the others), floats with -0.0 among the zeros and NaN and
    inf among the others, complex numbers zero or nonzero by either part."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(n) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.choice([1, 2, info.max, info.min or 7], n)
        return np.where(rng.random(n) < 0.5, 0, values).astype(dtype)
    values = rng.choice([1.5, -2.0, np.nan, np.inf, -0.0, 0.0], n)
    if dtype.kind == "c":
        return (values + 1j * rng.choice([0.0, -0.0, 3.0, np.nan], n)).astype(dtype)
    return values.astype(dtype)


def poison_values(rng, dtype, n):
    """Host values a correct kernel would not leave in an output by chance."""
    dtype = np.dtype(dtype)
    if dtype.fields is not None:  # every byte 0xFF: NaN in float fields, -1 in integer ones
        return np.full(n * dtype.itemsize, 0xFF, np.uint8).view(dtype)
    if kind(dtype) in "fc":
        return np.full(n, np.nan, dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def poisoned(gpuarray, rng, n, dtype):
    """A device array full of poison."""
    return gpuarray.to_gpu(poison_values(rng, dtype, n))


#: Elements past n in a guarded output: poisoned, and checked untouched after the call.
GUARD = 67


class GuardedOutput:
    """A poisoned device array of n + guard elements; ``out`` is its first n, what the
    call under test gets; ``assert_guard_untouched`` checks the rest afterwards."""

    def __init__(self, gpuarray, rng, n, dtype, guard=GUARD):
        self.n, self.dtype = n, np.dtype(dtype)
        self.poison = poison_values(rng, self.dtype, n + guard)
        self.whole = gpuarray.to_gpu(self.poison)
        self.out = self.whole[:n]


def guarded_output(gpuarray, rng, n, dtype, guard=GUARD) -> GuardedOutput:
    """n + guard poisoned elements on the device; pass ``.out`` (the first n) to the call,
    then ``assert_guard_untouched(it)``."""
    return GuardedOutput(gpuarray, rng, n, dtype, guard)


def assert_guard_untouched(guarded: GuardedOutput, what="output"):
    """Assert nothing was written past the first n elements (compared byte for byte, so a
    NaN poison counts as untouched); return the first n, on the host."""
    host = guarded.whole.get()
    written = host[guarded.n:].view(np.uint8) != guarded.poison[guarded.n:].view(np.uint8)
    if written.any():
        first = int(np.flatnonzero(written)[0]) // guarded.dtype.itemsize
        raise AssertionError(f"{what}: written past its {guarded.n} elements, at n + {first}")
    return host[: guarded.n]


# --- what a run may skip -------------------------------------------------------------------

def _env_set(name) -> bool:
    return os.environ.get(name) == "1"


def allowed_skips() -> frozenset:
    """SCANGEN_ALLOW_SKIP: comma-separated names (a module, or multi_gpu) that may skip
    even under SCANGEN_REQUIRE_GPU=1: what a GPU machine genuinely lacks."""
    return frozenset(part.strip() for part in os.environ.get("SCANGEN_ALLOW_SKIP", "").split(",")
                     if part.strip())


def skip_or_fail(reason, *, required_by="SCANGEN_REQUIRE_GPU", allow=None):
    """Skip with ``reason``; fail instead where the environment variable ``required_by`` is
    1, unless ``allow`` is listed in SCANGEN_ALLOW_SKIP."""
    if _env_set(required_by) and (allow is None or allow not in allowed_skips()):
        hint = f" (SCANGEN_ALLOW_SKIP={allow} lets it skip)" if allow else ""
        pytest.fail(f"{required_by}=1 but {reason}{hint}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name, *, allow=None):
    """Import module ``name`` for a GPU test, or skip saying it is missing (a failure under
    SCANGEN_REQUIRE_GPU=1 unless SCANGEN_ALLOW_SKIP lists ``allow``, by default the
    top-level package's name)."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        skip_or_fail(f"{name} is not installed ({err})", allow=allow or name.split(".")[0])


def require_gpus(count):
    """Skip unless ``count`` GPUs are visible (a failure under SCANGEN_REQUIRE_GPU=1 unless
    SCANGEN_ALLOW_SKIP lists multi_gpu)."""
    from scangen.compile import require_pycuda

    visible = require_pycuda().Device.count()
    if visible < count:
        skip_or_fail(f"{visible} GPU(s) here: this test needs {count}", allow="multi_gpu")


def require_nvcc():
    """The path of nvcc, or skip saying it is not on PATH; SCANGEN_REQUIRE_NVCC=1 (which
    .ci/run sets where nvcc is installed) makes that a failure."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        skip_or_fail("nvcc is not on PATH", required_by="SCANGEN_REQUIRE_NVCC")
    return nvcc


def optional_nvcc():
    """The path of nvcc, or None for a test that does less without it; a failure under
    SCANGEN_REQUIRE_NVCC=1."""
    nvcc = shutil.which("nvcc")
    if nvcc is None and _env_set("SCANGEN_REQUIRE_NVCC"):
        pytest.fail("SCANGEN_REQUIRE_NVCC=1 but nvcc is not on PATH", pytrace=False)
    return nvcc


#: Mark for tests that compile with nvcc: through the ``nvcc`` fixture (tests/conftest.py),
#: so they skip without it, or fail under SCANGEN_REQUIRE_NVCC=1.
needs_nvcc = pytest.mark.usefixtures("nvcc")


# --- GPU ---------------------------------------------------------------------------------

def precompile(kernels):
    """nvcc the modules of many Scans/ScanKernels (or other modules) up front, in
    parallel threads (scangen's cubin cache keeps them), instead of one at a time as tests
    first touch them. Does nothing without a GPU: the ``gpu`` fixture reports that (skip or
    failure) per test."""
    from scangen import compile as scan_compile

    try:
        scan_compile.current_context()
    except scan_compile.GPUUnavailableError:
        return
    specs = [k if hasattr(k, "entry_points") else getattr(k, "kernel", k).scan_module
             for k in kernels]
    scan_compile.precompile(specs, workers=16)


# --- device arrays simulated on the CPU ------------------------------------------------------

class FakeDeviceArray:
    """An object with a ``__cuda_array_interface__`` (no memory behind it): what the boundary
    (scangen.interop) and argument conversion see of a Numba or CuPy array."""

    def __init__(self, n, dtype, address=0x10000, **interface):
        shape = n if isinstance(n, tuple) else (n,)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": np.dtype(dtype).str,
                                         "data": (address, False), "version": 3, **interface}


class FakeCupyArray:
    """What scangen reads of a cupy.ndarray."""

    def __init__(self, shape, dtype, ptr=0x1000, device=0, contiguous=True):
        self.shape = shape if isinstance(shape, tuple) else (shape,)
        self.dtype = np.dtype(dtype)
        self.data = types.SimpleNamespace(ptr=ptr)
        self.device = types.SimpleNamespace(id=device)
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)

    def __getitem__(self, key):
        return ("slice of", self, key)


class FakeDLPack:
    """A DLPack producer whose tensor lives in ctypes memory; ``namespace``: what its
    ``__array_namespace__`` returns (None: it has none)."""

    def __init__(self, shape, code=2, bits=32, strides=None, device_type=2, device_id=0,
                 data=0x3000, byte_offset=0, namespace=None):
        self.device = (device_type, device_id)
        self.streams = []
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.managed = dlpack.DLManagedTensor()
        tensor = self.managed.dl_tensor
        tensor.data, tensor.ndim, tensor.byte_offset = data, len(shape), byte_offset
        tensor.device = dlpack.DLDevice(device_type, device_id)
        tensor.dtype = dlpack.DLDataType(code, bits, 1)
        tensor.shape = self._shape
        if strides is not None:
            tensor.strides = self._strides
        if namespace is not None:
            self.__array_namespace__ = lambda api_version=None: namespace

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return dlpack._new_capsule(ctypes.addressof(self.managed), b"dltensor", None)


class ConsumedTensor:
    """What FakeArrayNamespace.from_dlpack makes of a capsule: the tensor's fields, read as
    a consumer reads them, and ``release()``, which calls its deleter as a consumer does
    once done with the data."""

    def __init__(self, address):
        self.address = address
        managed = dlpack.DLManagedTensor.from_address(address)
        tensor = managed.dl_tensor
        self.ptr, self.byte_offset = tensor.data or 0, tensor.byte_offset
        self.device = (tensor.device.device_type, tensor.device.device_id)
        self.type = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
        self.shape = tuple(tensor.shape[k] for k in range(tensor.ndim))
        self.strides = tuple(tensor.strides[k] for k in range(tensor.ndim)) \
            if tensor.strides else None
        self.released = False

    def release(self):
        assert not self.released, "a consumer calls the deleter once"
        self.released = True
        deleter = dlpack.DLManagedTensor.from_address(self.address).deleter
        if deleter:  # DLPack allows none
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(self.address)


class FakeArrayNamespace:
    """An array library's namespace (``__array_namespace__``) as a DLPack consumer: its
    ``from_dlpack`` asks for a capsule on ``stream``, takes it (renaming it, as consumers
    do) and returns a ConsumedTensor; with ``take=False`` it asks and then fails without
    taking it."""

    def __init__(self, stream=0x7700, take=True):
        self.stream, self.take = stream, take
        self.consumed = []

    def from_dlpack(self, producer):
        assert producer.__dlpack_device__()[0] == 2
        capsule = producer.__dlpack__(stream=self.stream)
        if not self.take:
            raise RuntimeError("this consumer takes nothing")
        address = dlpack._capsule_pointer(capsule, b"dltensor")
        dlpack._capsule_set_name(capsule, b"used_dltensor")
        self.consumed.append(ConsumedTensor(address))
        return self.consumed[-1]


class FakeCupyStream:
    def __init__(self, ptr, device_id=0):
        self.ptr, self.device_id = ptr, device_id


FakeCupyStream.__module__ = "cupy.cuda.stream"


def fake_cupy_module(monkeypatch, current_stream=0x5000):
    """A cupy module in sys.modules (scangen only looks it up there) whose current stream is
    ``current_stream``; empty() hands out fresh addresses and records the stream it
    allocated under. Returns its state (current, allocated_under, next_ptr)."""
    state = types.SimpleNamespace(current=current_stream, allocated_under=[], next_ptr=0x90000)
    module = types.ModuleType("cupy")
    module.ndarray = FakeCupyArray

    def empty(shape, dtype):
        state.next_ptr += 0x1000
        state.allocated_under.append(state.current)
        return FakeCupyArray(shape, dtype, ptr=state.next_ptr)

    @contextlib.contextmanager
    def external_stream(handle, device_id):
        before, state.current = state.current, handle
        yield
        state.current = before

    module.empty = empty
    module.cuda = types.SimpleNamespace(
        get_current_stream=lambda: FakeCupyStream(state.current),
        ExternalStream=external_stream)
    monkeypatch.setitem(sys.modules, "cupy", module)
    return state


class FakeContext:
    """What scangen reads of a pycuda Context: its handle; hashed as the object, as pycuda
    hashes one (two objects for one CUcontext hash apart)."""

    def __init__(self, handle):
        self.handle = handle


class RecordedLaunch(NamedTuple):
    """One call of Runtime.launch, which every scan-based call goes through."""

    title: str
    values: tuple
    n: int
    stream: object
    #: The layout of a kernel of lines (scangen.plan.make_plan), else None.
    layout: tuple | int | None


def record_launches(monkeypatch, run=False) -> list:
    """The scan launches calls make, each a RecordedLaunch, in a list that fills as they are
    made; ``run``: launch them too (on a GPU), else record them instead of launching."""
    from scangen.runtime import launcher

    recorded = []
    launch = launcher.Runtime.launch

    def recording(runtime, values, n, stream, layout=None):
        recorded.append(RecordedLaunch(runtime.scan_module.hooks.title, values, n, stream,
                                       layout))
        if run:
            launch(runtime, values, n, stream, layout)

    monkeypatch.setattr(launcher.Runtime, "launch", recording)
    return recorded


def simulate_device(monkeypatch, device=0, context=0xC0):
    """Let scangen.interop check devices and streams without a GPU: every pointer is on
    ``device``, the current context is ``context`` on ``device`` (scangen.current_context
    gives a FakeContext of that handle), every stream handle belongs to it, and no stream
    is being captured into a CUDA graph."""
    from scangen import interop
    from scangen.runtime import contexts, gpu, streams

    current = FakeContext(context)
    monkeypatch.setattr(contexts, "current_context", lambda: current)

    class NoGPUArray:
        pass

    monkeypatch.setattr(gpu, "gpuarray", lambda: type("gpuarray", (), {
        "GPUArray": NoGPUArray}))
    monkeypatch.setattr(interop, "_context_device", lambda: device)
    monkeypatch.setattr(interop, "_current_context_handle", lambda: context)
    monkeypatch.setattr(streams, "pointer_device", lambda address: device)
    monkeypatch.setattr(streams, "stream_context", lambda handle: context)
    monkeypatch.setattr(streams, "capturing", lambda stream: False)


# --- radix keys -------------------------------------------------------------------------

def ordered_bits(keys):
    """The pattern RadixDigitOffsets documents, in numpy: unsigned as is, signed with the
    sign bit flipped, floats with negatives' bits flipped and positives' sign bit set
    (-0.0 as +0.0, NaN as all ones)."""
    width = 8 * keys.itemsize
    bits = keys.view(f"u{keys.itemsize}").astype(np.uint64)
    sign = np.uint64(1 << (width - 1))
    if keys.dtype.kind == "i":
        return bits ^ sign
    if keys.dtype.kind == "f":
        bits = np.where(bits == sign, np.uint64(0), bits)
        bits = np.where(bits & sign, ~bits & np.uint64((1 << width) - 1), bits | sign)
        return np.where(np.isnan(keys), np.uint64((1 << width) - 1), bits)
    return bits


def digits(keys, shift, bits, descending=False):
    """The digit RadixDigitOffsets orders by, in numpy: ``bits`` bits from ``shift`` of the
    order-preserving pattern, flipped for a descending order (bits past the width are 0)."""
    pattern = ordered_bits(keys)
    if descending:
        pattern = ~pattern & np.uint64((1 << (8 * keys.itemsize)) - 1)
    return (pattern >> np.uint64(shift)) & np.uint64((1 << bits) - 1)


def digit_offsets(keys, shift, bits, descending=False):
    """What RadixDigitOffsets returns, in numpy: ``(dest, digit_start)``, each key's place
    in the stable order by its digit and where each of the 2**bits digits starts."""
    digit = digits(keys, shift, bits, descending)
    dest = np.empty(keys.size, np.int64)
    dest[np.argsort(digit, kind="stable")] = np.arange(keys.size)
    counts = np.bincount(digit.astype(np.int64), minlength=1 << bits)
    return dest, np.concatenate([[0], np.cumsum(counts)[:-1]])


def run_length_reference(x):
    """What RunLengthEncode returns, in numpy: ``(values, counts)`` of x's runs of equal
    consecutive elements (compared with ``!=``: every NaN a run of its own)."""
    heads = np.ones(x.size, bool)
    heads[1:] = x[1:] != x[:-1]
    starts = np.flatnonzero(heads)
    return x[starts], np.diff(np.append(starts, x.size))


# --- compile errors -----------------------------------------------------------------------

def marked_source_line(message: str) -> str:
    """The emitted-source line a ScanCompileError marks with '>' (its text after the '|'),
    whatever the width of the line numbers."""
    marked = [line for line in message.splitlines() if re.match(r">\s*\d+ \| ", line)]
    assert len(marked) == 1, f"one line marked with '>' expected in:\n{message}"
    return marked[0].split(" | ", 1)[1]


# --- README blocks ------------------------------------------------------------------------

#: What a user reads: the README (first: its first python block is the quick start), the
#: guide's pages and the algorithms page.
USER_PAGES = (Path(__file__).resolve().parents[2] / "README.md",
              *sorted((Path(__file__).resolve().parents[2] / "docs" / "guide").glob("*.md")),
              Path(__file__).resolve().parents[2] / "docs" / "algorithms.md")


def docs_python_blocks():
    """Every python block of USER_PAGES, in order."""
    return [block for page in USER_PAGES
            for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def run_docs_block(marker, what):
    """Run, as written, the first python block of the docs containing ``marker``; return its
    namespace."""
    blocks = [b for b in docs_python_blocks() if marker in b]
    assert blocks, f"the docs have no {what} block"
    namespace = {}
    exec(compile(blocks[0], f"docs {what}", "exec"), namespace)
    return namespace


# --- reference ---------------------------------------------------------------------------
#
# Written here, never taken from the library: scangen.reference_scan and the numpy twins in
# scangen/ops.py and scangen/bench.py would pass a bug they share with the kernels.

def left_fold(x, combine):
    """The definition of an inclusive scan: y[0] = x[0], y[i] = combine(y[i-1], x[i]), one
    element at a time in plain Python (slow: for checking the faster folds below)."""
    x = np.asarray(x)
    out = x.copy()
    for i in range(1, x.size):
        out[i:i + 1] = combine(out[i - 1:i], x[i:i + 1])
    return out


def reference_fold(x, combine):
    """``left_fold(x, combine)`` for any associative ``combine(a, b)`` (numpy, elementwise
    on equal shapes, ``a`` the earlier operand), in about 2*sqrt(n) numpy calls: a left fold
    inside chunks of about sqrt(n) elements (all chunks at once), then each chunk's prefix,
    itself a left fold of the chunk totals, combined on the left of the chunk. A numpy ufunc
    folds with its own ``accumulate``, which is a left fold."""
    x = np.asarray(x)
    if isinstance(combine, np.ufunc):
        with np.errstate(over="ignore", invalid="ignore"):
            return combine.accumulate(x, dtype=x.dtype) if x.size else x.copy()
    n = x.size
    if n < 64:
        return left_fold(x, combine)
    width = math.isqrt(n)
    rows = n // width
    with np.errstate(over="ignore", invalid="ignore"):
        columns = x[: rows * width].reshape(rows, width).T.copy()  # columns[j]: j-th of each
        for j in range(1, width):
            columns[j] = combine(columns[j - 1], columns[j])
        chunks = columns.T.copy()
        for r in range(1, rows):
            carry = np.broadcast_to(chunks[r - 1, -1:], chunks[r].shape)
            chunks[r] = combine(carry, chunks[r])
        out = np.empty_like(x)
        out[: rows * width] = chunks.ravel()
        for i in range(rows * width, n):
            out[i:i + 1] = combine(out[i - 1:i], x[i:i + 1])
    return out


def _bit_and_identity(dtype):
    return np.array(-1 if dtype.kind == "i" else np.iinfo(dtype).max, dtype)


def _extreme(dtype, high):
    if kind(dtype) == "f":
        return np.array(np.inf if high else -np.inf, dtype)
    info = np.iinfo(dtype)
    return np.array(info.max if high else info.min, dtype)


def _last_nonzero_twin(a, b):
    return np.where(b != 0, b, a)


def _affine_then_twin(a, b):
    """Maps x -> m*x + c (mod 2^32) packed m << 32 | c: a first, then b, i.e. x -> mb*(ma*x
    + ca) + cb."""
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    low = np.uint64(0xFFFFFFFF)
    ma, ca = a >> np.uint64(32), a & low
    mb, cb = b >> np.uint64(32), b & low
    return (((ma * mb) & low) << np.uint64(32)) | ((mb * ca + cb) & low)


def _affine_pair_twin(a, b):
    """(m, c) float64 maps: a first, then b."""
    out = np.empty(np.broadcast(a, b).shape, a.dtype)
    out["m"] = a["m"] * b["m"]
    out["c"] = b["m"] * a["c"] + b["c"]
    return out


#: The numpy twin of each operator the tests scan with, by the operator's name, and its
#: identity for a dtype. (Operators written in the tests carry their own reference=.)
TWINS = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
         "bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor,
         "last_nonzero": _last_nonzero_twin, "affine_then": _affine_then_twin,
         "affine_f64x2": _affine_pair_twin, "table_pick": _last_nonzero_twin}
TWIN_IDENTITIES = {"add": lambda d: np.array(0, d), "mul": lambda d: np.array(1, d),
                   "min": lambda d: _extreme(d, True), "max": lambda d: _extreme(d, False),
                   "bit_and": _bit_and_identity, "bit_or": lambda d: np.array(0, d),
                   "bit_xor": lambda d: np.array(0, d), "last_nonzero": lambda d: np.array(0, d),
                   "affine_then": lambda d: np.array(1 << 32, d),
                   "affine_f64x2": lambda d: np.array((1.0, 0.0), d),
                   "table_pick": lambda d: np.array(0, d)}


def _library_code(function) -> bool:
    return (getattr(function, "__module__", None) or "").split(".")[0] == "scangen"


def twin(op):
    """The numpy function the tests combine with for ``op`` (an Operator or a built-in's
    name): the operator's own ``reference=`` where the tests wrote it, else the twin
    written here for the library's operator of that name."""
    op = operator(op) if isinstance(op, str) else op
    written_here = op.reference is not None and not isinstance(op.reference, np.ufunc) \
        and not _library_code(op.reference)
    if written_here:
        return op.reference
    if op.name in TWINS:
        return TWINS[op.name]
    if op.reference is None or _library_code(op.reference):
        raise ValueError(f"operator {op.name!r} has no numpy twin written in the tests; add "
                         "one to tests.support.TWINS")
    return op.reference


def twin_identity(op, dtype):
    """``op``'s identity as a 0-d array of ``dtype`` (written here for the library's
    operators)."""
    op = operator(op) if isinstance(op, str) else op
    dtype = np.dtype(dtype)
    if op.name in TWIN_IDENTITIES:
        return TWIN_IDENTITIES[op.name](dtype)
    value = op.identity_for(element_type(dtype))
    return np.array(value, dtype)


def reference(x, op, mode="inclusive"):
    """The tests' reference scan: x folded from the left with ``twin(op)``, in operand
    order; exclusive is the identity, then the inclusive scan shifted by one."""
    if mode not in ("inclusive", "exclusive"):
        raise ValueError(f"unknown mode {mode!r}")
    x = np.asarray(x)
    inclusive = reference_fold(x, twin(op))
    if mode == "inclusive" or not x.size:
        return inclusive
    return np.concatenate([twin_identity(op, x.dtype).reshape(1), inclusive[:-1]])


def expected(x, op, mode):
    """Reference scan with the operator itself; float add/mul accumulate in long double to
    keep the reference's own rounding out of the comparison."""
    if kind(x.dtype) in "fc" and op.name in ("add", "mul"):
        # through the 64-bit types, exact for every float type (ml_dtypes' have no
        # longdouble cast)
        exact, wide = (np.complex128, np.clongdouble) if kind(x.dtype) == "c" else \
            (np.float64, np.longdouble)
        inclusive = twin(op).accumulate(x.astype(exact).astype(wide))
        if mode == "inclusive":
            return inclusive
        start = twin_identity(op, exact).astype(wide).reshape(1)
        return np.concatenate([start, inclusive[:-1]])[: x.size]
    return reference(x, op, mode)


def flipped(op):
    """op with its operands swapped: scanning a reversed array with it is a suffix scan."""
    combine = twin(op)
    return Operator("b", op.identity, name=f"flipped_{op.name}",
                    reference=lambda a, b: combine(b, a))


def scan_reference(x, op, mode="inclusive", *, reverse=False, initial=None):
    """What Scan promises for reverse= and initial=, from the reference fold alone: a
    suffix scan is a scan of the reversed array with the operands swapped; the initial value
    is one more element before the first (in scan order)."""
    x = np.asarray(x)
    if reverse:
        return scan_reference(x[::-1], flipped(op), mode, initial=initial)[::-1]
    if initial is None:
        return expected(x, op, mode)
    full = reference(np.concatenate([np.array([initial], x.dtype), x]), op)
    return full[1:] if mode == "inclusive" else full[:-1]


def segmented_reference(x, heads, op, mode, *, reverse=False, initial=None):
    """Scan each segment on its own (a segment starts at 0 and wherever heads is nonzero)
    as scan_reference does: with the operator itself, in order, from its last element with
    ``reverse``, and starting from ``initial`` where one is given."""
    x = np.asarray(x)
    out = np.empty_like(x)
    starts = sorted({0, *np.flatnonzero(heads).tolist()}) if x.size else []
    for first, end in zip(starts, starts[1:] + [x.size]):
        out[first:end] = scan_reference(x[first:end], op, mode, reverse=reverse,
                                        initial=initial)
    return out


def axis_reference(x, op, mode, axis, *, reverse=False, initial=None):
    """Scan every line of the N-D ``x`` along ``axis`` on its own, as scan_reference scans
    a 1-D array (the operator itself, in order)."""
    x = np.asarray(x)
    lines = np.moveaxis(x, axis, -1)
    out = np.empty_like(lines)
    for index in np.ndindex(lines.shape[:-1]):
        out[index] = scan_reference(lines[index], op, mode, reverse=reverse, initial=initial)
    return np.moveaxis(out, -1, axis)


def random_offsets(rng, n, dtype):
    """CSR offsets of n elements (SegmentedScan's offsets=), one of each shape: one segment,
    a segment per element, random cuts with empty segments among them (a repeated offset),
    and the same with empty segments first (repeated zeros) and last (repeated n)."""
    cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(1, n + 3))))
    shapes = [[0, n], np.arange(n + 1), np.concatenate([[0], cuts, [n]]),
              np.concatenate([[0, 0, 0], cuts, [n, n]])]
    return [np.asarray(offsets, dtype) for offsets in shapes]


def broken_offsets(rng, offsets, n):
    """Copies of valid CSR ``offsets`` of n elements, each breaking one rule at a random
    place, with what SegmentedScan's message says of it: the first not 0, the last not n
    (short of it, past it), one greater than the next, one below 0, one past n."""
    offsets = np.asarray(offsets)
    out = []

    def broken(where, value, message):
        copy = offsets.copy()
        copy[where] = value
        out.append((copy, message))

    broken(0, 1 if n else -1, "must run from 0 to len")
    broken(-1, n + 1, "must run from 0 to len")
    if n:
        broken(-1, n - 1, "must run from 0 to len")
    if offsets.size > 2:
        k = int(rng.integers(1, offsets.size - 1))
        high = int(offsets[k + 1]) + int(rng.integers(1, 4))
        broken(k, high, rf"offsets\[{k}\] = {high} > offsets\[{k + 1}\]")
        broken(k, -5, "non-decreasing")
        broken(k, n + 7, "non-decreasing")
    return out


def offset_heads(offsets, n):
    """The segment heads CSR offsets mean, for segmented_reference: every element that is
    some offset."""
    return np.isin(np.arange(n), offsets).astype(np.uint8)


# --- comparing float results ----------------------------------------------------------------

#: Allowed error of a float scan, in units of eps times the running sum of |x| (add) or
#: of |result| (mul: the running product of |x|). Constant, not growing with n: a dropped
#: element must stay visible at any size. Inputs that sum exactly compare exactly instead.
FLOAT_ERROR_EPS = 64
#: Operators whose every result is one of the operands (or a bit pattern of them): exact.
SELECTING = frozenset({"min", "max", "last_nonzero", "table_pick", "bit_and", "bit_or",
                       "bit_xor"})


def _granule_exponent(values):
    """The exponent of each nonzero float64 value's lowest set mantissa bit."""
    mantissa, exponent = np.frexp(values)
    bits = np.abs(mantissa * 2.0 ** 53).astype(np.int64)
    lowest = bits & -bits
    return exponent - 53 + (np.frexp(lowest.astype(np.float64))[1] - 1)


def _representable(want, dtype):
    """Whether every (real) want value is exactly a value of dtype."""
    as64 = want.astype(np.float64)
    same = as64.astype(want.dtype) == want
    with np.errstate(over="ignore", invalid="ignore"):
        same &= as64.astype(dtype).astype(np.float64) == as64
    return bool(np.all(same | np.isnan(as64)))


def sums_exactly(want, dtype) -> bool:
    """Whether any order of adding gives ``want`` (a real scan, inclusive or exclusive, of
    some rows, any initial value) exactly: every value is a multiple of the smallest
    granule g among them and every difference of two fits dtype's mantissa in units of g.
    Every partial result of any order of a scan is such a difference (a sum of consecutive
    elements), so none of them rounds."""
    want = np.asarray(want)
    if not want.size or not _representable(want, dtype):
        return False
    values = want.astype(np.float64)
    if not np.all(np.isfinite(values)):
        return False
    nonzero = values[values != 0]
    if not nonzero.size:
        return True
    granule = float(np.min(_granule_exponent(nonzero)))
    span = max(values.max(), 0.0) - min(values.min(), 0.0)
    digits = element_type(dtype).finfo().nmant + 1
    return span < 2.0 ** (granule + digits - 1)


def multiplies_exactly(want, dtype) -> bool:
    """Whether any order of multiplying gives ``want`` (a real scan) exactly: every value
    is one of dtype, none zero, and their ratios stay normal numbers. The partial result of
    any order is a product of consecutive elements, the ratio of two prefixes: its mantissa
    is no wider than theirs, so it does not round."""
    want = np.asarray(want)
    if not want.size or not _representable(want, dtype):
        return False
    magnitude = np.abs(want.astype(np.float64))
    if not np.all(np.isfinite(magnitude)) or not np.all(magnitude > 0):
        return False
    info = element_type(dtype).finfo()
    ratio = magnitude.max() / magnitude.min()
    return ratio < float(info.max) and 1 / ratio > float(info.tiny)


def _running_variation(want, reverse):
    """sum over j <= i (j >= i with reverse) of |want[j] - want[j-1]|, want[-1] = 0: the
    running sum of |x| of an add scan, its initial value included."""
    values = want[::-1] if reverse else want
    steps = np.abs(np.diff(values, prepend=np.zeros(1, values.dtype)))
    total = np.cumsum(steps)
    return total[::-1] if reverse else total


def _check_close(got, want, bound, what):
    error = np.abs(got - want)
    bad = ~(error <= bound)
    bad &= ~(np.isnan(got) & np.isnan(want))
    bad &= ~(got == want)  # equal infinities: their difference is NaN
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements off, the first at {first}: got "
            f"{got[first]!r}, want {want[first]!r}, allowed error {bound[first]!r}")


def assert_scan_equal(got, want, dtype, n, *, op=None, reverse=False):
    """A scan result against the reference. Integers, structs and operators that select an
    operand compare exactly; so do float scans whose inputs sum (or multiply) exactly in any
    order (``random_input`` builds those). Other float results may differ by
    FLOAT_ERROR_EPS * eps times the running sum of |x| (add: from the element where the
    scan starts, the end with ``reverse``) or times |result| (mul), never a bound that grows
    with n alone. ``op`` (an Operator or a name) says which; without it an add is assumed
    where the result is exact and the bound is taken in both directions. ``n`` is
    informational (rows of a batch may pass one row's length)."""
    dtype = np.dtype(dtype)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape}, want {want.shape}"
    name = None if op is None else (op if isinstance(op, str) else op.name)
    if kind(dtype) not in "fc" or name in SELECTING:
        np.testing.assert_array_equal(got, want)
        return
    complex_ = kind(dtype) == "c"
    exact, wide = (np.complex128, np.clongdouble) if complex_ else (np.float64, np.longdouble)
    # through the 64-bit types, exact for every float type (ml_dtypes' included)
    got = got.astype(exact).astype(wide)
    want = want.astype(wide)
    parts = (want.real, want.imag) if complex_ else (want,)
    part_dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64) if complex_ \
        else dtype
    if name in (None, "add") and all(sums_exactly(p, part_dtype) for p in parts):
        np.testing.assert_array_equal(got, want, err_msg="inputs that sum exactly")
        return
    if name == "mul" and complex_ and all(np.isin(p, (-1, 0, 1)).all() for p in parts):
        # products of powers of i (random_input's) are powers of i in any order
        np.testing.assert_array_equal(got, want, err_msg="powers of i")
        return
    if name == "mul" and not complex_ and multiplies_exactly(want, dtype):
        np.testing.assert_array_equal(got, want, err_msg="inputs that multiply exactly")
        return
    eps = float(element_type(dtype).finfo().eps) if not complex_ else \
        float(np.finfo(part_dtype).eps)
    if name == "mul":
        scale = np.abs(want)
    elif name == "add":
        scale = _running_variation(want, reverse)
    else:  # direction unknown: the larger of the two running sums
        scale = np.maximum(_running_variation(want, False), _running_variation(want, True))
    _check_close(got, want, FLOAT_ERROR_EPS * eps * scale,
                 f"{name or 'float'} scan of {dtype} (n={n})")


__all__ = ["AFFINE", "AFFINE_MAPS", "AFFINE_PAIR", "AFFINE_PAIRS", "ARGMAX",
           "allowed_skips", "assert_guard_untouched", "assert_scan_equal", "axis_reference",
           "BFLOAT16",
           "boundary_sizes", "COMPACTION", "digits", "DTYPES", "exact_affine_pairs",
           "expected", "FakeContext", "FakeDeviceArray", "flipped", "GUARD", "guarded_output",
           "kind", "left_fold", "MODES", "multiplies_exactly", "needs_bfloat16", "needs_nvcc",
           "operator", "OPERATORS", "optional_nvcc", "ordered_bits", "PARTITION", "reference",
           "reference_fold", "require_gpus", "require_module", "require_nvcc", "skip_or_fail",
           "sums_exactly", "twin", "twin_identity", "TWINS",


           "assert_scan_equal", "BFLOAT16", "boundary_sizes", "COMPACTION", "digits", "DTYPES",
           "dtype_label", "ELEMENT_DTYPES", "exact_affine_pairs", "expected",
           "record_launches", "RecordedLaunch",
           "FakeDeviceArray", "flipped", "integers_as", "keep_predicate", "kind", "MIXED",
           "MIXED_COMBINE", "MODES",
           "needs_bfloat16", "operator", "OPERATORS", "ordered_bits", "PARTITION",
           "offset_heads", "poison_values", "poisoned", "precompile", "random_chunks",
           "random_input", "random_offsets",
           "docs_python_blocks", "run_docs_block", "RUNNING_STATS", "SATURATING_ADD",
           "broken_offsets", "EXAMPLES", "load_example", "USER_PAGES",
           "scan_reference", "segmented_reference", "simulate_device", "small_values",
           "STATS", "sum_operator", "TABLE_LOOKUP", "type_operator_pairs", "valid",
           "VALUE_INDEX", "value_index_input", "SINGLE_PASS", "TOTAL_STRATEGIES",
           "zeros_and_others"]


def check_scan(gpuarray, rng, scan, n, op_name, in_place=False):
    """scan of n random values for op_name (into poison, or in place) against expected()."""
    dtype = scan.dtype
    x = random_input(rng, dtype, op_name, n)
    if in_place:
        inout = guarded_output(gpuarray, rng, n, dtype)
        if n:
            inout.out.set(x)
        scan(inout.out, out=inout.out)
        got = assert_guard_untouched(inout)
    else:
        out = guarded_output(gpuarray, rng, n, dtype)
        scan(gpuarray.to_gpu(x), out=out.out)
        got = assert_guard_untouched(out)
    assert_scan_equal(got, expected(x, operator(op_name), scan.mode), dtype, n, op=op_name)



def check_single_pass(gpuarray, rng, tiny, big, op_name):
    """Single-pass scans: each of ``tiny`` (64-element tiles) around its tile boundaries and
    past thousands of tiles, in place at odd n; then ``big`` past 2^24, and call after call
    of several sizes on one stream's tile state through an epoch wrap-around."""
    from scangen.strategies.tile_state import EPOCH_LIMIT

    for scan in tiny:
        for n in sorted({1, 63, 64, 65, 64 * 33 + 1, int(rng.integers(1, 1 << 16)),
                         (1 << 21) + 5}):
            check_scan(gpuarray, rng, scan, n, op_name, in_place=n % 2 == 1)
    check_scan(gpuarray, rng, big, (1 << 24) + 3, op_name)
    (scratch,) = big.kernel._runtime._scratch.values()
    scratch.epoch = EPOCH_LIMIT - 2
    for n in (1_000_003, (1 << 24) + 3, 5_000, 1_000_003):
        check_scan(gpuarray, rng, big, n, op_name)
    assert 1 <= scratch.epoch < 10

# --- the examples ---------------------------------------------------------------------------

#: examples/ of the checkout.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name):
    """examples/NAME.py imported as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(f"scangen_example_{name}",
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
