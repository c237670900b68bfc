"""Compile a representative matrix of rendered modules with nvcc (no GPU needed).

Skips when nvcc is not on PATH. Each module is compiled exactly as rendered, one nvcc
process each, all on a pool as wide as the machine (tests.support.nvcc); the whole matrix
(~400 modules) takes under two minutes on two cores.

Modules are grouped into named batches for reporting. Errors and warnings are reported per
module, with the user piece (input_expr, operator, ...) a line falls in; every entry point
must be in the cubin's symbol table, unmangled; ptxas's per-kernel static shared memory is
checked against the 48 KiB static limit and, with the dynamic shared memory its launches
pass, against what the spec claims (spec.shared_bytes).
A typo in user code must make ScanKernel.check_compile() name the piece it is in.
"""
import itertools
import re

import numpy as np
import pytest

from scangen import (ALGORITHMS, LAST_NONZERO, MODES, STRATEGIES, Operator, Scan,
                     ScanCompileError, ScanKernel, SegmentedScan, Select, Tuning, make_spec)
from scangen.kernel import ModulePart, ScanModule
from scangen.families import FAMILIES
from scangen.render import render
from scangen.spec import MAX_STATIC_SHARED_BYTES
from scangen.strategies.tile_state import TileState
from scangen.types import element_type
from tests.support import (AFFINE, AFFINE_MAPS, AFFINE_PAIR, AFFINE_PAIRS, BFLOAT16,
                           COMPACTION, DTYPES, OPERATORS, PARTITION, RUN_LENGTHS, SATURATING_ADD,
                           SINGLE_PASS, TABLE_LOOKUP, TOTAL_STRATEGIES, WIDE_STRUCTS, field_sums,
                           type_operator_pairs, valid)
from tests.support.nvcc import Entry, compiling, needs_nvcc, results

pytestmark = needs_nvcc

#: Every strategy (these and any other registered); each renders different kernels (auto: one
#: section, decoupled look-back and reduce_then_scan together; chained and decoupled_lookback
#: differ in the protocol).
assert {"auto", "hierarchical", "reduce_then_scan", "chained", "decoupled_lookback"} <= \
    set(STRATEGIES)


# --- operators only this file uses ----------------------------------------------------------

GCD = Operator(
    "gcd_of(a, b)", 0, name="gcd",
    preamble="""
static __device__ int gcd_of(int a, int b)
{
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b != 0) {
        const int t = a % b;
        a = b;
        b = t;
    }
    return a;
}""")

TYPED_MAX = Operator(lambda t: "(a < b ? b : a)", lambda t: t.lowest(), name="typed_max")


# --- ScanKernel hooks -----------------------------------------------------------------------

#: The same, each map composed with everything before it, and the whole composition.
AFFINE_TOTAL = dict(arguments="const unsigned int *m, const unsigned int *c, scan_t *out, "
                              "scan_t *total",
                    input_expr="((scan_t)m[i] << 32) | (scan_t)c[i]",
                    output_statement="out[i] = prev_item; if (i == n - 1) *total = last_item;")
#: A hooks preamble: a device helper the input expression calls.
CLAMPED = dict(arguments="const float *x, float lo, float hi, float *out",
               input_expr="clamp_to(x[i], lo, hi)", output_statement="out[i] = item;",
               preamble="static __device__ __forceinline__ float clamp_to(float v, float lo, "
                        "float hi)\n{\n    return v < lo ? lo : (v > hi ? hi : v);\n}")
#: A hooks preamble with a nested aggregate initializer ("{{" is C here, not template).
TABLE_PREAMBLE = dict(arguments="const int *x, int *out",
                      input_expr="kFlip[x[i] & 1][0]", output_statement="out[i] = item;",
                      preamble="static __device__ const int kFlip[2][2] = {{0, 1}, {1, 0}};")
#: Segmented: the scan restarts where heads[i] != 0.
SEGMENTED = dict(arguments="const scan_t *x, const unsigned char *heads, scan_t *out",
                 input_expr="x[i]", is_segment_start_expr="heads[i] != 0",
                 output_statement="out[i] = prev_item;")


# --- the matrix -----------------------------------------------------------------------------

def scan(dtype, op="add", mode="inclusive", **kwargs):
    """A Scan's module, labelled."""
    s = Scan(dtype, op, mode=mode, **kwargs)
    spec = s.spec
    name = op if isinstance(op, str) else op.name
    label = (f"Scan {dtype} {name} {mode} {spec.algorithm} {spec.section_size}"
             f"x{spec.items_per_thread} {spec.strategy}")
    return Entry(label, s.kernel.scan_module, mode)


def scan_kernel(what, dtype, op, hooks, **kwargs):
    k = ScanKernel(dtype, op, **hooks, **kwargs)
    spec = k.spec
    label = (f"ScanKernel {what} {dtype} {spec.operator.name} {spec.algorithm} "
             f"{spec.section_size}x{spec.items_per_thread} {spec.strategy}")
    return Entry(label, k.scan_module)


def _shapes(algorithm, dtype):
    """Sections worth compiling: the smallest (2 and 4 elements), a block of one thread, of
    two, half a warp, one warp, two warps and 1024 threads, for the algorithm's own coarsening
    and (where it is a parameter) several others."""
    items_choices = [None, 1, 2, 8, 32] if ALGORITHMS[algorithm].coarsening_is_parameter \
        else [None]
    shapes = set()
    for items, exponent in itertools.product(items_choices, range(1, 17)):
        try:
            spec = make_spec(dtype, "add", algorithm=algorithm, section_size=2**exponent,
                             items_per_thread=items)
        except ValueError:
            continue
        if spec.block_size in (1, 2, 16, 32, 64, 1024) or spec.section_size in (2, 4):
            shapes.add((spec.section_size, spec.items_per_thread))
    return sorted(shapes)


