"""Plans (scangen.plan.make_plan, ScanKernel.plan), without a GPU.

Two kinds of check, for every strategy:

* the plan's numbers on both sides of every section boundary and past 2^31 elements, against
  a model of each strategy written from its documentation: levels, grids, blocks (the
  spec's, within the kernels' __launch_bounds__), shared memory, temporaries (hierarchical's
  partial scan of each level's n elements; totals of sections + 1 entries; the single-pass
  ticket and tile status), bytes read and written; auto's choice per n; the largest n a
  spec can scan;
* tests.support.plan_machine, a numpy interpreter that runs the plan's launches doing what
  each kernel's template does, compared with the reference for non-commutative operators
  (AFFINE, LAST_NONZERO), plans of 3 to 7 levels, both modes, Scan's hooks (in place too),
  a hook set that records item, prev_item and last_item separately, and segmented scans;
  temporaries start poisoned. Mutated plans and kernels show the comparison is sharp.
"""
import dataclasses
import re

import numpy as np
import pytest

import scangen
from scangen import (LAST_NONZERO, MODES, STRATEGIES, Operator, Scan, ScanKernel, Tuning,
                     make_spec)
from scangen.kernel import PARTS_MAX_LOG2N, ScanModule
from scangen.plan import NULL, USER_ARGS, BufferArg, RuntimeArg, make_plan
from scangen.render import render
from scangen.spec import MAX_BLOCK_THREADS, MAX_STATIC_SHARED_BYTES
from scangen.tuning import max_shared_bytes
from scangen.strategies import resolve
from scangen.strategies.base import MAX_GRID, PlanBuilder
from scangen.strategies.base import REGISTERED, Strategy, register
from scangen.strategies.reduce_then_scan import REDUCE_THEN_SCAN
from tests.support import (AFFINE, SINGLE_PASS, TOTAL_STRATEGIES, assert_scan_equal, expected,
                           operator, random_input, segmented_reference)
from tests.support.plan_machine import PlanMachine, RecordHooks, ScanHooks, run_plan

GRID_LIMIT = 2**31 - 1


