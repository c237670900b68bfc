"""SegmentedScan on the GPU: flags, offsets and keys, non-commutative operators, empty and
single-element segments, both modes, reverse, every strategy; initial= starting every
segment (a struct's too); random CSR offsets of every shape around the tuned section."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.arith import ceil_div
from scangen.spec import MODES, STRATEGIES

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, assert_guard_untouched, broken_offsets,
                           exact_affine_pairs, guarded_output, offset_heads, operator,
                           precompile, random_input, random_offsets, segmented_reference)

TYPES = [("uint64", "affine_then"), ("int32", "last_nonzero"), ("float64", "max")]
CASES = list(itertools.product(STRATEGIES, MODES, TYPES, (False, True)))
SIZES = [1, 2, 63, 64, 65, 4097, 70_001]


def build(strategy, mode, dtype, op_name, reverse, **options):
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    return scangen.SegmentedScan(dtype, op, mode=mode, reverse=reverse, strategy=strategy,
                                 section_size=64, **options)


def values(rng, dtype, op_name, n):
    if op_name == "affine_pairs":
        return exact_affine_pairs(rng, n)
    return random_input(rng, dtype, op_name, n)


#: initial= with a non-commutative operator on 8 bytes, and on a 16-byte struct (by bytes).
INITIAL_TYPES = [("uint64", "affine_then"), (AFFINE_PAIR, "affine_pairs")]
INITIAL_CASES = list(itertools.product(STRATEGIES, MODES, INITIAL_TYPES, (False, True)))


#: The offsets form on its own, with the tuned section: a non-commutative operator on 4
#: bytes, and a 16-byte struct with initial=.
OFFSET_TYPES = [("int32", "last_nonzero"), (AFFINE_PAIR, "affine_pairs")]
OFFSET_CASES = list(itertools.product(STRATEGIES, MODES, OFFSET_TYPES, (False, True)))


#: The offsets form in segment tiles (no more segments than sections), without initial=
#: (OFFSET_CASES have it): a non-commutative operator on 8 bytes, and float32 adds.
TILE_CASES = list(itertools.product(MODES, [("uint64", "affine_then"), ("float32", "add")],
                                    (False, True)))


def build_for_offsets(strategy, mode, dtype, op_name, reverse, initial=None):
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    return scangen.SegmentedScan(dtype, op, mode=mode, reverse=reverse, strategy=strategy,
                                 initial=initial)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = []
    for strategy, mode, (dtype, op_name), reverse in OFFSET_CASES:
        initial = values(np.random.default_rng(0), dtype, op_name, 1)[0] \
            if op_name == "affine_pairs" else None
        seg = build_for_offsets(strategy, mode, dtype, op_name, reverse, initial)
        kernels += [seg.kernel("offsets"), seg.bits_kernel, seg.heads_module(np.int32),
                    seg.heads_module(np.int64)]
        if seg.segment_tiles_kernel is not None:
            kernels += [seg.layout_kernel(np.int32), seg.layout_kernel(np.int64)]
    for mode, (dtype, op_name), reverse in TILE_CASES:
        seg = build_for_offsets("auto", mode, dtype, op_name, reverse)
        kernels += [seg.segment_tiles_kernel, seg.layout_kernel(np.int32),
                    seg.layout_kernel(np.int64)]
    for strategy, mode, (dtype, op_name), reverse in CASES:
        seg = build(strategy, mode, dtype, op_name, reverse)
        kernels += [seg.kernel("flags", np.dtype(np.uint8)),
                    seg.kernel("keys", np.dtype(np.int32)),
                    seg.kernel("offsets", np.dtype(np.int64))]
    for strategy, mode, (dtype, op_name), reverse in INITIAL_CASES:
        seg = build(strategy, mode, dtype, op_name, reverse,
                    initial=values(np.random.default_rng(0), dtype, op_name, 1)[0])
        kernels += [seg.kernel("flags", np.dtype(np.bool_)),
                    seg.kernel("keys", np.dtype(np.int64)),
                    seg.kernel("offsets", np.dtype(np.int32))]
    for strategy, mode, (dtype, op_name), reverse in ROW_CASES:
        seg = build(strategy, mode, dtype, op_name, reverse, initial=values(
            np.random.default_rng(0), dtype, op_name, 1)[0])
        kernels += [seg.rows_kernel("flags"), seg.rows_kernel("keys", np.int32),
                    seg.kernel("flags"), seg.kernel("keys", np.int32)]
    precompile(kernels)


@pytest.mark.parametrize("strategy,mode,types,reverse", CASES)
def test_flags_offsets_and_keys(gpu, rng, strategy, mode, types, reverse):
    dtype, op_name = types
    op = operator(op_name)
    seg = build(strategy, mode, dtype, op_name, reverse)
    for n in SIZES:
        x = random_input(rng, dtype, op_name, n)
        density = rng.choice([0.0, 0.01, 0.3, 1.0])  # one segment .. single-element segments
        heads = (rng.random(n) < density).astype(np.uint8)
        want = segmented_reference(x, heads, op, mode, reverse=reverse)
        x_gpu = gpu.to_gpu(x)
        out = guarded_output(gpu, rng, n, dtype)
        seg(x_gpu, out.out, flags=gpu.to_gpu(heads))
        np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                      err_msg=f"flags n={n}")
        # CSR offsets with empty segments among them (repeated starts)
        starts = np.flatnonzero(heads)
        offsets = np.concatenate([[0], np.repeat(starts[starts > 0], 2), [n]]).astype(np.int64)
        out = guarded_output(gpu, rng, n, dtype)
        seg(x_gpu, out.out, offsets=gpu.to_gpu(offsets))
        np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                      err_msg=f"offsets n={n}")
        keys = np.cumsum(heads).astype(np.int32) * 7 - 3  # runs of equal keys
        out = guarded_output(gpu, rng, n, dtype)
        seg(x_gpu, out.out, keys=gpu.to_gpu(keys))
        np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                      err_msg=f"keys n={n}")


@pytest.mark.parametrize("strategy,mode,types,reverse", INITIAL_CASES,
                         ids=[f"{s}-{m}-{t[1]}-{'reverse' if r else 'forward'}"
                              for s, m, t, r in INITIAL_CASES])
def test_every_segment_starts_from_initial(gpu, rng, strategy, mode, types, reverse):
    """The constructor's initial value and a call's, by flags, offsets and keys."""
    dtype, op_name = types
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    default = values(rng, dtype, op_name, 1)[0]
    seg = build(strategy, mode, dtype, op_name, reverse, initial=default)
    for n in SIZES:
        x = values(rng, dtype, op_name, n)
        heads = (rng.random(n) < rng.choice([0.0, 0.01, 0.3, 1.0])).astype(bool)
        starts = np.flatnonzero(heads)
        offsets = np.concatenate([[0], starts[starts > 0], [n]]).astype(np.int32)
        keys = np.cumsum(heads).astype(np.int64)
        x_gpu = gpu.to_gpu(x)
        for initial in (None, values(rng, dtype, op_name, 1)[0]):
            want = segmented_reference(x, heads, op, mode, reverse=reverse,
                                       initial=default if initial is None else initial)
            for form, index in (("flags", heads), ("offsets", offsets), ("keys", keys)):
                out = guarded_output(gpu, rng, n, dtype)
                seg(x_gpu, out.out, initial=initial, **{form: gpu.to_gpu(index)})
                np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                              err_msg=f"{form} n={n}")


#: Shapes scanned along the last axis: rows shorter than, as long as and longer than a
#: section (64), many short rows, a row of one, three dimensions, one row.
ROW_SHAPES = [(5, 7), (3, 64), (4, 65), (2, 3 * 64 + 5), (300, 3), (6, 1), (2, 3, 50),
              (1, 700)]
ROW_CASES = list(itertools.product(("auto", "decoupled_lookback", "hierarchical"), MODES,
                                   [("uint64", "affine_then"), ("int32", "last_nonzero")],
                                   (False, True)))


@pytest.mark.parametrize("strategy,mode,types,reverse", ROW_CASES)
def test_rows_of_an_n_d_array(gpu, rng, strategy, mode, types, reverse):
    """Along the last axis, each row's segments on their own (a row's first element a head
    too), by flags and by keys of x's shape, from the constructor's or the call's initial
    value; references scan each row with the operator itself."""
    dtype, op_name = types
    op = operator(op_name)
    default = values(rng, dtype, op_name, 1)[0]
    seg = build(strategy, mode, dtype, op_name, reverse, initial=default)
    for shape in ROW_SHAPES:
        x = values(rng, dtype, op_name, int(np.prod(shape))).reshape(shape)
        heads = rng.random(shape) < rng.choice([0.0, 0.05, 0.5])
        keys = np.cumsum(heads.ravel()).astype(np.int32).reshape(shape)
        for initial in (None, values(rng, dtype, op_name, 1)[0]):
            start = default if initial is None else initial
            want = np.stack([segmented_reference(row, row_heads, op, mode, reverse=reverse,
                                                 initial=start)
                             for row, row_heads in zip(x.reshape(-1, shape[-1]),
                                                       heads.reshape(-1, shape[-1]))])
            for form, index in (("flags", heads), ("keys", keys)):
                out = seg(gpu.to_gpu(x), initial=initial, **{form: gpu.to_gpu(index)})
                np.testing.assert_array_equal(out.get().reshape(want.shape), want,
                                              err_msg=f"{form} {shape}")


def test_call_validation(gpu):
    seg = scangen.SegmentedScan(np.int32)
    x = gpu.to_gpu(np.arange(5, dtype=np.int32))
    with pytest.raises(TypeError, match="exactly one of flags=, offsets= or keys="):
        seg(x)
    with pytest.raises(TypeError, match="exactly one"):
        seg(x, flags=gpu.to_gpu(np.ones(5, bool)), keys=gpu.to_gpu(np.ones(5, np.int32)))
    with pytest.raises(ValueError, match="flags has 4 elements; expected 5"):
        seg(x, flags=gpu.to_gpu(np.ones(4, bool)))
    with pytest.raises(TypeError, match="keys has dtype float32"):
        seg(x, keys=gpu.to_gpu(np.ones(5, np.float32)))
    with pytest.raises(TypeError, match="offsets has dtype uint8; use one of int32, int64"):
        seg(x, offsets=gpu.to_gpu(np.array([0, 5], np.uint8)))
    with pytest.raises(ValueError, match="non-decreasing"):
        seg(x, offsets=gpu.to_gpu(np.array([0, 3, 2, 5], np.int64)))


@pytest.mark.parametrize("strategy,mode,types,reverse", OFFSET_CASES,
                         ids=[f"{s}-{m}-{t[1]}-{'reverse' if r else 'forward'}"
                              for s, m, t, r in OFFSET_CASES])
def test_random_offsets(gpu, rng, strategy, mode, types, reverse):
    """CSR offsets of every shape (one segment, a segment per element, random cuts with
    empty segments among them, first and last), int32 and int64, at sizes around the tuned
    section, into poisoned output with a guard. The struct starts every segment from
    initial= (the constructor's, or a call's). The largest size runs first: its head bits
    stay in the scratch the smaller calls reuse, so a call that did not clear them shows."""
    dtype, op_name = types
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    default = values(rng, dtype, op_name, 1)[0] if op_name == "affine_pairs" else None
    seg = build_for_offsets(strategy, mode, dtype, op_name, reverse, default)
    section = seg.kernel("flags").spec.section_size
    for n in [70_001, 1, 2, section - 1, section, section + 1, 3 * section + 7]:
        x = values(rng, dtype, op_name, n)
        x_gpu = gpu.to_gpu(x)
        for shape, offsets in enumerate(random_offsets(rng, n, np.int64)):
            if n > 10_000 and offsets.size == n + 1:
                continue  # a segment per element: the small sizes have it (and the
                # reference's loop over segments would take long)
            offsets = offsets.astype((np.int32, np.int64)[shape % 2])
            given = values(rng, dtype, op_name, 1)[0] if default is not None and shape % 2 \
                else None
            want = segmented_reference(x, offset_heads(offsets, n), op, mode, reverse=reverse,
                                       initial=default if given is None else given)
            out = guarded_output(gpu, rng, n, dtype)
            seg(x_gpu, out.out, offsets=gpu.to_gpu(offsets), initial=given)
            np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                          err_msg=f"n={n} offsets {offsets.dtype}: "
                                                  f"{offsets[:8]} .. {offsets[-4:]}")


def tile_offsets(rng, n, section):
    """CSR offsets of n elements in no more segments than sections of n (the offsets form's
    segment tiles), one of each shape: one segment; cuts beside and at multiples of the
    section; random cuts with empty segments among them; and those with empty segments
    first and last."""
    most = ceil_div(n, section)
    shapes = [np.array([0, n])]
    if most >= 2:
        near = [cut for k in range(1, most) for cut in (k * section - 1, k * section,
                                                        k * section + 1) if 0 < cut < n]
        cuts = np.sort(rng.choice(near, size=min(len(near), most - 1), replace=False))
        shapes.append(np.concatenate([[0], cuts, [n]]))
        shapes.append(np.concatenate([[0], np.sort(rng.integers(0, n + 1, most - 1)), [n]]))
    if most >= 3:
        cuts = np.sort(rng.integers(0, n + 1, most - 3))
        shapes.append(np.concatenate([[0, 0], cuts, [n, n]]))
    return shapes


@pytest.mark.parametrize("mode,types,reverse", TILE_CASES,
                         ids=[f"{m}-{t[1]}-{'reverse' if r else 'forward'}"
                              for m, t, r in TILE_CASES])
def test_offsets_in_segment_tiles(gpu, rng, mode, types, reverse):
    """Where the segments are no more than the sections, each is scanned in tiles of its
    own (the plan says so): segments of lengths on both sides of a section and of its
    multiples, empty ones among them, first and last, int32 and int64 offsets, into
    poisoned output with a guard. The largest size runs first, so a smaller call that read
    its tile status or layout wrongly shows."""
    dtype, op_name = types
    op = operator(op_name)
    seg = build_for_offsets("auto", mode, dtype, op_name, reverse)
    section = seg.segment_tiles_kernel.spec.section_size
    for n in [40 * section + 3, 1, section - 1, section, section + 1, 3 * section + 7]:
        x = values(rng, dtype, op_name, n)
        x_gpu = gpu.to_gpu(x)
        for shape, offsets in enumerate(tile_offsets(rng, n, section)):
            offsets = offsets.astype((np.int32, np.int64)[shape % 2])
            plan = seg.plan(n, form="offsets", index_dtype=offsets.dtype,
                            segments=offsets.size - 1)
            assert plan.steps[-1].kernel is seg.segment_tiles_kernel
            want = segmented_reference(x, offset_heads(offsets, n), op, mode, reverse=reverse)
            out = guarded_output(gpu, rng, n, dtype)
            seg(x_gpu, out.out, offsets=gpu.to_gpu(offsets))
            np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                          err_msg=f"n={n} offsets {offsets.dtype}: "
                                                  f"{offsets[:8]} .. {offsets[-4:]}")


def check_bad_offsets(gpu, rng, seg, n, offsets_of):
    """Offsets that break each CSR rule (broken_offsets) of good ones (``offsets_of(n,
    index_dtype)``), int32 and int64, over x of n uint64 affine maps: a checked call
    raises naming the rule; an unchecked one writes nothing outside out (its guard) and
    never hangs; the next good call is right."""
    x = random_input(rng, "uint64", "affine_then", n)
    x_gpu = gpu.to_gpu(x)
    for index_dtype in (np.int32, np.int64):
        good = offsets_of(n, index_dtype)
        want = segmented_reference(x, offset_heads(good, n), operator("affine_then"),
                                   "inclusive")
        for bad, message in broken_offsets(rng, good, n):
            with pytest.raises(ValueError, match=message):
                seg(x_gpu, offsets=gpu.to_gpu(bad))
            out = guarded_output(gpu, rng, n, np.uint64)
            seg(x_gpu, out.out, offsets=gpu.to_gpu(bad), check_offsets=False)
            assert_guard_untouched(out)
        got = seg(x_gpu, offsets=gpu.to_gpu(good)).get()
        np.testing.assert_array_equal(got, want, err_msg=f"n={n} after bad offsets")


def test_bad_offsets_in_segment_tiles(gpu, rng):
    """Bad offsets of as few segments as sections (the segment tiles' route): the layout
    and tile status a call uses are its own, so a good call after bad ones is right."""
    seg = scangen.SegmentedScan(np.uint64, operator("affine_then"))
    section = seg.segment_tiles_kernel.spec.section_size
    for n in [section + 1, 7 * section + 5]:
        check_bad_offsets(gpu, rng, seg, n, lambda n, index_dtype:
                          tile_offsets(rng, n, section)[2].astype(index_dtype))


def test_bad_offsets_are_found_on_the_device(gpu, rng):
    """Every way offsets can break the CSR rules, at random places and sizes on both sides
    of a heads-kernel block (256 offsets) and of a section, raises ValueError naming the
    rule; a good call after a bad one passes (the verdict is reset, and nothing was written
    past the heads)."""
    seg = scangen.SegmentedScan(np.uint64, operator("affine_then"))
    for n in [1, 2, 255, 256, 257, 2048, 2049, 70_001]:
        check_bad_offsets(gpu, rng, seg, n, lambda n, index_dtype:
                          random_offsets(rng, n, index_dtype)[2])


#: One-byte flags and keys read a run at a time (ScanModule.run_heads): each run length, with a
#: non-commutative operator on 8 and 16 bytes, in both modes.
RUN_HEAD_CASES = list(itertools.product(
    (4, 8, 16), MODES, [("uint64", "affine_then"), (AFFINE_PAIR, "affine_pairs")]))


def shifted_view(gpu, host, shift):
    """``host`` on the device as a view ``shift`` elements into a larger array, so its
    address is aligned to no more than that."""
    padded = np.zeros(host.size + 8, host.dtype)
    padded[shift:shift + host.size] = host
    return gpu.to_gpu(padded)[shift:shift + host.size]


def check_run_heads(gpu, rng, seg, x, x_gpu, heads, op, mode, **index):
    """``seg`` over x with ``index`` (flags= or keys=, whose heads are ``heads``), into
    poisoned output with a guard, against the segmented reference."""
    want = segmented_reference(x, heads, op, mode)
    out = guarded_output(gpu, rng, x.size, x.dtype)
    seg(x_gpu, out.out, **index)
    (form, view), = index.items()
    np.testing.assert_array_equal(assert_guard_untouched(out), want,
                                  err_msg=f"n={x.size} {form} {view.dtype} at "
                                          f"{int(view.gpudata) % 16} bytes past 16")


@pytest.mark.parametrize("items,mode,types", RUN_HEAD_CASES,
                         ids=[f"{i}-{m}-{t[1]}" for i, m, t in RUN_HEAD_CASES])
def test_one_byte_flags_read_a_run_at_a_time(gpu, rng, items, mode, types):
    """Flags of bool, uint8 and int8 (any nonzero byte a head), aligned to the run and
    misaligned by 1, 2 and 4 bytes (a view into a larger array: read a byte at a time),
    at sizes of whole sections and with a partial last one (whose items carry their own
    heads), into poisoned output with a guard; heads from none to every element."""
    dtype, op_name = types
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    seg = scangen.SegmentedScan(dtype, op, mode=mode, items_per_thread=items,
                                section_size=256 * items, strategy="decoupled_lookback")
    section = seg.kernel("flags").spec.section_size
    for flags_dtype in (np.bool_, np.uint8, np.int8):
        assert seg.kernel("flags", flags_dtype).scan_module.run_heads[0] == "flags"
    for n in [section, 3 * section, 3 * section + 5, 1, section - 1, 40 * section + 77]:
        x = values(rng, dtype, op_name, n)
        x_gpu = gpu.to_gpu(x)
        for shift in (0, 1, 2, 4):
            density = rng.choice([0.0, 0.002, 0.3, 1.0])
            heads = rng.random(n) < density
            flags_dtype = (np.bool_, np.uint8, np.int8)[shift % 3]
            raw = heads.astype(flags_dtype) if flags_dtype == np.bool_ else \
                (heads * rng.integers(1, 128, n)).astype(flags_dtype)  # any nonzero byte
            check_run_heads(gpu, rng, seg, x, x_gpu, heads, op, mode,
                            flags=shifted_view(gpu, raw, shift))


@pytest.mark.parametrize("items,mode,types", RUN_HEAD_CASES,
                         ids=[f"{i}-{m}-{t[1]}" for i, m, t in RUN_HEAD_CASES])
def test_keys_read_a_run_at_a_time(gpu, rng, items, mode, types):
    """Keys of 1 to 8 bytes, aligned and misaligned by one key (a view into a larger
    array: read a key at a time), runs of equal keys from one to every element, at sizes
    of whole sections and with a partial last one, into poisoned output with a guard."""
    dtype, op_name = types
    op = AFFINE_PAIRS if op_name == "affine_pairs" else operator(op_name)
    seg = scangen.SegmentedScan(dtype, op, mode=mode, items_per_thread=items,
                                section_size=256 * items, strategy="decoupled_lookback")
    section = seg.kernel("flags").spec.section_size
    key_types = (np.int8, np.uint16, np.int32, np.int64)
    for key_dtype in key_types:
        assert seg.kernel("keys", key_dtype).scan_module.run_heads[0] == "keys"
    for n in [section, 3 * section, 3 * section + 5, 1, section - 1, 40 * section + 77]:
        x = values(rng, dtype, op_name, n)
        x_gpu = gpu.to_gpu(x)
        for case, key_dtype in enumerate(key_types):
            heads = rng.random(n) < rng.choice([0.0, 0.002, 0.3, 1.0])
            heads[0] = True
            # runs differ by 7 (mod the key's range: never 0), so no two runs merge
            keys = (np.cumsum(heads) * 7 - 3).astype(key_dtype)
            shift = case % 2
            check_run_heads(gpu, rng, seg, x, x_gpu, heads, op, mode,
                            keys=shifted_view(gpu, keys, shift))