def _largest(algorithm, dtype):
    """The largest section make_spec accepts (most items per thread, 1024 threads)."""
    items = [ALGORITHMS[algorithm].default_items_per_thread]
    if ALGORITHMS[algorithm].coarsening_is_parameter:
        items = [32, 16, 8, 4, 2, 1]
    for k in items:
        try:
            return make_spec(dtype, "add", algorithm=algorithm, section_size=1024 * k,
                             items_per_thread=k if len(items) > 1 else None)
        except ValueError:
            continue
    raise AssertionError(f"no 1024-thread section for {algorithm} {dtype}")


def batch_algorithms(dtype):
    """Every algorithm with every strategy; the modes take turns."""
    modes = itertools.cycle(MODES)
    return [scan(dtype, "add", next(modes), algorithm=a, strategy=s)
            for a, s in itertools.product(ALGORITHMS, STRATEGIES)]


def batch_sections():
    dtypes = itertools.cycle(["uint16", "float32", "int64", "int8", "float64"])
    strategies = itertools.cycle(STRATEGIES)
    modes = itertools.cycle(MODES)
    entries = []
    for algorithm in ALGORITHMS:
        for section, items in _shapes(algorithm, "float64"):
            entries.append(scan(next(dtypes), "max", next(modes), algorithm=algorithm,
                                section_size=section, items_per_thread=items,
                                strategy=next(strategies)))
        # the largest sections: a 1-byte type (many items) and an 8-byte one (most shared)
        for dtype in ("int8", "float64"):
            spec = _largest(algorithm, dtype)
            entries.append(scan(dtype, "min", next(modes), algorithm=algorithm,
                                section_size=spec.section_size,
                                items_per_thread=spec.items_per_thread,
                                strategy=next(strategies)))
    return entries


def batch_types_operators():
    """Every (type, operator) pair, the strategies and modes taking turns."""
    strategies = itertools.cycle(STRATEGIES)
    modes = itertools.cycle(MODES)
    return [scan(d, OPERATORS[o], next(modes), algorithm="warp_shuffle",
                 strategy=next(strategies))
            for d, o in type_operator_pairs()]


def batch_types_strategies():
    """Every type with every strategy: 1- and 2-byte values pack into the tile status word,
    4-byte ones too, 8-byte ones take the split status (a flag word and value slots)."""
    ops = itertools.cycle(["max", "min", "add", "mul", "last_nonzero"])
    algorithms = itertools.cycle(ALGORITHMS)
    modes = itertools.cycle(MODES)
    entries = []
    for dtype, strategy in itertools.product(DTYPES, STRATEGIES):
        op = next(ops)
        while not valid(dtype, OPERATORS[op]):  # complex values take add and mul only
            op = next(ops)
        entries.append(scan(dtype, OPERATORS[op], next(modes), strategy=strategy,
                            algorithm=next(algorithms)))
    return entries


def batch_user_operators():
    entries = []
    strategies = itertools.cycle(STRATEGIES)
    for algorithm, mode in itertools.product(ALGORITHMS, MODES):
        entries.append(scan("int32", LAST_NONZERO, mode, algorithm=algorithm,
                            strategy="hierarchical"))
        for dtype, op in [("uint8", SATURATING_ADD), ("uint64", AFFINE), ("int32", GCD)]:
            entries.append(scan(dtype, op, mode, algorithm=algorithm, strategy=next(strategies)))
    for strategy in STRATEGIES:
        entries.append(scan("int32", TABLE_LOOKUP, "inclusive", strategy=strategy))
    for dtype in ("int16", "float32", "uint64"):
        entries.append(scan(dtype, TYPED_MAX, "exclusive", strategy=next(strategies)))
    # identities at the edges of the types: infinities spelled through bits, INT64_MIN,
    # UINT64_MAX, all-ones
    for algorithm in ALGORITHMS:
        for dtype, op in [("float32", "max"), ("float64", "min"), ("int64", "max"),
                          ("uint64", "min"), ("int64", "bit_and")]:
            entries.append(scan(dtype, op, "exclusive", algorithm=algorithm,
                                strategy=next(strategies)))
    return entries


