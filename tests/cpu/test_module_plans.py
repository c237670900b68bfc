"""Primitives with kernels of their own (radix sort, argsort, radix digit offsets, histogram,
run-length encoding from 2^32 elements, segmented scans by offsets) plan their calls as
scans do, without a GPU: the launches a plan lists (counts, grids, arguments named as the
entry points name their parameters), the plan run on the host by numpy models of the kernels
against numpy (tests.support.module_machine), the checks of named arguments, the runtime
that launches a plan's records, and ``python -m scangen plan`` for each primitive."""
import numpy as np
import pytest

import scangen
from scangen import cli
from scangen.modules import (Checkpoint, EntryPoint, ModulePlan, ScanCall, named_arguments,
                             pack_arguments)
from scangen.plan import NULL, BufferArg, RuntimeArg
from scangen.primitives import radix
from scangen.primitives.histogram import bin_edges
from scangen.runtime import modules as runtime_modules
from scangen.strategies.base import Launch
from tests.support import (broken_offsets, digit_offsets, offset_heads, operator,
                           poison_values, random_input, random_offsets, segmented_reference)
from tests.support.module_machine import ModuleMachine


def check_launches(plan):
    """Every module launch names each parameter of its entry point once, in order, with a
    value of its kind; grids and blocks are the module's."""
    assert isinstance(plan, ModulePlan)
    for step in plan.steps:
        if isinstance(step, ScanCall):
            assert [name for name, _ in step.args] == [a.name for a in step.parameters]
            assert (step.initial is not None) == step.kernel.scan_module.hooks.initial
            continue
        if isinstance(step, Checkpoint):
            assert step.name and step.why
            continue
        entry = step.kernel
        assert isinstance(entry, EntryPoint) and isinstance(step, Launch)
        parameters = dict(entry.module.entry_points())[entry.name]
        assert [name for name, _ in step.args] == [p.name for p in parameters]
        assert named_arguments(entry, dict(step.args)) == step.args
        assert step.block == entry.module.block_size if hasattr(entry.module, "block_size") \
            else True
        assert step.grid >= 1
    return plan


def names(plan):
    return [launch.kernel.name for launch in plan.launches]