def ceil_div(a, b):
    return -(-a // b)


# --- kernels under test -----------------------------------------------------------------------

def scan(dtype, op, mode="inclusive", **kwargs):
    return Scan(dtype, operator(op) if isinstance(op, str) else op, mode=mode, **kwargs)


def recorder(dtype, op, *, last_item=True, segmented=False, **kwargs):
    """A ScanKernel whose output records item, prev_item (and last_item) per i: what
    RecordHooks models."""
    arguments = "const scan_t *x, scan_t *items, scan_t *prevs"
    output = "items[i] = item; prevs[i] = prev_item;"
    if last_item:
        arguments += ", scan_t *lasts"
        output += " lasts[i] = last_item;"
    extra = {}
    if segmented:
        arguments += ", const unsigned char *heads"
        extra["is_segment_start_expr"] = "heads[i] != 0"
    return ScanKernel(dtype, operator(op) if isinstance(op, str) else op, arguments=arguments,
                      input_expr="x[i]", output_statement=output, **extra, **kwargs)


def auto_choice(spec, n, needs_last_item=False):
    """What the docs promise for strategy "auto": one launch when n fits a section, then
    decoupled look-back below Tuning.auto_reduce_then_scan_min_bytes (by value size) of input, and
    reduce_then_scan from there on, or always when the output uses last_item."""
    if n <= spec.section_size:
        return "one_section"
    size = spec.etype.itemsize
    if needs_last_item or n * size >= spec.tuning.at(size).auto_reduce_then_scan_min_bytes:
        return "reduce_then_scan"
    return "decoupled_lookback"


def effective_strategy(scan_module, n):
    spec = scan_module.scan
    if spec.strategy == "auto" or n <= spec.section_size:
        return auto_choice(spec, n, scan_module.hooks.uses_last_item)
    return spec.strategy


def section_levels(count, section, grand_total=False):
    """Levels of a sections-then-totals plan: each level's section totals (at the top level
    with one entry more, the grand total, where the output reads last_item) are scanned one
    level down until they fit one section."""
    levels, extra = 1, int(grand_total)
    while count > section:
        count = ceil_div(count, section) + extra
        levels, extra = levels + 1, 0
    return levels


# --- the model of a plan ----------------------------------------------------------------------

@dataclasses.dataclass
class Model:
    launches: list  # (kernel name, grid, args, elements read, elements written, level)
    temporaries: dict  # name -> (bytes, persistent)
    tiles: int = 0


def model_plan(scan_module, n):
    """The launches and temporaries each strategy's documentation describes."""
    spec = scan_module.scan
    section, acc = spec.section_size, spec.acc_itemsize
    model = Model([], {})
    if n == 0:
        return model
    strategy = effective_strategy(scan_module, n)

    def io(arg):
        return "user" if arg is USER_ARGS else "totals"

    def one_section(count, io_arg, level):
        model.launches.append((f"scan_one_section_{io(io_arg)}", 1, (io_arg, count), count,
                               count, level))

    def sections_then_totals(count, io_arg, level):
        if count <= section:
            return one_section(count, io_arg, level)
        sections = ceil_div(count, section)
        totals = BufferArg(f"totals{level}")
        if strategy == "hierarchical":  # scan sections into partial, add the prefixes back
            partial = BufferArg(f"partial{level}")
            model.temporaries[partial.name] = (count * acc, False)
            buffers, first, second = (partial,), "scan_sections", "add_prefixes"
            first_writes = count + sections + 1
        else:  # reduce sections, scan them seeded with their prefix
            buffers, first, second = (), "reduce_sections", "scan_seeded"
            first_writes = sections + 1
        model.temporaries[totals.name] = ((sections + 1) * acc, False)
        args = (io_arg, *buffers, totals, count)
        model.launches.append((f"{first}_{io(io_arg)}", sections, args, count, first_writes,
                               level))
        # Only the top level, and only where the output reads last_item, scans the grand
        # total at the end of its totals.
        grand_total = io_arg is USER_ARGS and scan_module.hooks.uses_last_item
        sections_then_totals(sections + 1 if grand_total else sections, totals, level + 1)
        model.launches.append((f"{second}_{io(io_arg)}", sections, args,
                               count + sections + 1, count, level))

    if strategy == "one_section":
        one_section(n, USER_ARGS, 0)
    elif strategy in ("hierarchical", "reduce_then_scan"):
        sections_then_totals(n, USER_ARGS, 0)
    else:
        tiles = model.tiles = ceil_div(n, section)
        # epoch, flag and value in one 64-bit word, or (where the tuning asks) one 16-byte
        # word for values of 5 to 8 bytes
        sixteen = spec.tuning.status_16_byte_words and 4 < acc <= 8
        packed = acc <= 4 or sixteen
        model.temporaries["ticket"] = (8, True)
        model.temporaries["status"] = (tiles * (16 if sixteen else 8 if packed else 4), True)
        values = NULL
        if not packed:  # a 32-bit flag per tile, two value slots (aggregate, prefix)
            assert acc % 8 == 0
            values = BufferArg("status_values")
            model.temporaries["status_values"] = (2 * tiles * acc, True)
        # persistent blocks from Tuning.tile_persistent_min_bytes of values on, where the
        # module has that kernel
        threshold = spec.tuning.at(acc).tile_persistent_min_bytes
        persistent = scan_module.persistent_tiles and n * acc >= threshold
        model.launches.append((f"scan_tiles{'_persistent' if persistent else ''}_user", tiles,
                               (USER_ARGS, BufferArg("status"), values, BufferArg("ticket"),
                                RuntimeArg("ticket_base"), RuntimeArg("epoch"), n),
                               n, n, 0))
    return model


def _launch_bounds(scan_module):
    """BLOCK_SIZE and the kernels whose __launch_bounds__ name it, in the rendered source."""
    text = render(scan_module).text
    (block,) = re.findall(r"static const int BLOCK_SIZE = (\d+);", text)
    bounded = re.findall(r"__launch_bounds__\(BLOCK_SIZE(?:, TILE_MIN_BLOCKS)?\)\n(\w+)\(", text)
    return int(block), set(bounded)


def check_plan(plan):
    """The plan equals the model, and its numbers are what a GPU can take."""
    scan_module, spec, n = plan.scan_module, plan.spec, plan.n
    acc = spec.acc_itemsize
    model = model_plan(scan_module, n)
    assert plan.strategy == effective_strategy(scan_module, n)
    assert plan.strategy == resolve(spec.strategy, scan_module.hooks.uses_last_item, spec,
                                    n).name
    got = [(launch.kernel.name, launch.grid, launch.args, launch.bytes_read // acc,
            launch.bytes_written // acc, launch.level) for launch in plan.launches]
    assert got == model.launches, plan.describe()
    assert {t.name: (t.nbytes, t.persistent) for t in plan.temporaries} == model.temporaries
    assert len(plan.temporaries) == len(model.temporaries), "temporary names repeat"
    assert plan.single_pass_tiles == model.tiles
    assert plan.levels == 1 + max((l[-1] for l in model.launches), default=-1)

    if n == 0:
        assert plan.launches == plan.temporaries == () and plan.levels == 0
        assert plan.bytes_read == plan.bytes_written == plan.temp_bytes == 0
        return
    block, bounded = _launch_bounds(scan_module)
    module = scan_module.kernels
    used = set()
    for launch in plan.launches:
        assert launch.kernel in module and launch.kernel.name in bounded
        assert launch.block == spec.block_size == block <= MAX_BLOCK_THREADS
        assert launch.shared_bytes == spec.shared_bytes <= max_shared_bytes("sm_90")
        # past 48 KiB, a kernel holding a section takes it (and the scratch) dynamically
        holds = launch.kernel.family.name != "add_prefixes"
        assert launch.dynamic_shared_bytes == (
            spec.section_shared_bytes(2 if launch.persistent else 1)
            if spec.shared_bytes > MAX_STATIC_SHARED_BYTES and holds else 0)
        assert 1 <= launch.grid <= GRID_LIMIT
        count = launch.args[-1]
        assert type(count) is int and 0 < count < 2**63 and launch.grid == ceil_div(
            count, spec.section_size)
        assert launch.bytes_read % acc == 0 and launch.bytes_written % acc == 0
        assert launch.why
        used |= {a.name for a in launch.args if isinstance(a, BufferArg)}
    assert used == {t.name for t in plan.temporaries}, "a temporary no launch uses"
    assert plan.launches[0].args[0] is USER_ARGS and plan.launches[-1].args[0] is USER_ARGS
    assert plan.temp_bytes == sum(t.nbytes for t in plan.temporaries)

    # the traffic the strategies' summaries promise, in elements
    traffic = (plan.bytes_read + plan.bytes_written) // acc
    totals = sum(t.nbytes for t in plan.temporaries if t.name.startswith("totals")) // acc
    if plan.strategy in ("one_section", "chained", "decoupled_lookback"):
        assert traffic == 2 * n
    elif plan.strategy == "hierarchical":
        assert 4 * n < traffic <= 4 * n + 6 * totals
        assert plan.levels == section_levels(n, spec.section_size,
                                             scan_module.hooks.uses_last_item)
    else:
        assert 3 * n < traffic <= 3 * n + 6 * totals
        assert plan.levels == section_levels(n, spec.section_size,
                                             scan_module.hooks.uses_last_item)


def check_too_many_sections(scan_module, n):
    """More sections than one grid can have: refused, saying how many elements the spec can
    take, and advice that can be followed (a section size that plans n, or pieces)."""
    spec = scan_module.scan
    sections = ceil_div(n, spec.section_size)
    assert sections > GRID_LIMIT
    with pytest.raises(ValueError) as err:
        make_plan(scan_module, n)
    message = str(err.value)
    assert message.startswith(f"n={n} makes {sections} sections of {spec.section_size}, more "
                              f"blocks than one launch can have ({GRID_LIMIT})"), message
    assert f"at most {spec.section_size * GRID_LIMIT} elements" in message, message
    suggested = re.search(r"section_size=(\d+)", message)
    if suggested is None:
        assert "in pieces" in message, message
        return
    bigger = make_spec(spec.etype.dtype, spec.operator, algorithm=spec.algorithm,
                       section_size=int(suggested.group(1)), strategy=spec.strategy,
                       tuning=spec.tuning, segmented=spec.segmented)
    assert bigger.section_size > spec.section_size
    check_plan(make_plan(ScanModule(bigger, scan_module.hooks), n))


# --- the plan's numbers -----------------------------------------------------------------------

PLAN_CASES = [
    # (dtype, operator, mode, algorithm, section_size, items_per_thread)
    ("float32", "add", "inclusive", "kogge_stone", 1024, None),
    ("int64", "max", "exclusive", "warp_shuffle", 256, None),
    ("uint8", "bit_or", "inclusive", "brent_kung", 2048, None),
    ("float64", "min", "exclusive", "coarsened", 2048, 4),
    ("int16", "mul", "inclusive", "coarsened", 64, 8),
    ("int32", "add", "exclusive", "naive", 32, None),
    ("int8", "add", "inclusive", "brent_kung", 4, None),
    ("uint32", "add", "inclusive", "kogge_stone_double_buffered", 128, None),
    ("float64", "add", "inclusive", "warp_shuffle", None, None),  # tuned defaults
    ("int16", "last_nonzero", "exclusive", "warp_shuffle", None, None),
]


def _case_id(case):
    return f"{case[3]}-{case[4]}-{case[0]}-{case[2]}"


def _plan_kernels(case, strategy):
    """Scan, a recorder (using last_item where the strategy allows it) and a segmented one:
    the same scan with three hook sets (segmented: twice the acc_t bytes, other status)."""
    dtype, op, mode, algorithm, section, items = case
    kwargs = dict(algorithm=algorithm, section_size=section, items_per_thread=items,
                  strategy=strategy)
    last = strategy in TOTAL_STRATEGIES
    return [scan(dtype, op, mode, **kwargs).kernel,
            recorder(dtype, op, last_item=last, **kwargs),
            recorder(dtype, op, last_item=last, segmented=True, **kwargs)]


def _sizes(section, rng):
    largest = GRID_LIMIT * section
    sizes = {0, 1, 2, section - 1, section, section + 1, 2 * section, 2 * section + 1,
             section**2 - 1, section**2, section**2 + 1, section**3 - 1, section**3 + 1,
             2**31 - 1, 2**31, 2**31 + 5, 2**32 + 3, largest - 1, largest}
    sizes |= {int(s) for s in rng.integers(1, 10 * section**2, 3)}
    sizes |= {int(s) for s in rng.integers(2**20, 2**34, 2)}
    return sorted(s for s in sizes if 0 <= s <= largest)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", PLAN_CASES, ids=_case_id)
def test_plan_numbers_at_boundaries(case, strategy, rng):
    for kernel in _plan_kernels(case, strategy):
        spec = kernel.spec
        largest = GRID_LIMIT * spec.section_size
        for n in _sizes(spec.section_size, rng):
            plan = kernel.plan(n)
            assert plan.n == n and plan.scan_module == kernel.scan_module and plan.spec == spec
            assert plan == make_plan(kernel.scan_module, n)
            check_plan(plan)
        check_too_many_sections(kernel.scan_module, largest + 1)


@pytest.mark.parametrize("strategy", SINGLE_PASS)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float64", "complex64", "complex128"])
def test_status_16_byte_words_where_the_tuning_asks(dtype, strategy, rng):
    """Tuning.status_16_byte_words (the default) packs values of 5 to 8 bytes with their flag
    in one 16-byte word (status 16 bytes per tile, no value slots); other sizes keep their
    layout, and False splits them as wider ones are."""
    wide = scan(dtype, "add", strategy=strategy,
                tuning=Tuning(status_16_byte_words=True)).kernel
    for n in _sizes(wide.spec.section_size, rng):
        check_plan(wide.plan(n))
    sixteen = 4 < wide.spec.acc_itemsize <= 8
    assert ("ld.relaxed.gpu.global.v2.u64" in wide.source) == sixteen
    split = scan(dtype, "add", strategy=strategy,
                 tuning=Tuning(status_16_byte_words=False)).kernel
    assert "v2.u64" not in split.source
    assert ("v2.u64" in scan(dtype, "add", strategy=strategy).kernel.source) == sixteen  # default
    temporaries = {t.name for t in wide.plan(10**6).temporaries}
    assert ("status_values" in temporaries) == (wide.spec.acc_itemsize > 4 and not sixteen)


def test_levels_past_two_to_the_31():
    kernel = scan("int8", "add", algorithm="warp_shuffle", section_size=1024,
                  strategy="hierarchical").kernel
    plan = kernel.plan(2**31 + 5)
    # 2^31+5 elements: 2^21+1 sections, whose totals (2^21+1 entries: a plain scan needs no
    # grand total) make 2049 sections, whose 2049 totals make 3 sections, whose 3 totals fit
    # one section. Each totals buffer has room for one entry more.
    assert plan.levels == 4 and len(plan.launches) == 7
    assert [launch.grid for launch in plan.launches] == [2**21 + 1, 2049, 3, 1, 3, 2049,
                                                         2**21 + 1]
    assert [launch.args[-1] for launch in plan.launches] == [2**31 + 5, 2**21 + 1, 2049, 3,
                                                             2049, 2**21 + 1, 2**31 + 5]
    temps = {t.name: t.nbytes for t in plan.temporaries}
    assert temps == {"partial0": 2**31 + 5, "totals0": 2**21 + 2, "partial1": 2**21 + 1,
                     "totals1": 2050, "partial2": 2049, "totals2": 4}
    check_plan(plan)
    for strategy in ("chained", "decoupled_lookback", "auto", "reduce_then_scan"):
        plan = scan("int8", "add", section_size=4096, items_per_thread=16,
                    strategy=strategy).plan(2**31 + 5)
        assert plan.launches[0].grid == 2**19 + 1 and plan.launches[0].block == 256
        check_plan(plan)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_too_many_sections_are_refused_with_the_largest_n(strategy):
    assert MAX_GRID == GRID_LIMIT  # CUDA's limit on gridDim.x
    kernel = scan("int8", "add", algorithm="brent_kung", section_size=4, strategy=strategy)
    largest = 4 * GRID_LIMIT
    plan = kernel.plan(largest)
    assert plan.launches[0].grid == GRID_LIMIT
    check_plan(plan)
    for n in (largest + 1, 2**40, 2**62):
        check_too_many_sections(kernel.kernel.scan_module, n)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_one_section_sizes_take_one_launch_whatever_the_strategy(strategy):
    for case in PLAN_CASES:
        for kernel in _plan_kernels(case, strategy):
            section = kernel.spec.section_size
            for n in sorted({1, 2, section // 2 + 1, section}):
                plan = kernel.plan(n)
                assert plan.strategy == "one_section" and plan.temporaries == ()
                (launch,) = plan.launches
                assert launch.kernel.name == "scan_one_section_user"
                assert launch.grid == 1 and launch.block == kernel.spec.block_size
                assert launch.args == (USER_ARGS, n)


def test_auto_choice_per_n():
    for dtype, segmented in (("float32", False), ("float64", False), ("int8", True),
                             ("complex128", False)):
        for tuning in (None, Tuning(auto_reduce_then_scan_min_bytes=3 << 16)):
            kernels = {False: recorder(dtype, "add", last_item=False, segmented=segmented,
                                       tuning=tuning),
                       True: recorder(dtype, "add", segmented=segmented, tuning=tuning)}
            spec = kernels[False].spec
            section, size = spec.section_size, spec.etype.itemsize
            threshold = spec.tuning.at(size).auto_reduce_then_scan_min_bytes
            by_size = {"float32": 1 << 40, "float64": 1 << 40, "int8": 1 << 40,
                       "complex128": 16 << 20}[dtype]
            assert threshold == (by_size if tuning is None else 3 << 16)
            first_big = ceil_div(threshold, size)  # the first n with that many input bytes
            assert first_big > section + 1
            for n, want in ((1, "one_section"), (section, "one_section"),
                            (section + 1, "decoupled_lookback"),
                            (first_big - 1, "decoupled_lookback"),
                            (first_big, "reduce_then_scan"), (10 * first_big, "reduce_then_scan")):
                assert kernels[False].plan(n).strategy == want, (dtype, n)
                assert resolve("auto", False, spec, n).name == want
                uses_total = "one_section" if n <= section else "reduce_then_scan"
                assert kernels[True].plan(n).strategy == uses_total, (dtype, n)
                assert resolve("auto", True, spec, n).name == uses_total
    # a threshold inside one section still leaves small n to one launch
    tiny = scan("int32", "add", tuning=Tuning(auto_reduce_then_scan_min_bytes=1))
    assert tiny.plan(tiny.spec.section_size).strategy == "one_section"
    assert tiny.plan(tiny.spec.section_size + 1).strategy == "reduce_then_scan"
    # the describe() line says auto chose
    assert "strategy reduce_then_scan (auto)" in str(tiny.plan(10**6))


@pytest.mark.parametrize("strategy", SINGLE_PASS + ("auto",))
def test_persistent_single_pass_by_size(strategy):
    """Values of the sizes scangen.tuning.SCAN measured take the persistent
    single pass from that many bytes on (or a named threshold), other sizes never unless the
    Tuning says; counting modules and sections too large for two never have it; a named
    threshold that cannot fit two sections is refused; bad thresholds are refused."""
    by_size = {size: scangen.tuning.SCAN.value("tile_persistent_min_bytes", size)
               for size in (1, 2, 4, 8)}
    for dtype, segmented in (("float64", False), ("int64", False), ("float32", True),
                             ("float32", False), ("int16", False), ("int8", False)):
        size = 8 if segmented else np.dtype(dtype).itemsize  # a segmented value is a pair
        for tuning, threshold in ((None, by_size[size]),
                                  (Tuning(tile_persistent_min_bytes=1 << 20), 1 << 20)):
            kernel = recorder(dtype, "add", last_item=False, segmented=segmented,
                              strategy=strategy, tuning=tuning)
            spec = kernel.spec
            assert spec.acc_itemsize == size and kernel.scan_module.persistent_tiles
            first = max(ceil_div(threshold, size), spec.section_size + 1)
            cases = [(first, True), (3 * first + 7, True)]
            if first > spec.section_size + 1:
                cases.append((first - 1, False))
            for n, want in cases:
                (launch,) = kernel.plan(n).launches
                assert launch.persistent == want, (dtype, n)
                assert launch.kernel.name == ("scan_tiles_persistent_user" if want
                                              else "scan_tiles_user")
                assert launch.grid == ceil_div(n, spec.section_size)
                # one ticket per tile, and one per block of a persistent launch
                assert launch.tickets(5) == launch.grid + (5 if want else 0)
            assert "<<<min(" in str(kernel.plan(first))
    # a size the table does not name (16-byte complex128): only where the Tuning says
    assert 16 not in by_size
    kernel = recorder("complex128", "add", last_item=False, strategy=strategy)
    assert not kernel.scan_module.persistent_tiles
    assert "scan_tiles_persistent" not in kernel.source
    always = recorder("complex128", "add", last_item=False, strategy=strategy,
                      section_size=256, tuning=Tuning(tile_persistent_min_bytes=0))
    (launch,) = always.plan(10**6).launches
    assert launch.persistent and launch.kernel.name == "scan_tiles_persistent_user"
    # counting modules count ballots: no persistent kernel
    counting = ScanKernel("int64", "add", arguments="const int *x, long long *out",
                          input_expr="x[i] > 0", output_statement="out[i] = item;",
                          counts=True, strategy=strategy)
    assert not counting.scan_module.persistent_tiles
    # a named float64 section of 4096 keeps the classic kernel by default ...
    big = recorder("float64", "add", last_item=False, section_size=4096, strategy=strategy)
    assert not big.scan_module.persistent_tiles
    assert big.plan(10**8).launches[0].kernel.name == "scan_tiles_user"
    # ... and holds its two sections in dynamic shared memory where the Tuning asks for
    # the persistent kernel; refused past what a block may have
    held = recorder("float64", "add", last_item=False, section_size=4096, strategy=strategy,
                    tuning=Tuning(tile_persistent_min_bytes=1 << 30))
    (launch,) = held.plan(2 * 10**8).launches  # 1.6 GB: past the 1 GiB asked for
    assert launch.persistent and launch.dynamic_shared_bytes == \
        held.spec.section_shared_bytes(2) > MAX_STATIC_SHARED_BYTES
    with pytest.raises(ValueError, match="persistent tiles hold two sections"):
        recorder("float64", "add", last_item=False, section_size=16384, strategy=strategy,
                 tuning=Tuning(tile_persistent_min_bytes=1 << 30))
    for bad in (-1, True, 1.5, "16MiB"):
        with pytest.raises(ValueError, match="tile_persistent_min_bytes"):
            Tuning(tile_persistent_min_bytes=bad)


@pytest.mark.parametrize("strategy", SINGLE_PASS)
def test_single_pass_refuses_an_output_that_uses_last_item(strategy):
    for output in ("out[i] = last_item;", "if (i == n - 1) *total = item + last_item;"):
        with pytest.raises(ValueError, match="last_item"):
            ScanKernel("int32", "add", arguments="const int *x, int *out, int *total",
                       input_expr="x[i]", output_statement=output, strategy=strategy)
        with pytest.raises(ValueError, match="last_item"):
            recorder("int32", "add", segmented=True, strategy=strategy)
    # a mention in a comment or a string is not a use
    kernel = ScanKernel("int32", "add", arguments="const int *x, int *out",
                        input_expr="x[i]", strategy=strategy,
                        output_statement='out[i] = item; // not last_item\n'
                                         'if (0) printf("last_item");')
    assert not kernel.scan_module.hooks.uses_last_item
    assert kernel.plan(10**6).strategy == strategy


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_launched_kernel_is_in_the_module_and_every_kernel_is_launched(strategy):
    for case in PLAN_CASES[:4] + PLAN_CASES[-2:]:
        for kernel in _plan_kernels(case, strategy):
            scan_module = kernel.scan_module
            module = scan_module.kernels
            assert len(set(module)) == len(module)
            assert render(scan_module).kernel_names == tuple(k.name for k in module)
            launched = set()
            section, size = kernel.spec.section_size, kernel.spec.etype.itemsize
            # auto's reduce_then_scan from its threshold (1 TiB of 4- and 8-byte values)
            past_auto = ceil_div(kernel.spec.tuning.at(size).auto_reduce_then_scan_min_bytes, size)
            for n in (1, section, section + 1, section**2 + 1, 10**8, 2**31 + 5, past_auto):
                for launch in kernel.plan(n).launches:
                    assert launch.kernel in module, f"{launch.kernel.name} is not in the module"
                    launched.add(launch.kernel)
            assert launched == set(module), "the module holds a kernel no plan launches"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_plan_compiles_the_part_of_the_module_it_launches(strategy, rng):
    """Plan.part: the kernels the plan launches, in the module's order, rendered as a module
    of their own without the others; ScanModule.parts holds the part of every plan up to
    2^PARTS_MAX_LOG2N elements."""
    for case in PLAN_CASES[:4] + PLAN_CASES[-2:]:
        for kernel in _plan_kernels(case, strategy):
            scan_module = kernel.scan_module
            parts = scan_module.parts()
            assert len(set(parts)) == len(parts)
            whole = render(scan_module).text
            section = kernel.spec.section_size
            sizes = {1, section, section + 1, section**2 + 1, 2**PARTS_MAX_LOG2N} | \
                {int(n) for n in rng.integers(2, 2**PARTS_MAX_LOG2N, 12)}
            for n in sorted(sizes):
                try:
                    plan = kernel.plan(n)
                except ValueError:  # more sections than a grid holds
                    continue
                launched = {launch.kernel for launch in plan.launches}
                part = plan.part
                assert part.kernels == tuple(k for k in scan_module.kernels if k in launched)
                assert part in parts, (n, [k.name for k in part.kernels])
                assert part.entry_points() == tuple(
                    entry for entry in scan_module.entry_points()
                    if entry[0] in {k.name for k in launched})
                text = part.module_source().text
                assert part.module_source().kernel_names == tuple(k.name for k in part.kernels)
                for other in set(scan_module.kernels) - launched:
                    assert f"\n{other.name}(" not in text
                assert len(text) < len(whole) or launched == set(scan_module.kernels)
                assert part.dynamic_shared() == {
                    name: nbytes for name, nbytes in scan_module.dynamic_shared().items()
                    if name in {k.name for k in launched}}


def test_a_part_holds_kernels_of_its_module_only():
    one = Scan("float32", strategy="hierarchical").kernel.scan_module
    other = Scan("float32", strategy="reduce_then_scan").kernel.scan_module
    with pytest.raises(ValueError, match="has no kernel.*reduce_sections_user"):
        one.part(other.kernels)
    assert one.part(reversed(one.kernels)).kernels == one.kernels


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_describe_names_every_kernel_and_temporary(strategy, rng):
    kernel = scan("float64", LAST_NONZERO, mode="exclusive", algorithm="brent_kung",
                  section_size=16, strategy=strategy)
    for n in (0, 5, 16, 17, 300, 5000, int(rng.integers(20, 10**6))):
        plan = kernel.plan(n)
        text = plan.describe()
        assert str(plan) == text
        assert f"n={n} float64" in text and "last_nonzero" in text
        assert text.startswith("plan: exclusive scan with last_nonzero")
        assert f"strategy {plan.strategy}" in text and "brent_kung, section 16" in text
        assert ("(auto)" in text) == (strategy == "auto")
        assert f"{len(plan.launches)} launch(es), {plan.levels} level(s)" in text
        for launch in plan.launches:
            assert (f"level {launch.level} {launch.kernel.name}<<<{launch.grid}, "
                    f"{launch.block}, {launch.shared_bytes} B smem>>>(<arguments>"
                    if launch.args[0] is USER_ARGS else
                    f"{launch.kernel.name}<<<{launch.grid}, {launch.block}") in text
        for temp in plan.temporaries:
            assert f"temporary {temp.name}: {temp.nbytes} B" in text
        if n:
            assert f"bytes read: {plan.bytes_read}, written: {plan.bytes_written}" in text


@pytest.mark.parametrize("strategy", ["decoupled_lookback", "reduce_then_scan"])
def test_a_counting_plan_shows_the_spec_shared_memory_only_where_a_kernel_stages_it(strategy):
    """A counting scan's user-io kernels count ballots and stage no section, so its plan
    shows no shared memory of the spec's for them; the totals kernels (int64 sections)
    stage theirs."""
    kernel = ScanKernel(np.int64, "add", counts=True, arguments="const int *x, long long *y",
                        input_expr="x[i] > 0", output_statement="y[i] = item;",
                        strategy=strategy, section_size=256, items_per_thread=4)
    plan = kernel.plan(1 << 20)
    for launch in plan.launches:
        user = launch.kernel.io == "user"
        assert launch.shared_bytes == (None if user else kernel.spec.shared_bytes)
        assert (f"{launch.kernel.name}<<<{launch.grid}, {launch.block}>>>" in str(plan)) == user
    assert any(launch.kernel.io == "totals" for launch in plan.launches) == \
        (strategy == "reduce_then_scan")
    # Blocks of less than a warp scan the 0s and 1s as values, in sections of the spec's.
    narrow = ScanKernel(np.int64, "add", counts=True, arguments="const int *x, long long *y",
                        input_expr="x[i] > 0", output_statement="y[i] = item;",
                        strategy=strategy, section_size=32, items_per_thread=2)
    assert not narrow.scan_module.counts_by_ballots
    assert {launch.shared_bytes for launch in narrow.plan(1 << 20).launches} == \
        {narrow.spec.shared_bytes}


def test_plan_takes_numpy_integers():
    kernel = scan("uint16", "max", mode="exclusive", algorithm="coarsened", section_size=256,
                  items_per_thread=8, strategy="hierarchical").kernel
    for n in (np.int64(70000), np.uint32(70000), np.uint64(70000), np.int32(70000)):
        plan = kernel.plan(n)
        assert type(plan.n) is int and plan == make_plan(kernel.scan_module, 70000)
    assert make_plan(kernel.scan_module, np.int8(5)).n == 5


def test_the_strategies_plan_from_the_options_alone():
    """ScanModule.plan_options is what a plan reads of the module's modes: a field set on
    its own changes what the strategy plans."""
    kernel = scangen.Select(np.float32, flags=np.bool_, strategy="reduce_then_scan").kernel
    options = kernel.scan_module.plan_options
    assert options == dataclasses.replace(options) and hash(options) == hash(options)
    assert (options.spec, options.needs_last_item, options.counted_sections_per_block) == \
        (kernel.spec, False, kernel.spec.tuning.mask_sections_per_block)
    sections, n = 37, 37 * kernel.spec.section_size

    def planned(**change):
        builder = PlanBuilder(dataclasses.replace(options, **change))
        REDUCE_THEN_SCAN.build(builder, n, USER_ARGS, 0)
        return builder

    first, *_ = planned().launches
    assert first.grid == -(-sections // options.counted_sections_per_block)
    assert planned(counted_sections_per_block=1).launches[0].grid == sections
    assert planned().temporaries[0].nbytes == (sections + 1) * 8
    # with last_item, the top level's totals end with the grand total
    assert "then the grand total" in planned(needs_last_item=True).temporaries[0].what
    assert "grand total" not in planned().temporaries[0].what
    dynamic = planned(dynamic_shared=((first.kernel.name, 4096),)).launches[0]
    assert dynamic.dynamic_shared_bytes == 4096 and first.dynamic_shared_bytes == 0


@pytest.mark.parametrize("n", [-1, np.int64(-3), 2.5, "10", None, 10.0, np.float64(4.0), True,
                               False, np.True_])
def test_plan_rejects_bad_n(n):
    kernel = scan("int32", "add")
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        kernel.plan(n)
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        make_plan(kernel.kernel.scan_module, n)


def test_scan_is_a_thin_client_of_its_kernel():
    for strategy in STRATEGIES:
        for mode in MODES:
            s = Scan("uint16", "max", mode=mode, algorithm="coarsened", section_size=256,
                     items_per_thread=8, strategy=strategy)
            assert s.mode == mode and not hasattr(s.spec, "mode")
            assert s.spec is s.kernel.spec and s.spec == s.kernel.scan_module.scan
            hooks = s.kernel.scan_module.hooks
            assert hooks.input_expr == "x[i]" and not hooks.uses_last_item
            assert hooks.output_statement == ("out[i] = item;" if mode == "inclusive"
                                              else "out[i] = prev_item;")
            for n in (0, 255, 256, 257, 70000):
                assert s.plan(n) == make_plan(s.kernel.scan_module, n) == s.kernel.plan(n)
                check_plan(s.plan(n))
    # the two modes share the scan spec: only the hooks differ
    assert Scan("int32", mode="inclusive").spec == Scan("int32", mode="exclusive").spec


# --- the interpreter --------------------------------------------------------------------------

SIMULATED_SPECS = [
    # (dtype, operator, algorithm, section_size)
    ("int32", "add", "kogge_stone", 4),
    ("int16", "last_nonzero", "kogge_stone", 4),
    ("uint64", "affine_then", "kogge_stone", 4),
    ("uint64", "affine_then", "brent_kung", 8),
    ("float32", "add", "brent_kung", 8),
    ("float64", "last_nonzero", "warp_shuffle", 8),
    ("uint8", "mul", "coarsened", 8),
    ("int8", "max", "naive", 16),
    ("uint32", "bit_xor", "kogge_stone_double_buffered", 32),
]


def _id(value):
    return value if isinstance(value, (str, int)) else value.name


def simulated_sizes(section, rng):
    sizes = {1, 2, 3, section - 1, section, section + 1, 2 * section + 1, section**2 - 1,
             section**2, section**2 + 1, section**3 - 1, section**3 + 1}
    sizes |= {int(s) for s in rng.integers(2, min(section**3 * 2, 3000), 3)}
    return sorted(s for s in sizes if 0 < s <= 5000)


def small_threshold(dtype, section):
    """A tuning that makes auto switch to reduce_then_scan from section^2 elements on, so
    that both of its multi-section paths run at small n."""
    return Tuning(auto_reduce_then_scan_min_bytes=section**2 * np.dtype(dtype).itemsize)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,op,algorithm,section", SIMULATED_SPECS, ids=_id)
def test_interpreted_scan_equals_reference(dtype, op, algorithm, section, mode, strategy, rng):
    tuning = small_threshold(dtype, section) if strategy == "auto" else None
    s = scan(dtype, op, mode, algorithm=algorithm, section_size=section, strategy=strategy,
             tuning=tuning)
    # one machine for every n: the single-pass ticket counter runs on from call to call
    machine = PlanMachine(rng, ticket_start=int(rng.integers(0, 2**40)))
    chosen, deepest = set(), 0
    for k, n in enumerate(simulated_sizes(section, rng)):
        plan = s.plan(n)
        check_plan(plan)
        x = random_input(rng, dtype, op, n)
        got = machine.run(plan, ScanHooks(x, mode, in_place=k % 2 == 1))
        assert_scan_equal(got, expected(x, s.spec.operator, mode), dtype, n)
        chosen.add(plan.strategy)
        deepest = max(deepest, plan.levels)
    if strategy == "auto":
        assert chosen == {"one_section", "decoupled_lookback", "reduce_then_scan"}
    elif strategy in ("hierarchical", "reduce_then_scan") and section <= 16:
        assert deepest >= 3  # the recursion itself ran


@pytest.mark.parametrize("strategy", SINGLE_PASS)
@pytest.mark.parametrize("dtype,op", [("float64", "last_nonzero"), ("uint64", "affine_then"),
                                      ("int8", "max")], ids=_id)
def test_interpreted_persistent_single_pass(dtype, op, strategy, rng):
    """The persistent kernel (here from 40 tiles on, any number of blocks taking tiles in
    any interleaving) and the classic one, call after call on one ticket counter."""
    section = 64
    threshold = 40 * section * np.dtype(dtype).itemsize
    kinds = set()
    machine = PlanMachine(rng, ticket_start=int(rng.integers(0, 2**40)))
    for mode in MODES:
        s = scan(dtype, op, mode, algorithm="warp_shuffle", section_size=section,
                 items_per_thread=2, strategy=strategy,
                 tuning=Tuning(tile_persistent_min_bytes=threshold))
        for k, n in enumerate(simulated_sizes(section, rng) + [40 * section, 77 * section + 5]):
            plan = s.plan(n)
            check_plan(plan)
            x = random_input(rng, dtype, op, n)
            got = machine.run(plan, ScanHooks(x, mode, in_place=k % 2 == 1))
            assert_scan_equal(got, expected(x, s.spec.operator, mode), dtype, n)
            kinds.add(plan.launches[-1].kernel.name)
    assert {"scan_tiles_user", "scan_tiles_persistent_user"} <= kinds


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype,op,algorithm,section", SIMULATED_SPECS[1:6], ids=_id)
def test_interpreted_hooks_see_item_prev_item_and_last_item(dtype, op, algorithm, section,
                                                             strategy, rng):
    """item, prev_item and last_item, each against the reference (last_item where the
    strategy provides it: auto then always takes reduce_then_scan)."""
    last = strategy in TOTAL_STRATEGIES
    kernel = recorder(dtype, op, last_item=last, algorithm=algorithm, section_size=section,
                      strategy=strategy)
    # the ticket counter is 64 bits: here it wraps around during the test
    machine = PlanMachine(rng, ticket_start=2**64 - int(rng.integers(1, 100)))
    for n in simulated_sizes(section, rng):
        plan = kernel.plan(n)
        if strategy == "auto":
            assert plan.strategy == ("one_section" if n <= section else "reduce_then_scan")
        x = random_input(rng, dtype, op, n)
        got = machine.run(plan, RecordHooks(x, last_item=last))
        inclusive = expected(x, kernel.spec.operator, "inclusive")
        assert_scan_equal(got["items"], inclusive, dtype, n)
        assert_scan_equal(got["prevs"], expected(x, kernel.spec.operator, "exclusive"), dtype, n)
        if last:
            assert_scan_equal(got["lasts"], np.full(n, inclusive[-1]), dtype, n)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype,op", [("int8", "add"), ("float32", "last_nonzero"),
                                      ("uint64", "affine_then")], ids=_id)
def test_interpreted_segmented_scans(dtype, op, strategy, rng):
    """(value, head) pairs through every level: acc_t of 2, 8 and 16 bytes (packed and split
    tile status); last_item is the last segment's total."""
    last = strategy in TOTAL_STRATEGIES
    kernel = recorder(dtype, op, last_item=last, segmented=True, algorithm="kogge_stone",
                      section_size=4, strategy=strategy)
    machine = PlanMachine(rng, ticket_start=int(rng.integers(0, 2**40)))
    for n in simulated_sizes(4, rng) + [1000]:
        x = random_input(rng, dtype, op, n)
        for density in (0.0, 0.05, 0.5):
            heads = (rng.random(n) < density).astype(np.uint8)
            got = machine.run(kernel.plan(n), RecordHooks(x, heads=heads, last_item=last))
            inclusive = segmented_reference(x, heads, kernel.spec.operator, "inclusive")
            assert_scan_equal(got["items"], inclusive, dtype, n)
            assert_scan_equal(got["prevs"],
                              segmented_reference(x, heads, kernel.spec.operator, "exclusive"),
                              dtype, n)
            if last:
                assert_scan_equal(got["lasts"], np.full(n, inclusive[-1]), dtype, n)


@pytest.mark.parametrize("strategy", ["hierarchical", "reduce_then_scan"])
@pytest.mark.parametrize("mode", MODES)
def test_interpreted_plans_of_three_to_seven_levels(strategy, mode, rng):
    s = scan("uint64", "affine_then", mode, algorithm="kogge_stone", section_size=4,
             strategy=strategy)
    machine = PlanMachine(rng)
    for levels in range(3, 8):
        # the smallest and a random n with that many levels
        smallest = next(n for n in range(1, 10**5) if section_levels(n, 4) == levels)
        largest = next(n for n in range(smallest, 10**5) if section_levels(n, 4) > levels) - 1
        for n in {smallest, largest, int(rng.integers(smallest, largest + 1))}:
            plan = s.plan(n)
            assert plan.levels == levels
            x = random_input(rng, "uint64", "affine_then", n)
            np.testing.assert_array_equal(machine.run(plan, ScanHooks(x, mode)),
                                          expected(x, AFFINE, mode), err_msg=f"n={n}")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_interpreted_plan_with_default_sections(mode, strategy, rng):
    for dtype, op in [("int32", "add"), ("int16", "last_nonzero"), ("uint64", "affine_then")]:
        s = scan(dtype, op, mode, strategy=strategy)
        section = s.spec.section_size
        machine = PlanMachine(rng, ticket_start=int(rng.integers(0, 2**40)))
        for n in (section - 1, section, section + 1, 3 * section + 5,
                  int(rng.integers(section, 20 * section))):
            x = random_input(rng, dtype, op, n)
            got = machine.run(s.plan(n), ScanHooks(x, mode))
            np.testing.assert_array_equal(got, expected(x, s.spec.operator, mode),
                                          err_msg=f"{dtype} n={n}")


def test_interpreted_three_levels_of_full_sections(rng):
    s = scan("int32", "last_nonzero", "exclusive", algorithm="kogge_stone", section_size=64,
             strategy="hierarchical")
    n = 64**2 * 3 + 17
    plan = s.plan(n)
    assert plan.levels == 3
    x = random_input(rng, "int32", "last_nonzero", n)
    np.testing.assert_array_equal(run_plan(plan, ScanHooks(x, "exclusive"), rng),
                                  expected(x, LAST_NONZERO, "exclusive"))


# --- the interpreter is sharp -----------------------------------------------------------------

class PrefixOnTheRight(PlanMachine):
    """A kernel that combines a section's prefix on the wrong side."""

    def seed(self, prefix, values):
        return self.acc.combine(values, prefix)


@pytest.mark.parametrize("strategy", STRATEGIES[1:])
def test_interpreter_notices_a_prefix_on_the_wrong_side(strategy, rng):
    s = scan("uint64", "affine_then", algorithm="kogge_stone", section_size=4,
             strategy=strategy)
    for n in (70, 300):
        x = random_input(rng, "uint64", "affine_then", n)
        want = expected(x, AFFINE, "inclusive")
        np.testing.assert_array_equal(run_plan(s.plan(n), ScanHooks(x, "inclusive"), rng), want)
        wrong = PrefixOnTheRight(rng).run(s.plan(n), ScanHooks(x, "inclusive"))
        assert np.any(wrong != want)
    # and an operator whose numpy twin has its operands swapped everywhere
    swapped = Operator(AFFINE.expression, AFFINE.identity, name="affine_then",
                       reference=lambda a, b: AFFINE.reference(b, a), preamble=AFFINE.preamble)
    wrong = run_plan(scan("uint64", swapped, algorithm="kogge_stone", section_size=4,
                          strategy=strategy).plan(70), ScanHooks(x[:70], "inclusive"), rng)
    assert np.any(wrong != want[:70])


def _mutants(plan):
    """Plans with one launch removed, or one launch short of a block. (Not the first pass
    of an inner level short of a block: its last block may feed only that level's grand
    total, totals[sections], and only level 0 reads its grand total, as last_item.)"""
    for i, launch in enumerate(plan.launches):
        yield f"without launch {i}", plan.launches[:i] + plan.launches[i + 1:]
        inner_first_pass = launch.level > 0 and launch.kernel.family.name in (
            "scan_sections", "reduce_sections")
        if launch.grid > 1 and not inner_first_pass:
            short = dataclasses.replace(launch, grid=launch.grid - 1)
            yield f"launch {i} one block short", \
                plan.launches[:i] + (short,) + plan.launches[i + 1:]


#: What the interpreter says of a plan missing (part of) the launch of the output statement.
REFUSALS = re.compile(r"the output statement ran 0 times for i=\d+|\d+ tiles, but "
                      r"plan.single_pass_tiles says \d+")


def _launch_of(what, plan):
    """The launch a mutant from _mutants changed, from its description."""
    return plan.launches[int(re.search(r"launch (\d+)", what).group(1))]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_interpreter_notices_a_missing_or_short_launch(strategy, rng):
    """Every launch of a deep plan matters, and every block of it: a mutant gives another
    item, prev_item or last_item, or the interpreter refuses it (an access outside a buffer,
    a race, an output statement run twice or never, tiles that would deadlock)."""
    last = strategy in TOTAL_STRATEGIES  # the grand total flows through every level
    kernel = recorder("uint64", "affine_then", last_item=last, algorithm="kogge_stone",
                      section_size=4, strategy=strategy)
    for n in (70, 300):
        plan = kernel.plan(n)
        assert plan.levels >= (4 if last else 1)
        x = random_input(rng, "uint64", "affine_then", n)
        want = run_plan(plan, RecordHooks(x, last_item=last), rng)
        np.testing.assert_array_equal(want["items"], expected(x, AFFINE, "inclusive"))
        refused = 0
        for what, launches in _mutants(plan):
            mutant = dataclasses.replace(plan, launches=launches)
            try:
                got = run_plan(mutant, RecordHooks(x, last_item=last), rng)
            except AssertionError as err:
                # Only the launch that runs the output statement may be refused, and only
                # for what it leaves undone; any other assertion is a bug to report.
                user_launch = _launch_of(what, plan).args[0] is USER_ARGS
                if not (user_launch and REFUSALS.search(str(err))):
                    raise
                refused += 1
                continue
            assert any(np.any(got[k] != want[k]) for k in want), \
                f"{what} made no difference\n{plan}"
        assert refused > 0


def test_interpreter_refuses_short_buffers_races_and_wrong_tickets(rng):
    x = random_input(rng, "uint64", "affine_then", 70)
    hooks = ScanHooks(x, "inclusive")
    for strategy in ("hierarchical", "reduce_then_scan"):
        plan = scan("uint64", "affine_then", algorithm="kogge_stone", section_size=4,
                    strategy=strategy).plan(70)
        for i, temp in enumerate(plan.temporaries):  # every temporary one element short
            short = dataclasses.replace(temp, nbytes=temp.nbytes - 8)
            temps = plan.temporaries[:i] + (short,) + plan.temporaries[i + 1:]
            with pytest.raises(AssertionError, match="outside"):
                run_plan(dataclasses.replace(plan, temporaries=temps), hooks, rng)
    # two blocks of one launch writing one element
    plan = scan("uint64", "affine_then", section_size=4, algorithm="kogge_stone").plan(3)
    doubled = dataclasses.replace(plan.launches[0], grid=2)
    with pytest.raises(AssertionError, match="written twice"):
        run_plan(dataclasses.replace(plan, launches=(doubled,)), ScanHooks(x[:3], "inclusive"),
                 rng)
    # a launch that reads what another block of it writes: prefixes from its own io buffer
    plan = scan("uint64", "affine_then", section_size=4, algorithm="kogge_stone",
                strategy="hierarchical").plan(70)
    i, launch = next((i, l) for i, l in enumerate(plan.launches)
                     if l.kernel.name == "add_prefixes_totals")
    racy = dataclasses.replace(launch, args=launch.args[:2] + launch.args[:1] + launch.args[3:])
    with pytest.raises(AssertionError, match="in the same launch"):
        run_plan(dataclasses.replace(plan, launches=plan.launches[:i] + (racy,)
                                     + plan.launches[i + 1:]), hooks, rng)
    # the output launch run twice
    plan = scan("uint64", "affine_then", section_size=4, algorithm="kogge_stone",
                strategy="reduce_then_scan").plan(70)
    with pytest.raises(AssertionError, match="ran 2 times"):
        run_plan(dataclasses.replace(plan, launches=plan.launches + plan.launches[-1:]), hooks,
                 rng)
    # a single-pass call whose ticket counter does not start at the runtime's ticket base
    plan = scan("uint64", "affine_then", section_size=4, algorithm="kogge_stone",
                strategy="chained").plan(70)
    machine = PlanMachine(rng, ticket_start=5)
    machine.ticket += 1
    with pytest.raises(AssertionError, match="not one of 0..17"):
        machine.run(plan, hooks)
    # a plan that claims fewer tiles than it launches
    with pytest.raises(AssertionError, match="plan.single_pass_tiles says 17"):
        PlanMachine(rng).run(dataclasses.replace(plan, single_pass_tiles=17), hooks)


# --- the smallest section ---------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["hierarchical", "reduce_then_scan"])
def test_section_of_two_is_planned(strategy, rng):
    """Sections of 2: the top level's totals (sections + 1 entries) shrink only because lower
    levels scan no grand total; this once recursed forever."""
    s = scan("int32", "add", algorithm="brent_kung", section_size=2, strategy=strategy)
    for n in (1, 2, 3, 4, 10, 1000):
        plan = s.plan(n)
        check_plan(plan)
        x = random_input(rng, "int32", "add", n)
        np.testing.assert_array_equal(run_plan(plan, ScanHooks(x, "inclusive"), rng),
                                      expected(x, scangen.BUILTIN_OPERATORS["add"], "inclusive"))


@pytest.mark.parametrize("strategy", SINGLE_PASS)
def test_lookback_first_wait_where_the_tuning_asks(strategy):
    """Tuning.lookback_first_wait_ns: a sleep before the first poll of the tile status, 1100 ns
    by default; 0 renders a constant the compiler drops."""
    waits = re.compile(r"static const unsigned FIRST_WAIT_NS = (\d+);")
    classic = {"tile_persistent_min_bytes": 1 << 62}  # float32 is persistent by default
    default = scan("float32", "add", strategy=strategy, tuning=Tuning(**classic)).kernel
    asked = scan("float32", "add", strategy=strategy,
                 tuning=Tuning(lookback_first_wait_ns=0, **classic)).kernel
    assert waits.findall(default.source) == ["1100"]
    assert waits.findall(asked.source) == ["0"]
    # the classic kernel's look-back sleeps that long first; the persistent one polls at once
    assert re.search(r"tile_prefix\([^;]*FIRST_WAIT_NS\);", asked.source)
    assert "__nanosleep(first_wait_ns)" in asked.source
    persistent = scan("float64", "add", strategy=strategy).kernel.source
    assert re.search(r"tile_prefix\([^;]*epoch, 0\);", persistent)
    assert asked.scan_module != default.scan_module  # a compile of its own


def test_a_strategy_is_registered_once_under_a_name_of_its_own():
    """Each strategy's module registers it (scangen.strategies.base.register): a name
    taken, "auto" or none is refused, so no module can replace another's strategy."""
    with pytest.raises(ValueError, match="'reduce_then_scan' is empty, taken or reserved"):
        register(REDUCE_THEN_SCAN)
    for name in ("auto", ""):
        with pytest.raises(ValueError, match="is empty, taken or reserved"):
            register(type("Named", (Strategy,), {"name": name})())
    assert set(REGISTERED) == set(STRATEGIES) - {"auto"}