def batch_scan_kernels():
    """ScanKernel modules: each example with every strategy that accepts it."""
    algorithms = itertools.cycle(ALGORITHMS)
    strategies = itertools.cycle(STRATEGIES)
    entries = []
    for strategy in STRATEGIES:
        entries.append(scan_kernel("compaction", "int64", "add", COMPACTION, strategy=strategy,
                                   algorithm=next(algorithms)))
        entries.append(scan_kernel("affine maps", "uint64", AFFINE, AFFINE_MAPS,
                                   strategy=strategy, algorithm=next(algorithms)))
        entries.append(scan_kernel("clamped sum", "float32", "add", CLAMPED, strategy=strategy,
                                   algorithm=next(algorithms)))
    for dtype, op in [("int32", "add"), ("int32", TABLE_LOOKUP)]:
        entries.append(scan_kernel("table preamble", dtype, op, TABLE_PREAMBLE,
                                   strategy=next(strategies), algorithm=next(algorithms)))
    for strategy in TOTAL_STRATEGIES:
        entries.append(scan_kernel("partition", "int64", "add", PARTITION, strategy=strategy,
                                   algorithm=next(algorithms)))
        entries.append(scan_kernel("partition", "int32", "add", PARTITION, strategy=strategy,
                                   algorithm=next(algorithms)))
        entries.append(scan_kernel("affine total", "uint64", AFFINE, AFFINE_TOTAL,
                                   strategy=strategy, algorithm=next(algorithms)))
    # counting (counts=True): every body that counts, the single pass with no value left
    for strategy in STRATEGIES:
        entries.append(scan_kernel("counting compaction", "int64", "add",
                                   dict(COMPACTION, counts=True), strategy=strategy))
    entries.append(scan_kernel("counting partition", "int32", "add",
                               dict(PARTITION, counts=True), strategy="reduce_then_scan"))
    # counting that tracks last_counted (run lengths at the next head), every strategy
    for strategy in STRATEGIES:
        entries.append(scan_kernel("run lengths", "int64", "add", RUN_LENGTHS,
                                   strategy=strategy))
    # the defaults, tiny sections, and a last_item kernel with a sub-warp block
    entries.append(scan_kernel("compaction", "int64", "add", COMPACTION))
    entries.append(scan_kernel("compaction", "int32", "add", COMPACTION, algorithm="coarsened",
                               section_size=2, items_per_thread=1, strategy="chained"))
    entries.append(scan_kernel("compaction", "int64", "add", COMPACTION,
                               algorithm="warp_shuffle", section_size=4, items_per_thread=2))
    entries.append(scan_kernel("partition", "int64", "add", PARTITION, algorithm="brent_kung",
                               section_size=4, strategy="hierarchical"))
    # segmented: (value, head) pairs of 2, 4, 8 and 16 bytes (packed, then split status)
    for dtype, strategy in [("int8", "decoupled_lookback"), ("int16", "auto"),
                            ("float32", "chained"), ("uint64", "reduce_then_scan"),
                            ("float64", "decoupled_lookback"), ("int32", "hierarchical")]:
        entries.append(scan_kernel("segmented", dtype, LAST_NONZERO, SEGMENTED,
                                   strategy=strategy, algorithm=next(algorithms)))
    entries.append(scan_kernel("segmented affine", "uint64", AFFINE,
                               {**SEGMENTED, "output_statement": "out[i] = item;"},
                               strategy="auto"))
    # SegmentedScan's one-byte flags and its keys, read a run at a time (4, 8 and 16 items a
    # lane; keys of 1 to 8 bytes), both single-pass kernels (persistent and not)
    for items, mode, keys in [(4, "inclusive", "int8"), (8, "exclusive", "int32"),
                              (16, "inclusive", "int64"), (8, "inclusive", "uint16")]:
        seg = SegmentedScan("float32", "max", mode=mode, items_per_thread=items,
                            section_size=256 * items, strategy="decoupled_lookback")
        entries.append(Entry(f"SegmentedScan flags float32 max {mode} 256x{items}",
                             seg.kernel("flags").scan_module))
        entries.append(Entry(f"SegmentedScan {keys} keys float32 max {mode} 256x{items}",
                             seg.kernel("keys", keys).scan_module))
    return entries


def batch_columns():
    """Scans along an axis other than the last (the columns kernel): every element size
    with its tuned tile and a small one, non-commutative and struct operators (packed and
    split tile status), reverse, initial and a result_dtype conversion; and a ScanKernel
    whose output statement reads ``step`` and ``line``, in each kernel of lines and a
    counting one."""
    cases = [(d, "add", {}) for d in ("int8", "float16", "float32", "float64", "complex128")]
    cases += [("uint64", AFFINE, {"reverse": True}), ("int32", LAST_NONZERO, {"initial": 3}),
              ("float32", "max", {"section_size": 64}),
              ("float16", "add", {"result_dtype": "float32", "reverse": True}),
              (AFFINE_PAIR, AFFINE_PAIRS, {"mode": "exclusive"}),
              (WIDE_STRUCTS[24], field_sums(WIDE_STRUCTS[24]), {})]
    entries = []
    for dtype, op, options in cases:
        columns = Scan(dtype, op, **options).columns_kernel
        name = op if isinstance(op, str) else op.name
        entries.append(Entry(f"Scan along columns {element_type(dtype).name} {name} {options}",
                             columns.scan_module))
    # an output statement that reads each element's step and line, in every kernel of lines
    mean = dict(arguments="const float *x, float *mean", input_expr="x[i]",
                output_statement="mean[i] = item / (float)(step + 1) + line;")
    for reverse in (False, True):
        kernel = ScanKernel("float32", "add", reverse=reverse, **mean)
        for what, variant in (("1-D", kernel), ("rows", kernel.lines.rows_kernel),
                              ("columns", kernel.lines.columns_kernel)):
            entries.append(Entry(f"ScanKernel reading step and line, {what}, "
                                 f"reverse={reverse}",
                                 variant.scan_module))
    counting = ScanKernel("int64", "add", arguments="const float *x, long long *at",
                          input_expr="x[i] > 0",
                          output_statement="at[i] = step - item + line;",
                          counts=True)
    entries.append(Entry("counting ScanKernel reading step", counting.scan_module))
    # a statement that declares names of its own called step and line (its own block)
    own = ScanKernel("float32", "add", arguments="const float *x, float *mean",
                     input_expr="x[i]", output_statement="const float step = 2.0f; "
                     "int line = 1; mean[i] = item * step + line;")
    entries += [Entry("ScanKernel declaring its own step and line", own.scan_module),
                Entry("the same along columns", own.lines.columns_kernel.scan_module)]
    return entries


def batch_radix_histogram():
    """The radix passes (keys only, with values of 1 to 16 bytes and structs, argsort's index
    values, destinations with narrow digits), the places of digits wider than a pass, and
    the histogram kernel."""
    from scangen.primitives.histogram import HistogramModule
    from scangen.primitives.radix import (KEY_DTYPES, DigitPlacesModule, RadixPassesModule,
                                          WideDigitPlacesModule)

    pair = np.dtype([("x", np.float32), ("count", np.int16)], align=True)
    entries = []
    values = itertools.cycle([None, np.dtype("uint8"), np.dtype("float64"),
                              np.dtype("complex128"), pair])
    for key in KEY_DTYPES:
        modules = [RadixPassesModule(key, next(values)),
                   RadixPassesModule(key, np.dtype("int64"), index_values=True),
                   DigitPlacesModule(key, radix_bits=1 + key.itemsize % 8),
                   WideDigitPlacesModule(key), HistogramModule(key)]
        entries += [Entry(f"{m.description} {type(m).__name__}", m) for m in modules]
    return entries