def keys_of(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = rng.normal(size=n).astype(dtype)
        x[rng.random(n) < 0.05] = np.nan
        x[rng.random(n) < 0.05] = -0.0
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


@pytest.fixture
def small_portions(monkeypatch):
    """Portions of two tiles, so that sorts of a few tiles take several onesweep launches
    per pass (plans are cached with the portion they were made for)."""
    scangen.RadixSort("uint16").plan(10 * 6144)  # cached with the usual portion
    monkeypatch.setattr(radix, "ONESWEEP_PORTION_TILES", 2)
    return 2


# --- radix sort and argsort ---------------------------------------------------------------

@pytest.mark.parametrize("dtype,values", [("uint32", None), ("int16", "float64"),
                                          ("float64", "int32")])
def test_sort_plans_a_count_then_a_onesweep_per_pass_and_portion(small_portions, rng, dtype,
                                                                 values):
    sort = scangen.RadixSort(dtype, values)
    tile, width = sort.module.tile_size, 8 * np.dtype(dtype).itemsize
    machine = ModuleMachine(rng)
    for n in [1, tile - 1, tile, tile + 1, 2 * tile, 2 * tile + 1, 5 * tile - 3]:
        plan = check_launches(sort.plan(n))
        tiles = -(-n // tile)
        portions = -(-tiles // small_portions)
        passes = width // 8
        assert names(plan) == ["radix_digit_counts"] + ["radix_onesweep"] * passes * portions
        assert plan.launches[0].grid == tiles and plan.launches[0].blocks_per_sm
        grids = [launch.grid for launch in plan.launches[1:1 + portions]]
        assert grids == [min(2, tiles - 2 * p) for p in range(portions)]
        firsts = [dict(launch.args)["first_tile"] for launch in plan.launches[1:1 + portions]]
        assert firsts == [2 * p for p in range(portions)]
        assert plan.single_pass_tiles == min(tiles, 2) * 256
        # on the host, against numpy's stable sort
        keys = keys_of(rng, dtype, n)
        arrays = {"keys": keys, "out_keys": np.zeros(n, keys.dtype)}
        if values is not None:
            arrays.update(values=keys_of(rng, values, n),
                          out_values=np.zeros(n, np.dtype(values)))
        machine.run(plan, arrays)
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(arrays["out_keys"].view(f"u{keys.itemsize}"),
                                      keys[order].view(f"u{keys.itemsize}"))
        if values is not None:
            np.testing.assert_array_equal(arrays["out_values"], arrays["values"][order])


@pytest.mark.parametrize("descending", [False, True])
def test_argsort_plan_matches_numpy(small_portions, rng, descending):
    sort = scangen.RadixSort("float32", np.int64, _index_values=True)
    tile = sort.module.tile_size
    machine = ModuleMachine(rng)
    for n in [1, 2 * tile - 1, 2 * tile + 1, 4 * tile + 7]:
        plan = check_launches(sort.plan(n, descending=descending))
        assert dict(plan.launches[1].args)["values"] is NULL
        keys = keys_of(rng, "float32", n)
        out = {"keys": keys, "out_keys": np.zeros(n, np.float32),
               "out_values": np.zeros(n, np.int64)}
        machine.run(plan, out)
        if descending:
            _, rank = np.unique(keys, return_inverse=True)
            want = np.lexsort((np.arange(n), -rank.reshape(-1)))
        else:
            want = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(out["out_values"], want)


def test_sort_of_no_keys_plans_nothing():
    plan = scangen.RadixSort("uint8").plan(0)
    assert plan.launches == () and plan.zeroed == () and "0 launch(es)" in str(plan)


@pytest.mark.parametrize("call,error,message", [
    (lambda s: s.plan(-1), ValueError, "n must be a non-negative int"),
    (lambda s: s.plan(10, begin_bit=40), ValueError, r"begin_bit=40 is outside the key's 32"),
    (lambda s: s.plan(10, begin_bit=9, end_bit=8), ValueError, "begin_bit=9 is past end_bit"),
    (lambda s: s.plan(10, descending="yes"), TypeError, "descending"),
])
def test_sort_plan_refuses_bad_requests(call, error, message):
    with pytest.raises(error, match=message):
        call(scangen.RadixSort("uint32"))


# --- radix digit offsets ------------------------------------------------------------------

@pytest.mark.parametrize("bits,shift", [(1, 0), (5, 3), (8, 24)])
def test_digit_offsets_plan_tile_counts_a_scan_and_tile_places(rng, bits, shift):
    offsets = scangen.RadixDigitOffsets("uint32", bits)
    tile = offsets.modules[0].tile_size
    machine = ModuleMachine(rng)
    for n in [1, tile - 1, tile, tile + 1, 3 * tile + 5]:
        plan = check_launches(offsets.plan(n, shift))
        tiles = -(-n // tile)
        assert names(plan)[0] == "radix_tile_counts" and names(plan)[-1] == "radix_tile_places"
        assert [launch.grid for launch in plan.launches if launch.kernel.name.startswith(
            "radix_tile")] == [tiles, tiles]
        scan = plan.steps[1]
        assert isinstance(scan, ScanCall) and scan.n == (1 << bits) * tiles
        assert scan.args == (("tile_counts", BufferArg("tile_bases")),)
        keys = keys_of(rng, "uint32", n)
        out = {"keys": keys, "dest": np.zeros(n, np.int64),
               "digit_start": np.zeros(1 << bits, np.int64)}
        machine.run(plan, out)
        want_dest, want_start = digit_offsets(keys, shift, bits)
        np.testing.assert_array_equal(out["dest"], want_dest)
        np.testing.assert_array_equal(out["digit_start"], want_start)


@pytest.mark.parametrize("dtype,bits,shift", [("uint32", 12, 4), ("int16", 16, 0),
                                              ("float64", 9, 58)])
def test_wide_digit_offsets_plan_an_argsort_then_the_places(small_portions, rng, dtype,
                                                            bits, shift):
    offsets = scangen.RadixDigitOffsets(dtype, bits)
    passes_module, places = offsets.modules
    tile = passes_module.tile_size
    width = 8 * np.dtype(dtype).itemsize
    machine = ModuleMachine(rng)
    for n in [1, 2 * tile, 2 * tile + 1]:
        plan = check_launches(offsets.plan(n, shift, descending=True))
        passes = -(-(min(shift + bits, width) - shift) // 8)
        portions = -(-(-(-n // tile)) // small_portions)
        assert names(plan) == ["radix_digit_counts"] + ["radix_onesweep"] * passes * portions \
            + ["radix_places_from_order", "radix_digit_starts"]
        last = dict(plan.launches[-3].args)
        assert (last["keys_out"], last["values_out"]) == (BufferArg("sorted"),
                                                          BufferArg("order"))
        keys = keys_of(rng, dtype, n)
        out = {"keys": keys, "dest": np.zeros(n, np.int64),
               "digit_start": np.zeros(1 << bits, np.int64)}
        machine.run(plan, out)
        want_dest, want_start = digit_offsets(keys, shift, bits, True)
        np.testing.assert_array_equal(out["dest"], want_dest)
        np.testing.assert_array_equal(out["digit_start"], want_start)


def test_digit_offsets_of_no_keys_zero_the_starts():
    for bits in (4, 12):
        plan = scangen.RadixDigitOffsets("uint16", bits).plan(0)
        assert plan.launches == () and plan.zeroed == (("digit_start", 8 << bits),)


# --- histogram ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "int32", "float32", "float64"])
def test_histogram_plan_zeroes_the_counts_and_walks_the_tiles(rng, dtype):
    hist = scangen.Histogram(dtype)
    tile = hist.module.tile_size
    machine = ModuleMachine(rng)
    for n, bins in [(0, 3), (1, 1), (tile - 1, 10), (tile + 1, 7), (3 * tile, 100)]:
        plan = check_launches(hist.plan(n, bins))
        assert plan.zeroed == (("counts", 8 * bins),)
        assert names(plan) == (["histogram_counts"] if n else [])
        if not n:
            continue
        launch = plan.launches[0]
        assert launch.grid == -(-n // tile) and launch.blocks_per_sm
        assert dict(launch.args)["low"] == RuntimeArg("low")
        x = (rng.random(n) * 120 - 10).astype(dtype)
        low, high, edges = bin_edges(bins, (0, 100), hist.module.edge_dtype)
        out = {"x": x, "edges": edges, "counts": rng.integers(0, 9, bins)}  # poisoned
        machine.run(plan, out, dict(low=low, high=high, span=high - low,
                                    scale_in_bins=bins / (high - low), margin_in_bins=0.5))
        np.testing.assert_array_equal(out["counts"], np.histogram(x, bins, (0, 100))[0])


def test_histogram_plan_checks_its_bins():
    with pytest.raises(TypeError, match="bins must be an int"):
        scangen.Histogram("float32").plan(10, 2.5)
    with pytest.raises(ValueError, match="bins must be at least 1"):
        scangen.Histogram("float32").plan(10, 0)


# --- run-length encoding from 2^32 elements ---------------------------------------------

def test_run_length_encode_plans_heads_then_lengths_on_the_host(rng, monkeypatch):
    """From 2^32 elements the heads scan, then run_lengths over the runs it counted; the
    plan's records run on the host for a small n (the boundary lowered to 10)."""
    from scangen.primitives import compaction

    monkeypatch.setattr(compaction, "_ONE_PASS_BELOW", 10)
    rle = scangen.RunLengthEncode("int32")
    assert rle.plan(9).scan_module == rle.kernel.scan_module
    plan = check_launches(rle.plan(5000))
    assert [type(step).__name__ for step in plan.steps] == ["ScanCall", "Launch"]
    x = rng.integers(0, 3, 5000).astype(np.int32)
    out = {"x": x, "values": np.zeros(5000, np.int32), "starts": np.zeros(5000, np.int64),
           "count": np.zeros(1, np.int64), "counts": np.zeros(5000, np.int64)}
    ModuleMachine(rng).run(plan, out)
    heads = np.flatnonzero(np.diff(x, prepend=x[0] - 1))
    runs = heads.size
    assert out["count"][0] == runs
    np.testing.assert_array_equal(out["values"][:runs], x[heads])
    np.testing.assert_array_equal(out["counts"][:runs], np.diff(np.append(heads, 5000)))
    # no elements (the two kernels asked for at every size): no runs, nothing launched
    monkeypatch.setattr(compaction, "_ONE_PASS_BELOW", 0)
    assert rle.plan(0).zeroed == (("count", 8),) and not rle.plan(0).launches


# --- segmented scans by offsets ----------------------------------------------------------

@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_segmented_offsets_plan_heads_then_the_scan_by_head_bits(index_dtype):
    """More segments than sections: the head bits zeroed (a temporary of a 4-byte word
    for every 32 elements), segment_heads over the call's offsets, then the scan by head
    bits (its plan's launches) over them; nothing for no elements."""
    seg = scangen.SegmentedScan(np.float32)
    bits = seg.bits_kernel
    section = bits.spec.section_size
    module = seg.heads_module(index_dtype)
    for n in [1, 255, 256, 257, section - 1, section, section + 1, 5 * section + 3,
              section ** 2 + 1]:
        segments = n + 1  # more than sections of any size (empty ones among them)
        plan = check_launches(seg.plan(n, form="offsets", index_dtype=index_dtype,
                                       segments=segments))
        heads, checked, scan = plan.steps
        assert isinstance(heads, Launch) and isinstance(scan, ScanCall)
        assert checked == Checkpoint("offsets checked", checked.why)
        assert heads.kernel == EntryPoint(module, "segment_heads")
        assert dict(heads.args) == dict(offsets=BufferArg("offsets"), heads=BufferArg("heads"),
                                        verdict=BufferArg("verdict"),
                                        offset_count=RuntimeArg("offset_count"), n=n)
        assert heads.grid == -(-(n + 1) // 256) and heads.block == 256 and heads.blocks_per_sm
        words = 4 * ((n + 31) // 32)
        assert plan.zeroed == (("heads", words),)
        (temporary,) = plan.temporaries
        assert (temporary.name, temporary.nbytes, temporary.persistent) == \
            ("heads", words, False)
        assert scan.kernel is bits and scan.n == n and scan.initial is None
        assert dict(scan.args) == dict(x=BufferArg("x"), heads=BufferArg("heads"),
                                       out=BufferArg("out"))
        assert plan.launches[1:] == bits.plan(n).launches
        text = str(plan)
        assert text.startswith(f"plan: segmented inclusive scan by {np.dtype(index_dtype)} "
                               f"offsets through head bits over n={n}")
        assert f"temporary heads: {words} B" in text
        assert f"zeroed first: heads ({words} B)" in text
        assert "segment_heads<<<" in text
        assert "scan 'segmented inclusive scan by head bits'" in text
        assert text.index("segment_heads<<<") < text.index("checkpoint 'offsets checked'") \
            < text.index("scan 'segmented")
        assert seg.plan(n, form="offsets", index_dtype=index_dtype,
                        segments=segments) is plan  # kept
    empty = seg.plan(0, form="offsets", index_dtype=index_dtype)
    assert empty.steps == () and empty.zeroed == () and empty.temporaries == ()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_segmented_offsets_plan_in_segment_tiles(index_dtype):
    """No more segments than sections: segment_heads checking only, its checkpoint, the
    layout's exclusive scan over segments + 1 indices into two temporaries of 8 bytes an
    index, then one scan_segments launch of as many tiles as the segments may take."""
    seg = scangen.SegmentedScan(np.float64, "max", reverse=True)
    tiles = seg.segment_tiles_kernel
    section = tiles.spec.section_size
    assert seg.kernel("offsets", index_dtype) is tiles
    layout = seg.layout_kernel(index_dtype)
    for n, segments in [(1, 1), (section, 1), (section + 1, 2), (40 * section + 3, 41),
                        (40 * section + 3, 7)]:
        plan = check_launches(seg.plan(n, form="offsets", index_dtype=index_dtype,
                                       segments=segments))
        assert seg.plan(n, form="offsets", index_dtype=index_dtype,
                        segments=np.int64(segments)) is plan  # kept, for numpy ints too
        heads, checked, lay, scan = plan.steps
        assert heads.kernel == EntryPoint(seg.heads_module(index_dtype), "segment_heads")
        assert dict(heads.args)["heads"] is NULL and checked.name == "offsets checked"
        assert heads.grid == -(-(segments + 1) // 256)
        assert lay.kernel is layout and lay.n == segments + 1
        assert dict(lay.args) == dict(offsets=BufferArg("offsets"), elements=n,
                                      segment_tiles=BufferArg("segment_tiles"),
                                      segment_starts=BufferArg("segment_starts"))
        assert scan.kernel is tiles and scan.layout == segments and scan.n == n
        assert dict(scan.args) == dict(x=BufferArg("x"), out=BufferArg("out"),
                                       segment_tiles=BufferArg("segment_tiles"),
                                       segment_starts=BufferArg("segment_starts"),
                                       segments=segments)
        (launch,) = scan.plan.launches
        assert launch.kernel.name == "scan_segments_user"
        assert launch.grid == min(-(-n // section) + segments, n) == scan.plan.single_pass_tiles
        assert {t.name: t.nbytes for t in plan.temporaries} == \
            {"segment_tiles": 8 * (segments + 1), "segment_starts": 8 * (segments + 1)}
        assert plan.zeroed == ()
        assert f"{segments} segment(s), each in tiles of {section}" in str(plan)
        own = str(scan.plan)
        assert f"as {segments} segment(s), each in tiles of its own" in own
        assert scan.plan.strategy == "segment tiles" and "strategy segment tiles," in own
    # one more segment than sections: head bits
    n = 3 * section
    assert len(seg.plan(n, form="offsets", segments=3).steps) == 4
    assert seg.plan(n, form="offsets", segments=4).steps[-1].kernel is seg.bits_kernel


def test_segmented_offsets_plan_passes_the_calls_initial_value():
    seg = scangen.SegmentedScan(np.int32, "max", mode="exclusive", initial=-5)
    for segments, title in [(1, "by offsets, each segment in tiles of its own"),
                            (1001, "by head bits")]:
        plan = check_launches(seg.plan(1000, form="offsets", segments=segments))
        assert plan.steps[-1].initial == RuntimeArg("initial")
        assert "initial=<initial>" in str(plan)
        assert f"scan 'segmented exclusive scan {title}'" in str(plan)


@pytest.mark.parametrize("strategy", scangen.STRATEGIES)
@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("dtype,op_name", [("int32", "add"), ("uint64", "affine_then")])
def test_segmented_offsets_plan_runs_on_the_host(rng, strategy, mode, dtype, op_name):
    """The plan on the host (the heads kernel's model, then the scan by head bits, its own
    plan interpreted) against the segmented reference: one segment, a segment per element,
    random segments with empty ones, for sizes around sections of 4."""
    op = operator(op_name)
    seg = scangen.SegmentedScan(dtype, op, mode=mode, strategy=strategy,
                                algorithm="kogge_stone", section_size=4)
    machine = ModuleMachine(rng)
    for n in [1, 3, 4, 5, 15, 16, 17, 67]:
        x = random_input(rng, dtype, op_name, n)
        for index_dtype in (np.int32, np.int64):
            plan = seg.plan(n, form="offsets", index_dtype=index_dtype)
            for offsets in random_offsets(rng, n, index_dtype):
                verdict = np.zeros(1, np.int64)
                arrays = {"x": x, "offsets": offsets, "out": poison_values(rng, dtype, n),
                          "verdict": verdict}
                machine.run(plan, arrays, {"offset_count": offsets.size, "initial": None})
                assert [name for name, _ in machine.ran] == \
                    ["segment_heads", "checkpoint offsets checked",
                     f"segmented {mode} scan by head bits"]
                assert verdict[0] == 0, f"valid offsets {offsets} found bad"
                want = segmented_reference(x, offset_heads(offsets, n), op, mode)
                np.testing.assert_array_equal(arrays["out"], want,
                                              err_msg=f"n={n} offsets={offsets}")


@pytest.mark.parametrize("mode", scangen.MODES)
def test_segmented_offsets_plan_starts_every_segment_from_initial(rng, mode):
    """The constructor's initial value, and a call's in its place."""
    op = operator("affine_then")
    default, other = random_input(rng, "uint64", "affine_then", 2)
    seg = scangen.SegmentedScan("uint64", op, mode=mode, algorithm="kogge_stone",
                                section_size=4, initial=default)
    machine = ModuleMachine(rng)
    for n in [1, 5, 17, 67]:
        x = random_input(rng, "uint64", "affine_then", n)
        plan = seg.plan(n, form="offsets")
        for offsets in random_offsets(rng, n, np.int64):
            for given, initial in ((None, default), (other, other)):
                arrays = {"x": x, "offsets": offsets, "out": poison_values(rng, "uint64", n),
                          "verdict": None}
                machine.run(plan, arrays, {"offset_count": offsets.size, "initial": given})
                want = segmented_reference(x, offset_heads(offsets, n), op, mode,
                                           initial=initial)
                np.testing.assert_array_equal(arrays["out"], want)


def test_segmented_offsets_plan_sets_the_verdict_for_bad_offsets(rng):
    """The plan binds the call's verdict to the heads kernel, whose model sets it for
    every way offsets can break the CSR rules (valid ones leave it: the test above); with
    none bound (a call that does not check) the plan runs the same."""
    seg = scangen.SegmentedScan(np.int32, algorithm="kogge_stone", section_size=4)
    machine = ModuleMachine(rng)
    for n in [1, 4, 5, 17, 67]:
        x = random_input(rng, "int32", "add", n)
        for index_dtype in (np.int32, np.int64):
            plan = seg.plan(n, form="offsets", index_dtype=index_dtype)
            for good in random_offsets(rng, n, index_dtype):
                for bad, message in broken_offsets(rng, good, n):
                    for verdict in (np.zeros(1, np.int64), None):
                        arrays = {"x": x, "offsets": bad, "out": np.zeros(n, np.int32),
                                  "verdict": verdict}
                        machine.run(plan, arrays, {"offset_count": bad.size,
                                                   "initial": None})
                        if verdict is not None:
                            assert verdict[0] == 1, f"n={n}: {bad} ({message}) passed"


# --- named arguments ----------------------------------------------------------------------

ENTRY = EntryPoint(radix.WideDigitPlacesModule(np.dtype("uint32")), "radix_digit_starts")
GOOD = dict(sorted=BufferArg("sorted"), digit_start=BufferArg("digit_start"), n=10, shift=0,
            mask=255, flip=0)


@pytest.mark.parametrize("change,error,message", [
    (lambda a: a.pop("shift"), TypeError, r"radix_digit_starts: missing 'shift' \(its "
                                           r"parameters: sorted, digit_start, n, shift"),
    (lambda a: a.update(offset=3), TypeError, r"radix_digit_starts: no parameter 'offset'"),
    (lambda a: a.update(n=BufferArg("n")), TypeError,
     r"argument 'n' \(long long n\) is a scalar, not a buffer: n"),
    (lambda a: a.update(sorted=7), TypeError,
     r"argument 'sorted' \(const radix_key_t \*sorted\) is a pointer: it takes a buffer"),
    (lambda a: a.update(shift=2.0), TypeError, r"argument 'shift' \(int shift\) takes an int"),
    (lambda a: a.update(shift=True), TypeError, r"argument 'shift' \(int shift\) takes an int"),
    (lambda a: a.update(mask=-1), ValueError, r"argument 'mask' .* -1 does not fit uint32"),
])
def test_named_arguments_refuse_missing_extra_and_mistyped(change, error, message):
    args = dict(GOOD)
    change(args)
    with pytest.raises(error, match=message):
        named_arguments(ENTRY, args)
    with pytest.raises(error, match=message):
        pack_arguments(ENTRY, args, {"sorted": 0x1000, "digit_start": 0x2000})


def test_named_arguments_refuse_an_argument_given_twice():
    with pytest.raises(TypeError, match="argument 'n' is given twice"):
        named_arguments(ENTRY, list(GOOD.items()) + [("n", 3)])


def test_pack_puts_arguments_in_the_entry_points_order():
    shuffled = dict(reversed(list(GOOD.items())))
    packed = pack_arguments(ENTRY, shuffled, {"sorted": 0x1000, "digit_start": 0x2000})
    assert packed == (0x1000, 0x2000, 10, 0, 255, 0)
    assert [type(v) for v in packed[2:]] == [np.int64, np.int32, np.uint32, np.uint64]
    with pytest.raises(KeyError, match="names buffer 'sorted', which the call does not bind"):
        pack_arguments(ENTRY, GOOD, {"digit_start": 0x2000})


def test_a_launch_of_an_unknown_entry_point_is_refused():
    module = radix.WideDigitPlacesModule(np.dtype("uint32"))
    with pytest.raises(ValueError, match="has no entry point 'radix_onesweep'"):
        module.launch("radix_onesweep", 1, 256, {}, reads=0, writes=0, why="")
    with pytest.raises(TypeError, match="radix_digit_starts: missing 'flip'"):
        module.launch("radix_digit_starts", 1, 256, {k: v for k, v in GOOD.items()
                                                     if k != "flip"},
                      reads=0, writes=0, why="")


# --- the runtime launches the plan's records ----------------------------------------------

class FakeArray:
    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes, self.size = ptr, nbytes, nbytes


def test_runtime_launches_each_record_with_its_arguments_packed(monkeypatch, small_portions):
    """ModuleRuntime.run zeroes what the plan zeroes, binds temporaries and the call's
    arrays by name, gives each single-pass launch its own tickets and epoch, caps
    grid-stride grids, and passes each launch's arguments in its entry point's order."""
    events = []
    allocations = iter(range(0x100000, 0x10000000, 0x100000))

    class Memory:
        def empty(self, nbytes, dtype):
            return FakeArray(next(allocations), nbytes)

    class Status:
        def __init__(self, tile_state):
            self.ticket_base, self.epoch = 0, 0

        def bind_state(self, tiles, stream):
            events.append(("status", tiles))
            return {"ticket": 0xA000, "status": 0xB000}

        def next_single_pass_call(self, tickets, stream):
            self.epoch += 1
            base, self.ticket_base = self.ticket_base, self.ticket_base + tickets
            return base, self.epoch

    class Compiled:
        pass

    bound = []

    def launch_function(compiled, name, stream, shared=0):
        bound.append(name)
        return lambda grid, block, stream, *args: events.append((name, grid[0], args))

    monkeypatch.setattr(runtime_modules, "_gpuarray", lambda: Memory())
    monkeypatch.setattr(runtime_modules, "StreamScratch", Status)
    monkeypatch.setattr(runtime_modules, "launch_function", launch_function)
    monkeypatch.setattr(runtime_modules, "wave_grid", lambda tiles, per_sm: min(tiles, 3))
    monkeypatch.setattr(runtime_modules, "memset_d8_async",
                        lambda address, value, nbytes, stream: events.append(
                            ("zero", address, nbytes)))
    monkeypatch.setattr(runtime_modules, "stream_key", lambda stream: (0xC0, 0))
    monkeypatch.setattr(radix.RadixPassesModule, "compiled", lambda self: Compiled())
    sort = scangen.RadixSort("uint16")
    n = 5 * sort.module.tile_size
    plan = sort.plan(n)
    arrays = {"keys": FakeArray(0x1000, 2 * n), "values": None,
              "out_keys": FakeArray(0x9000000, 2 * n), "out_values": None}
    sort._runtime.run(plan, arrays, None)
    scratch = sort._runtime.scratch(None)
    counts = scratch.arrays["digit_counts"].ptr
    assert events[0] == ("status", 2 * 256)
    assert events[1] == ("zero", counts, 2 * 256 * 8)
    name, grid, args = events[2]
    assert (name, grid) == ("radix_digit_counts", 3)  # capped by the wave
    assert args == (0x1000, counts, n, 0, 2, 16, 0)
    sweeps = [e for e in events if e[0] == "radix_onesweep"]
    assert [grid for _, grid, _ in sweeps] == [2, 2, 1] * 2
    ticket_bases = [args[6] for _, _, args in sweeps]
    epochs = [args[8] for _, _, args in sweeps]
    assert ticket_bases == [0, 2, 4, 5, 7, 9] and epochs == [1, 2, 3, 4, 5, 6]
    spare = scratch.arrays["spare_keys"].ptr
    first, last = sweeps[0][2], sweeps[-1][2]
    assert first[:2] == (0x1000, spare) and last[:2] == (spare, 0x9000000)
    assert first[2] == counts and last[2] == counts + 256 * 8  # the second pass's counts
    assert (first[5], first[7]) == (0xA000, 0xB000)  # ticket, status
    # Called again, each launch is bound already: only the call's values change.
    launches = len(bound)
    events.clear()
    sort._runtime.run(plan, arrays, None)
    assert len(bound) == launches
    sweeps = [e for e in events if e[0] == "radix_onesweep"]
    assert [args[6] for _, _, args in sweeps] == [10, 12, 14, 15, 17, 19]
    assert [args[8] for _, _, args in sweeps] == [7, 8, 9, 10, 11, 12]


def test_runtime_runs_a_scan_step_with_the_calls_initial_value(monkeypatch):
    """A plan's scan gets the buffers by name and the call's initial value (None: the
    kernel's own), which the kernel converts itself; the heads are zeroed first; the
    checkpoint records its event (one per thread and stream, kept) on the call's stream,
    and run returns it by name."""
    events = []

    class Event:
        def record(self, stream):
            events.append(("record", self, stream))

    class Memory:
        def empty(self, nbytes, dtype):
            return FakeArray(0x700000, nbytes)

    monkeypatch.setattr(runtime_modules, "_gpuarray", lambda: Memory())
    monkeypatch.setattr(runtime_modules, "launch_function",
                        lambda compiled, name, stream, shared=0:
                        lambda grid, block, stream, *args: events.append((name, args)))
    monkeypatch.setattr(runtime_modules, "wave_grid", lambda tiles, per_sm: tiles)
    monkeypatch.setattr(runtime_modules, "memset_d8_async",
                        lambda address, value, nbytes, stream: events.append(
                            ("zero", address, nbytes)))
    monkeypatch.setattr(runtime_modules, "stream_key", lambda stream: (0xC0, 0))
    monkeypatch.setattr(runtime_modules, "StreamEvent", Event)
    monkeypatch.setattr(type(scangen.SegmentedScan(np.int32).heads_module()), "compiled",
                        lambda self: None)
    seg = scangen.SegmentedScan(np.int32, initial=3)
    monkeypatch.setattr(seg.bits_kernel, "launch_converted",
                        lambda values, n, stream, initial=None, layout=None:
                        events.append(("scan", values, n, initial)))
    arrays = {"x": FakeArray(0x1000, 400), "offsets": FakeArray(0x2000, 24),
              "out": FakeArray(0x3000, 400)}
    recorded = []
    for given, verdict in ((None, FakeArray(0x5000, 8)), (7, None)):
        events.clear()
        heads_plan = seg.plan(100, form="offsets", segments=101)  # more than sections
        got = seg._runtime.run(heads_plan, {**arrays, "verdict": verdict},
                               None, dict(offset_count=3, initial=given))
        (name, event), = got.items()
        recorded.append(event)
        assert name == "offsets checked"
        assert events == [("zero", 0x700000, 16),
                          ("segment_heads", (0x2000, 0x700000, 0x5000 if verdict else 0, 3, 100)),
                          ("record", event, None),
                          ("scan", (0x1000, 0x700000, 0x3000), 100, given)]
    assert recorded[0] is recorded[1]


# --- the command line ---------------------------------------------------------------------

@pytest.mark.parametrize("argv,build", [
    (["radix_sort", "--dtype", "uint32"], lambda: scangen.RadixSort("uint32").plan(100_000)),
    (["argsort", "--dtype", "float64"],
     lambda: scangen.RadixSort("float64", np.int64, _index_values=True).plan(100_000)),
    (["radix_digit_offsets", "--dtype", "int16"],
     lambda: scangen.RadixDigitOffsets("int16").plan(100_000)),
    (["radix_digit_offsets", "--dtype", "int16", "--bits", "12"],
     lambda: scangen.RadixDigitOffsets("int16", 12).plan(100_000)),
    (["histogram", "--dtype", "float32", "--bins", "33"],
     lambda: scangen.Histogram("float32").plan(100_000, 33)),
    (["histogram", "--dtype", "int8"], lambda: scangen.Histogram("int8").plan(100_000)),
    (["select", "--predicate", "x > 0"],
     lambda: scangen.Select("float32", "x > 0").plan(100_000)),
    (["unique", "--dtype", "int64"], lambda: scangen.Unique("int64").plan(100_000)),
    (["run_length_encode"], lambda: scangen.RunLengthEncode("float32").plan(100_000)),
    (["partition", "--predicate", "x < 1"],
     lambda: scangen.Partition("float32", "x < 1").plan(100_000)),
])
def test_cli_plans_every_primitive(capsys, argv, build):
    assert cli.main(["plan", "--n", "100000", *argv]) == 0
    out, err = capsys.readouterr()
    assert out == str(build()) + "\n" and not err


@pytest.mark.parametrize("argv,message", [
    (["select"], "select needs --predicate"),
    (["unique", "--bins", "4"], "--bins belongs to histogram, not unique"),
    (["radix_sort", "--algorithm", "naive"], "radix_sort takes no --algorithm"),
    (["histogram", "--bins", "0"], "bins must be at least 1"),
    (["radix_digit_offsets", "--bits", "17"], "1..16"),
])
def test_cli_plan_refuses_what_a_primitive_does_not_take(capsys, argv, message):
    assert cli.main(["plan", "--n", "100", *argv]) == 2
    assert message in capsys.readouterr().err


def test_module_plan_prints_its_launches_and_temporaries():
    text = str(scangen.RadixSort("uint32").plan(100_000))
    assert text.startswith("plan: radix sort of uint32 keys, bits 0..32 over n=100000")
    assert "radix_digit_counts<<<min(17, 4 per SM), 256>>>(keys=keys, counts=digit_counts" \
        in text
    assert "digit_counts=digit_counts+2048" in text and "ticket_base=<ticket_base>" in text
    assert "temporary status:" in text and "kept between calls" in text