def batch_bfloat16():
    """bfloat16 (where ml_dtypes is installed): its built-ins and a non-commutative operator
    on every strategy, a struct with a bfloat16 field, and conversions to wider floats."""
    strategies = itertools.cycle(STRATEGIES)
    modes = itertools.cycle(MODES)
    entries = [scan(BFLOAT16, op, next(modes), strategy=strategy)
               for op, strategy in itertools.product(["add", "mul", "min", "max", LAST_NONZERO],
                                                     STRATEGIES)]
    pair = np.dtype([("weight", BFLOAT16), ("count", np.int32)], align=True)
    weighted = Operator("scan_t{a.weight + b.weight, a.count + b.count}", (0.0, 0), name="sums")
    entries += [scan(pair, weighted, next(modes), strategy=next(strategies)),
                scan(BFLOAT16, "add", result_dtype=np.float32, strategy=next(strategies)),
                scan(BFLOAT16, "max", result_dtype=np.float64, strategy=next(strategies)),
                scan(np.uint8, "add", result_dtype=BFLOAT16, strategy=next(strategies))]
    return entries


def batch_status_16_byte_words():
    """Both tile-status layouts of values of 5 to 8 bytes (Tuning.status_16_byte_words: one
    16-byte word per tile, the default, or a flag word and value slots) for 64-bit scalars,
    complex64, a 6-byte struct and a float32 segmented scan's (value, head) pair, on both
    single-pass strategies."""
    modes = itertools.cycle(MODES)
    triple = np.dtype([("a", np.int16), ("b", np.int16), ("c", np.int16)])
    sums = Operator("scan_t{(short)(a.a + b.a), (short)(a.b + b.b), (short)(a.c + b.c)}",
                    (0, 0, 0), name="triple_sums")
    entries = []
    for strategy, sixteen in itertools.product(SINGLE_PASS, (True, False)):
        layout = Tuning(status_16_byte_words=sixteen)
        these = [scan(dtype, op, next(modes), strategy=strategy, tuning=layout)
                 for dtype, op in [("int64", LAST_NONZERO), ("uint64", "add"),
                                   ("float64", "max"), ("complex64", "mul"), (triple, sums)]]
        these.append(scan_kernel("segmented", "float32", LAST_NONZERO, SEGMENTED,
                                 strategy=strategy, tuning=layout))
        for entry in these:
            entry.label += " 16-byte status" if sixteen else " split status"
        entries += these
    return entries


def batch_tile_warp_runs():
    """Tuning.tile_warp_runs: the single-pass tiles moved warp by warp, on both single-pass
    strategies, for 1- to 16-byte values, both modes, a reverse scan, a segmented ScanKernel
    and a compaction (its output reads prev_item), in blocks of one warp to 1024 threads."""
    runs = Tuning(tile_warp_runs=True)
    modes = itertools.cycle(MODES)
    entries = []
    for strategy in SINGLE_PASS:
        entries += [scan(dtype, op, next(modes), strategy=strategy, tuning=runs)
                    for dtype, op in [("int8", "max"), ("float32", "add"),
                                      ("int64", LAST_NONZERO), ("complex128", "add")]]
        entries += [scan("float32", "add", "exclusive", strategy=strategy, tuning=runs,
                         algorithm="warp_shuffle", section_size=section, items_per_thread=items)
                    for section, items in [(32, 1), (2048, 64), (8192, 8)]]
        entries.append(scan("uint64", AFFINE, "inclusive", strategy=strategy, tuning=runs,
                            reverse=True))
        entries.append(scan_kernel("segmented", "float32", LAST_NONZERO, SEGMENTED,
                                   strategy=strategy, tuning=runs))
        entries.append(scan_kernel("compaction", "int64", "add", COMPACTION,
                                   strategy=strategy, tuning=runs))
    return entries


def batch_wide_lookback():
    """Tuning.lookback_tiles_per_lane: look-back windows of 2 to 32 tiles per lane for 1- to
    16-byte values (packed and split status), a segmented ScanKernel and a compaction."""
    modes = itertools.cycle(MODES)
    entries = [scan(dtype, op, next(modes), strategy="decoupled_lookback",
                    tuning=Tuning(lookback_tiles_per_lane=width))
               for (dtype, op), width in zip([("int8", "max"), ("float32", "add"),
                                              ("int64", LAST_NONZERO), ("uint64", AFFINE),
                                              ("complex128", "add")], (2, 4, 3, 32, 8))]
    entries.append(scan_kernel("segmented", "float32", LAST_NONZERO, SEGMENTED,
                               strategy="decoupled_lookback",
                               tuning=Tuning(lookback_tiles_per_lane=5)))
    entries.append(scan_kernel("compaction", "int64", "add", COMPACTION,
                               strategy="decoupled_lookback",
                               tuning=Tuning(lookback_tiles_per_lane=4)))
    return entries


def batch_persistent_tiles():
    """The persistent single pass (Tuning.tile_persistent_min_bytes=0), both protocols: 1- to
    16-byte values (packed and split status), both modes, a reverse scan, tiny and 16 KiB
    tiles, a segmented ScanKernel and one with a preamble (user input and output hooks)."""
    always = Tuning(tile_persistent_min_bytes=0)
    entries = []
    for strategy in SINGLE_PASS:
        modes = itertools.cycle(MODES)
        entries += [scan(dtype, op, next(modes), strategy=strategy, tuning=always,
                         section_size=16384 // np.dtype(dtype).itemsize)
                    for dtype, op in [("int8", "max"), ("float32", "add"),
                                      ("int64", LAST_NONZERO), ("complex128", "add")]]
        entries.append(scan("uint64", AFFINE, "exclusive", strategy=strategy, tuning=always,
                            reverse=True))
        entries.append(scan("float32", "add", "inclusive", strategy=strategy, tuning=always,
                            algorithm="warp_shuffle", section_size=64, items_per_thread=2))
        entries.append(scan_kernel("segmented", "float32", LAST_NONZERO, SEGMENTED,
                                   strategy=strategy, tuning=always))
        entries.append(scan_kernel("preamble", "float32", "add", CLAMPED, strategy=strategy,
                                   tuning=always, section_size=4096))
    assert all(e.scan_module.persistent_tiles for e in entries)
    return entries


def batch_tuned_single_pass():
    """The single pass as tuned (scangen/tuning.py SCAN: its tiles, one look-back tile a
    lane, its register bound, persistent blocks where tile_persistent_min_bytes says) for 1-, 2- and 4-byte values, both modes: these kernels
    must not spill (a tile's runs held in registers through the look-back once spilled 260
    bytes a thread and halved int32's speed; the persistent 4-byte kernel spilled 116 bytes
    while the loop over tiles held every element's shared-memory address)."""
    return [scan(dtype, op, mode, strategy="decoupled_lookback")
            for dtype, op, mode in [("int32", "add", "inclusive"), ("int32", "add", "exclusive"),
                                    ("int32", "max", "exclusive"),
                                    ("uint32", "bit_xor", "inclusive"),
                                    ("float32", "add", "inclusive"),
                                    ("float32", "add", "exclusive"),
                                    ("int16", "add", "inclusive"), ("int16", "add", "exclusive"),
                                    ("uint8", "add", "inclusive"), ("uint8", "add", "exclusive")]]


def batch_vector_runs():
    """Plain scans whose single pass moves a lane's run in 16-byte words
    (Tuning.tile_vector_runs): 1- to 16-byte values, both modes, the persistent and the
    ticketed kernel of both single-pass protocols, non-commutative operators, and runs of
    one and of several words. None of them may spill (checked with the tuned single pass)."""
    vector = Tuning(tile_vector_runs=True)
    modes = itertools.cycle(MODES)
    entries = []
    for strategy, (dtype, op) in itertools.product(
            ("auto", "decoupled_lookback", "chained"),
            [("uint8", "add"), ("int8", "max"), ("int16", "add"), ("float16", "add"),
             ("float32", "add"), ("int32", LAST_NONZERO), ("float64", "add"),
             ("uint64", AFFINE), ("complex128", "add")]):
        entries.append(scan(dtype, op, next(modes), strategy=strategy, tuning=vector))
    entries.append(scan("uint8", "add", "exclusive", algorithm="warp_shuffle",
                        section_size=2048, items_per_thread=16, tuning=vector))
    # runs of one word whose padded sections are not whole words before rounding
    for dtype, items in (("uint8", 16), ("int16", 8)):
        entries.append(scan(dtype, "add", "inclusive", algorithm="warp_shuffle",
                            section_size=32 * items, items_per_thread=items, tuning=vector))
    # inputs converted to a wider result as they are loaded
    for (source, result), strategy in zip([("uint8", "int32"), ("int16", "int64"),
                                           ("float16", "float32"), ("uint8", "uint64")],
                                          itertools.cycle(("auto", "decoupled_lookback"))):
        entries.append(scan(source, "add", next(modes), strategy=strategy, tuning=vector,
                            result_dtype=result))
    entries.append(scan("uint8", "add", "exclusive", tuning=vector, result_dtype="int32",
                        algorithm="warp_shuffle", section_size=128, items_per_thread=4))
    # 1- and 2-byte integers scanned packed in 32-bit words (ScanModule.packed_combine)
    for (dtype, op), mode in zip([("uint16", "min"), ("int16", "max"), ("int8", "bit_xor"),
                                  ("uint8", "bit_and")], modes):
        items = 16 // np.dtype(dtype).itemsize
        entries.append(scan(dtype, op, mode, algorithm="warp_shuffle", section_size=32 * items,
                            items_per_thread=items, tuning=vector))
    assert all(e.scan_module.vector_runs for e in entries)
    assert {e.scan_module.vector_input_word for e in entries} == {4, 8, 16}
    assert {e.scan_module.packed_combine is None for e in entries} == {True, False}
    return entries


def batch_dynamic_shared():
    """Sections past the 48 KiB of static shared memory, held in dynamic shared memory:
    every algorithm with auto (one section, tiles, reduce and seeded scan) and hierarchical
    (sections, prefixes), a segmented struct, the persistent kernel's two sections, and a
    counting module (its totals' kernels hold sections; its user io counts ballots)."""
    shapes = {"naive": (WIDE_STRUCTS[48], 1024, None),
              "kogge_stone": (WIDE_STRUCTS[48], 1024, None),
              "kogge_stone_double_buffered": (WIDE_STRUCTS[32], 1024, None),
              "brent_kung": (WIDE_STRUCTS[32], 2048, None),
              "coarsened": (np.dtype(np.float64), 8192, 8),
              "warp_shuffle": (np.dtype(np.float32), 16384, 16)}
    modes = itertools.cycle(MODES)
    entries = []
    for (algorithm, (dtype, section, items)), strategy in itertools.product(
            shapes.items(), ("auto", "hierarchical")):
        op = field_sums(dtype) if dtype.names else LAST_NONZERO
        entries.append(scan(dtype, op, next(modes), algorithm=algorithm, section_size=section,
                            items_per_thread=items, strategy=strategy))
    entries.append(scan_kernel("segmented struct", WIDE_STRUCTS[24], field_sums(WIDE_STRUCTS[24]),
                               SEGMENTED, algorithm="warp_shuffle", section_size=2048,
                               strategy="decoupled_lookback"))
    entries.append(scan("float64", "add", "exclusive", strategy="chained", section_size=4096,
                        tuning=Tuning(tile_persistent_min_bytes=0)))
    entries.append(scan_kernel("compaction", "int64", "add", COMPACTION, counts=True,
                               section_size=8192, strategy="auto"))
    assert all(e.scan_module.scan.dynamic_shared for e in entries)
    return entries


def batch_parts():
    """The parts of modules that calls compile (ScanModule.parts: the kernels one plan
    launches, rendered without the layers the others use): each must compile as cleanly as
    its whole module. Every other ScanKernel example (each hook and strategy: counting,
    segmented, the total in the output) and every module in dynamic shared memory."""
    modules = batch_scan_kernels()[::2] + batch_dynamic_shared()
    entries = [Entry(f"{e.label} part {'+'.join(k.name for k in part.kernels)}", part)
               for e in modules for part in e.scan_module.parts()]
    assert all(isinstance(e.scan_module, ModulePart) for e in entries)
    return entries


BATCHES = {
    "algorithms_int8": lambda: batch_algorithms("int8"),
    "algorithms_float64": lambda: batch_algorithms("float64"),
    "sections": batch_sections,
    "types_operators": batch_types_operators,
    "types_strategies": batch_types_strategies,
    "user_operators": batch_user_operators,
    "scan_kernels": batch_scan_kernels,
    "radix_histogram": batch_radix_histogram,
    "columns": batch_columns,
    "status_16_byte_words": batch_status_16_byte_words,
    "tile_warp_runs": batch_tile_warp_runs,
    "wide_lookback": batch_wide_lookback,
    "persistent_tiles": batch_persistent_tiles,
    "tuned_single_pass": batch_tuned_single_pass,
    "vector_runs": batch_vector_runs,
    "dynamic_shared": batch_dynamic_shared,
    "parts": batch_parts,
    # only where numpy has the dtype (ml_dtypes); tests/cpu/test_types_ops.py says more
    **({"bfloat16": batch_bfloat16} if BFLOAT16 is not None else {}),
}


def harness_entries():
    """The harness checks itself: a module with a planted unused variable (the warning check
    must see warnings) and one whose operator has a typo (the error is located in it)."""
    canary = scan("int16", "min")
    canary.label, canary.text = "canary: unused variable", \
        render(canary.scan_module).text + "\nstatic const int UNUSED_CANARY = 1;\n"
    typo = scan("int32", Operator("a +* b", 0, name="typo"), strategy="hierarchical")
    typo.label = "typo 'a +* b'"
    return [canary, typo]


#: The names scangen gives its own entry-point parameters (the families' parameters after
#: the io's; ``n`` is reserved already).
FAMILY_PARAMETERS = sorted({p.name for f in FAMILIES for p in f.parameters} - {"n"})


def argument_name_entries():
    """A user argument named like one of scangen's entry-point parameters, in a module with
    that kernel (auto: one section, tiles, reduce/seeded; hierarchical: sections/prefixes).
    Refusing the name up front (a ValueError naming it) is as good as compiling."""
    entries = []
    for name, strategy in itertools.product(FAMILY_PARAMETERS, ("auto", "hierarchical")):
        try:
            kernel = ScanKernel("float32", "add", arguments=f"const float *x, float *{name}",
                                input_expr="x[i]", output_statement=f"{name}[i] = item;",
                                strategy=strategy)
        except ValueError as err:
            assert name in str(err)
            continue
        entries.append(Entry(f"argument named {name!r} {strategy}", kernel.scan_module))
    return entries


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """Batch name -> list of Futures of Compiled, one per module (tests.support.nvcc)."""
    batches = {name: build() for name, build in BATCHES.items()}
    batches["harness"] = harness_entries()
    batches["argument_names"] = argument_name_entries()
    with compiling(batches, tmp_path_factory.mktemp("nvcc")) as futures:
        yield futures


# --- the matrix covers what it claims ---------------------------------------------------------

def test_batches_cover_the_matrix():
    entries = [e for build in BATCHES.values() for e in build()
               if isinstance(e.scan_module, ScanModule)]
    specs = [e.scan_module.scan for e in entries]
    scans = [e for e in entries if e.mode]
    assert {(e.scan_module.scan.algorithm, e.mode) for e in scans} == \
        set(itertools.product(ALGORITHMS, MODES))
    assert {(s.algorithm, s.strategy) for s in specs} == \
        set(itertools.product(ALGORITHMS, STRATEGIES))
    assert {(s.etype.name, s.strategy) for s in specs} >= \
        set(itertools.product(DTYPES, STRATEGIES))
    assert {(s.etype.name, s.operator.name) for s in specs} >= set(type_operator_pairs())
    assert {s.operator.name for s in specs} >= {"last_nonzero", "sat_add", "affine_then", "gcd",
                                                "table_pick", "typed_max"}
    # tiny sections, one-thread blocks, full blocks, the largest sections
    assert {s.section_size for s in specs} >= {2, 4, 1024, 2048}
    assert {s.block_size for s in specs} >= {1, 2, 32, 1024}
    assert max(s.section_size for s in specs) >= 16384
    # the single-pass kernel with a packed and with a split tile status
    single_pass = [e for e in entries
                   if any(k.family.single_pass for k in e.scan_module.kernels)]
    assert {TileState(e.scan_module.scan.acc_itemsize).packed for e in single_pass} == \
        {True, False}
    assert {e.scan_module.scan.acc_itemsize for e in single_pass} >= {1, 2, 4, 8, 16}
    # ScanKernels: the examples with every strategy that accepts them
    kernels = [e for e in entries if not e.mode]
    for what, strategies in [("compaction", STRATEGIES), ("affine maps", STRATEGIES),
                             ("partition", TOTAL_STRATEGIES), ("affine total", TOTAL_STRATEGIES),
                             ("segmented", STRATEGIES)]:
        assert {e.scan_module.scan.strategy for e in kernels
                if e.label.startswith(f"ScanKernel {what} ")} == set(strategies), what
    assert any(e.scan_module.hooks.preamble for e in kernels)
    # every kernel of every family and io is in some module
    names = {k.name for e in entries for k in e.scan_module.kernels}
    assert names == {f"{family}_{io}" for family in
                     ("scan_one_section", "scan_sections", "add_prefixes", "reduce_sections",
                      "scan_seeded") for io in ("user", "totals")} | {
        "scan_tiles_user", "scan_tiles_persistent_user", "scan_columns_user", "scan_rows_user"}
    assert len(entries) >= 300


def test_modules_are_compiled_as_rendered(compiled):
    """What nvcc saw is the rendered text itself: no wrapper, no namespace, no extern "C++"."""
    for name in BATCHES:
        for result in results(compiled, name):
            assert result.entry.text is None
            assert result.path.read_text() == result.source.text
            assert result.source == result.entry.scan_module.module_source()


# --- every module compiles cleanly ------------------------------------------------------------

@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_compiles(compiled, name):
    failed = [r for r in results(compiled, name) if r.returncode != 0]
    report = "\n".join(line for r in failed for line in r.diagnostics("error"))
    assert not failed, (f"nvcc failed on {len(failed)} module(s) of batch {name}:\n{report}\n"
                        f"--- log of the first ---\n{failed[0].log[-4000:]}")


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_has_no_warnings(compiled, name):
    warnings = [line for r in results(compiled, name) for line in r.diagnostics("warning")]
    assert not warnings, "\n".join(warnings)


@pytest.mark.parametrize("name", list(BATCHES))
def test_every_kernel_is_in_the_cubin(compiled, name):
    for result in results(compiled, name):
        assert result.returncode == 0, f"[{result.label}] did not compile"
        promised = [name for name, _ in result.entry.scan_module.entry_points()]
        assert len(set(promised)) == len(promised), promised
        # ptxas compiled each entry point once, and the cubin exports each unmangled
        assert sorted(result.shared) == sorted(promised), f"[{result.label}] ptxas"
        assert sorted(result.symbols) == sorted(promised), f"[{result.label}] symbols"


@pytest.mark.parametrize("name", list(BATCHES))
def test_shared_memory_fits(compiled, name):
    """Static shared memory within 48 KiB; with the dynamic shared memory a launch passes,
    within what make_spec validated (spec.shared_bytes; other modules: the static limit)."""
    over = []
    for result in results(compiled, name):
        assert result.returncode == 0, f"[{result.label}] did not compile"
        module = result.entry.scan_module
        whole = module.scan_module if isinstance(module, ModulePart) else module
        scans = isinstance(whole, ScanModule)
        claimed = whole.scan.shared_bytes if scans else MAX_STATIC_SHARED_BYTES
        dynamic = module.dynamic_shared() if scans else {}
        # (a part may hold only kernels that take none: add_prefixes, counting by ballots)
        assert bool(dynamic) == (claimed > MAX_STATIC_SHARED_BYTES) or \
            module is not whole and not dynamic, result.label
        for kernel, used in result.shared.items():
            if used > MAX_STATIC_SHARED_BYTES or used + dynamic.get(kernel, 0) > claimed:
                over.append(f"[{result.label}] {kernel}: {used} B static, "
                            f"{dynamic.get(kernel, 0)} B dynamic; spec says {claimed} B")
    assert not over, "\n".join(over[:30])


@pytest.mark.parametrize("name", ["tuned_single_pass", "vector_runs"])
def test_the_single_pass_does_not_spill(compiled, name):
    spilled = []
    for result in results(compiled, name):
        assert result.returncode == 0, f"[{result.label}] did not compile"
        assert any(kernel.startswith("scan_tiles") for kernel in result.spills), \
            f"[{result.label}] no ptxas report of a tile kernel"
        spilled += [f"[{result.label}] {kernel}: {stores} bytes of spill stores"
                    for kernel, stores in result.spills.items() if stores]
    assert not spilled, "\n".join(spilled)


# --- the harness sees errors and warnings -----------------------------------------------------

def test_a_typo_and_a_warning_are_seen_and_located(compiled):
    canary, typo = results(compiled, "harness")
    assert canary.returncode == 0
    warnings = canary.diagnostics("warning")
    assert warnings and "UNUSED_CANARY" in canary.log, canary.log
    assert typo.returncode != 0
    errors = typo.diagnostics("error")
    assert errors, typo.log
    assert "(in the user's operator)" in errors[0], errors


def test_user_argument_names_never_clash_with_scangens(compiled):
    failed = [r for r in results(compiled, "argument_names") if r.returncode != 0]
    assert not failed, "\n".join(line for r in failed for line in r.diagnostics("error"))


# --- ScanKernel.check_compile names the piece a typo is in ------------------------------------

TYPOS = {
    "input_expr": dict(COMPACTION, input_expr="x[i] +* 1"),
    "output_statement": dict(COMPACTION, output_statement="out[i] = itme;"),
    "preamble": dict(COMPACTION, preamble="static __device__ int helper(int v) "
                                          "{ return v +* 2; }"),
}


@pytest.mark.parametrize("piece,typo", [
    ("input_expr", "x[i] +* 1"),
    ("output_statement", "out[i] = itme;"),
    ("preamble", "return v +* 2;"),
    ("operator", "a +* b"),
    ("operator preamble", "return a ^^ b;"),
])
def test_check_compile_names_the_piece_with_a_typo(piece, typo):
    if piece == "operator":
        kernel = ScanKernel("int64", Operator("a +* b", 0, name="typo"), **COMPACTION)
    elif piece == "operator preamble":
        op = Operator("xor_of(a, b)", 0, name="typo", preamble=(
            "static __device__ long long xor_of(long long a, long long b) { return a ^^ b; }"))
        kernel = ScanKernel("int64", op, **COMPACTION)
    else:
        kernel = ScanKernel("int64", "add", **TYPOS[piece])
    with pytest.raises(ScanCompileError) as caught:
        kernel.check_compile()
    message = str(caught.value)
    assert f"in your {piece}, line" in message, message
    # the numbered source around the error, the offending line marked, with the user's text
    marked = re.search(r"^>\s*(\d+) \| (.*)$", message, re.M)
    assert marked, message
    number = int(marked.group(1))
    source = render(kernel.scan_module)
    assert source.user_piece_at(number) == piece
    assert typo in marked.group(2) and typo in source.text.splitlines()[number - 1]


@pytest.mark.parametrize("piece,make,text", [
    ("input_expr", lambda: ScanKernel("int64", "add", **dict(COMPACTION, input_expr="x[i] +")),
     "x[i] +"),
    ("output_statement",
     lambda: ScanKernel("int64", "add", **dict(COMPACTION, output_statement="out[i] = item")),
     "out[i] = item"),
    ("operator", lambda: ScanKernel("int64", Operator("a +", 0, name="cut"), **COMPACTION),
     "a +"),
    ("predicate", lambda: Select(np.float32, "x >"), "x >"),
])
def test_check_compile_names_the_piece_cut_short(piece, make, text):
    """nvcc reports an expression or statement cut short at the token after it, on the line
    that closes scangen's wrapping of the piece: the error names the piece it ends, not the
    enclosing code (scangen's, or a primitive's preamble around its predicate)."""
    with pytest.raises(ScanCompileError) as caught:
        make().check_compile()
    message = str(caught.value)
    assert f"at the end of your {piece} (cut short?), line" in message, message
    assert "please report" not in message and "in your preamble" not in message
    # the user's text is shown in the numbered source just above the marked line
    marked = re.search(r"^>\s*(\d+) \|", message, re.M)
    assert marked, message
    before = message[:marked.start()].splitlines()
    assert any(line.endswith(f"| {text}") for line in before[-3:]), message


@pytest.mark.parametrize("piece,make", [
    ("preamble", lambda: ScanKernel("int64", "add", **dict(
        COMPACTION, preamble="#include <nonexistent_header.h>"))),
    ("operator preamble", lambda: ScanKernel("int64", Operator(
        "a + b", 0, name="missing", preamble="#include <nonexistent_header.h>"),
        **COMPACTION)),
])
def test_a_missing_include_names_the_piece_and_shows_only_its_lines(piece, make):
    """The host preprocessor reports a missing header as 'module.cu:LINE:COL: fatal error'
    (not cudafe's 'module.cu(LINE): error'): the error still names the piece, and shows the
    lines around it, not the whole module."""
    with pytest.raises(ScanCompileError) as caught:
        make().check_compile()
    message = str(caught.value)
    assert f"in your {piece}, line" in message, message
    assert re.search(r"^>\s*\d+ \| #include <nonexistent_header.h>$", message, re.M), message
    assert len(message.splitlines()) < 40, message


def test_a_field_name_a_macro_takes_is_blamed_on_the_dtype():
    """A field name no list of C++ keywords holds but a header's macro takes (CHAR_BIT)
    fails in the struct scangen writes for the dtype: the error says so."""
    dtype = np.dtype([("CHAR_BIT", np.int32)])
    with pytest.raises(ScanCompileError, match="the first error is in your dtype, line"):
        Scan(dtype, Operator("b", identity=(0,))).check_compile()


def test_check_compile_accepts_the_examples():
    ScanKernel("int64", "add", **COMPACTION).check_compile()
    ScanKernel("int64", "add", **PARTITION, strategy="hierarchical").check_compile()


#: The most threads a multiprocessor holds, by architecture (templates/launch_bounds.cuh.j2).
THREADS_PER_SM = {"sm_75": 1024, "sm_86": 1536, "sm_89": 1536, "sm_90": 2048}


@pytest.mark.parametrize("arch", list(THREADS_PER_SM))
def test_register_bounds_ask_for_no_more_blocks_than_fit(tmp_path, arch):
    """Every kernel's __launch_bounds__ asks for the blocks its tuning names where they fit
    on the architecture compiled for, else for as many as fit: ptxas then neither ignores a
    bound nor warns (a Turing multiprocessor holds 1024 threads, an sm_86/sm_89 one 1536)."""
    import subprocess
    from scangen.primitives import Histogram, RadixSort
    from scangen.tuning import HISTOGRAM
    from tests.support.nvcc import NVCC

    def tile_bound(scan_module):
        spec = scan_module.scan
        return spec.block_size, spec.tuning.at(spec.acc_itemsize).tile_min_blocks_per_sm(
            spec.block_size)

    select = Select(np.float32, "x > 0").kernel.scan_module
    sort = RadixSort(np.uint32, np.uint32).module
    scan = Scan(np.float32).kernel.scan_module
    modules = {  # name: (module, (threads a block, blocks its tuning asks for))
        "scan": (scan, tile_bound(scan)),
        "select": (select, tile_bound(select)),
        "histogram": (Histogram(np.float32).module,
                      (HISTOGRAM.value("block_size"), HISTOGRAM.value("blocks_per_sm"))),
        "radix pairs": (sort, (sort.block_size, sort.min_threads_per_sm // sort.block_size)),
    }
    # on Turing the counting scan's tuning asks for more than fit
    assert select.scan.block_size * tile_bound(select)[1] > THREADS_PER_SM["sm_75"]
    for name, (module, (block, wanted)) in modules.items():
        path = tmp_path / f"{name.replace(' ', '_')}.cu"
        path.write_text(module.module_source().text)
        result = subprocess.run([NVCC, "-ptx", f"-arch={arch}", "-o", str(path.with_suffix(
            ".ptx")), str(path)], capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr.strip(), (name, result.stderr)
        asked = set(re.findall(r"\.minnctapersm (\d+)", path.with_suffix(".ptx").read_text()))
        fitting = min(wanted, THREADS_PER_SM[arch] // block)
        assert asked == {str(fitting)}, (name, asked, fitting)
