"""Radix passes and histograms without a GPU: what the modules render, the tile shapes they
choose, the checks made before anything runs, and the CLI. (nvcc compiles every module in
test_compile_nvcc's radix_histogram batch; the GPU tests check the results.)"""
import importlib
import subprocess
import sys
import types

import numpy as np
import pytest

import scangen
from scangen.primitives.histogram import (HistogramModule, bin_edges, fast_path_margin,
                                          outer_edges)
from scangen.primitives import radix
from scangen.primitives.radix import (KEY_DTYPES, DigitPlacesModule, RadixPassesModule,
                                      WideDigitPlacesModule)


@pytest.mark.parametrize("key", KEY_DTYPES, ids=str)
def test_keys_order_by_their_kind(key):
    text = RadixPassesModule(key).module_source().text
    kind = {"u": "unsigned", "i": "signed", "f": "float"}[key.kind]
    assert f"({kind} keys)" in text
    assert f"typedef {scangen.ELEMENT_TYPES[key].c_name} radix_key_t;" in text
    if kind == "float":
        assert "if (key != key)" in text and "bits = 0" in text  # NaN last, -0.0 as +0.0


def test_tiles_shrink_as_keys_and_values_widen():
    shapes = {(key, value): (m.block_size, m.items_per_thread, m.min_threads_per_sm)
              for key, value in [("uint32", None), ("uint16", "uint16"), ("uint32", "uint32"),
                                 ("float32", "int64"), ("float64", "int64"),
                                 ("uint64", "complex128")]
              for m in [RadixPassesModule(np.dtype(key), value and np.dtype(value))]}
    # 24 keys a thread where the tile fits the static staging area left by the digit
    # counters (36824 bytes), or, for a sort, what a block of every GPU may opt in to (64
    # KiB with the counters: 8-byte keys and values, staged in dynamic shared memory under
    # a bound of 768 threads); wider ones as many as the static area holds (256 threads x
    # 11 of 12 bytes, x 8 of 16, x 5 of 24)
    assert shapes == {("uint32", None): (256, 24, 1024), ("uint16", "uint16"): (256, 24, 1024),
                      ("uint32", "uint32"): (256, 24, 768), ("float32", "int64"): (256, 11, 1024),
                      ("float64", "int64"): (256, 8, 1024),
                      ("uint64", "complex128"): (256, 5, 1024)}
    # radix_digit_offsets stages nothing: every key type takes its tile, and its bound
    dest = DigitPlacesModule(np.dtype("float64"))
    assert (dest.block_size, dest.items_per_thread, dest.min_threads_per_sm) == \
        radix._DIGIT_PLACES_TILE
    assert f"static const int MIN_BLOCKS = SCANGEN_FITTING_BLOCKS({1536 // 512}, BLOCK_SIZE);" \
        in dest.module_source().text
    big = np.dtype([("a", np.float64, (32,))])
    with pytest.raises(TypeError, match="too large to stage"):
        RadixPassesModule(np.dtype("uint32"), big).items_per_thread
    with pytest.raises(TypeError, match="too large to stage"):  # when made, not when called
        scangen.RadixSort(np.uint32, big)


def test_a_sort_stages_its_tile_in_dynamic_shared_memory_where_it_pays():
    """dynamic_staging: the staged tile is extern shared memory of the launch's size, so a
    sort's keys and values keep max_items a thread (up to what a block may opt in to); by
    default where the whole tile fits what a block of every GPU may opt in to. A sort's
    values are read as their keys are staged, not held in registers through the ranking."""
    u32 = np.dtype("uint32")
    keys = RadixPassesModule(u32)
    pairs = RadixPassesModule(u32, u32)
    assert radix.PORTABLE_SHARED_BYTES == 64 * 1024
    assert pairs.dynamic_shared_bytes + 4 * 8 * 257 + 16 * 256 + 8 <= 64 * 1024
    assert not RadixPassesModule(np.dtype("float32"), np.dtype("int64")).dynamic_staging
    static = RadixPassesModule(u32, u32, dynamic_staging=False)
    assert not keys.dynamic_staging and keys.dynamic_shared() == {}
    assert (static.items_per_thread, static.dynamic_shared_bytes) == (17, 0)
    assert (pairs.items_per_thread, pairs.dynamic_shared_bytes) == (24, 256 * 24 * 8)
    assert pairs.dynamic_shared() == {"radix_onesweep": 256 * 24 * 8}
    assert "extern __shared__" not in static.source and "extern __shared__" in pairs.source
    assert "static_assert(STAGING_BYTES == 49152," in pairs.source
    for launch in scangen.RadixSort(u32, u32).plan(1 << 20).launches:
        staged = launch.kernel.name == "radix_onesweep"
        assert launch.dynamic_shared_bytes == (256 * 24 * 8 if staged else 0)
    assert "radix_onesweep<<<171, 256, 49152 B smem (49152 dynamic)>>>" in \
        str(scangen.RadixSort(u32, u32).plan(1 << 20))
    assert all(launch.dynamic_shared_bytes == 0
               for launch in scangen.RadixSort(u32).plan(1 << 20).launches)
    # as wide as a block may opt in to (227 KiB on sm_90), no wider
    wide = RadixPassesModule(np.dtype("uint64"), np.dtype("complex128"), dynamic_staging=True)
    fixed = 4 * 8 * 257 + 16 * 256 + 8
    assert wide.items_per_thread == min(24, (227 * 1024 - fixed) // (256 * 24))
    for module in (pairs, static):
        assert "radix_value_t value[" not in module.source
        assert "staged_values[place] = values[start + (first + k * WARP_SIZE)];" in module.source
    argsort = RadixPassesModule(u32, np.dtype("int64"), index_values=True).source
    assert "staged_values[place] = (values ? values[start + (first + k * WARP_SIZE)] : " \
           "(radix_value_t)(start + (first + k * WARP_SIZE)));" in argsort


def test_entry_points_match_the_source():
    for module in (RadixPassesModule(np.dtype("int16"), np.dtype("float32")),
                   DigitPlacesModule(np.dtype("float32"), radix_bits=3),
                   RadixPassesModule(np.dtype("int8"), np.dtype("int64"), index_values=True)):
        text = module.module_source().text
        for name, parameters in module.entry_points():
            declared = ", ".join(p.declaration for p in parameters)
            assert f"{name}({declared})" in text
        assert ("values ? values[start + j] : (radix_value_t)(start + j)" in text) == \
            getattr(module, "index_values", False)
    assert "static const int RADIX_BITS = 3;" in \
        DigitPlacesModule(np.dtype("float32"), radix_bits=3).module_source().text
    default = f"static const int LOOKBACK_TILES = {radix.ONESWEEP_LOOKBACK_TILES};"
    assert default in RadixPassesModule(np.dtype("uint32")).module_source().text
    assert "static const int LOOKBACK_TILES = 7;" in \
        RadixPassesModule(np.dtype("uint32"), lookback_tiles=7).module_source().text


def test_sources_show_the_passes():
    source = scangen.RadixSort(np.float32).source
    assert "radix_digit_counts(" in source and "radix_onesweep(" in source
    assert "digit_look_back(status, tile, digit, epoch)" in source
    wide = scangen.RadixDigitOffsets(np.uint32, 12).source
    assert "radix_onesweep(" in wide and "radix_places_from_order(" in wide
    # one pass wide: tile counts, the scan of them (a ScanKernel), tile places; no look-back
    narrow = scangen.RadixDigitOffsets(np.uint32, 8).source
    for kernel in ("radix_tile_counts(", "radix_tile_places(", "radix digit offsets: tile bases",
                   "tile_counts[i] = prev_item;"):
        assert kernel in narrow
    assert "radix_onesweep(" not in narrow and "digit_look_back" not in narrow


@pytest.mark.parametrize("make,error,message", [
    (lambda: scangen.RadixSort(np.complex64), TypeError, "cannot be radix sorted"),
    (lambda: scangen.RadixSort(np.float16), TypeError, "cannot be radix sorted"),
    (lambda: scangen.RadixSort(np.uint32, "not a dtype"), TypeError, "dtype"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=0), ValueError, "1..16 bits"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=17), ValueError, "1..16 bits"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=2.0), TypeError, "bits must be an int"),
    (lambda: DigitPlacesModule(np.dtype("uint32"), radix_bits=9), ValueError, "1..8 bits"),
    (lambda: WideDigitPlacesModule(np.dtype("float16")), TypeError, "cannot be radix sorted"),
    (lambda: RadixPassesModule(np.dtype("uint32"), np.dtype("int32"), index_values=True),
     ValueError, "index values are int64"),
    (lambda: RadixPassesModule(np.dtype("uint32"), lookback_tiles=0), ValueError, "1..32"),
    (lambda: RadixPassesModule(np.dtype("uint32"), lookback_tiles=33), ValueError, "1..32"),
    (lambda: scangen.Histogram(np.complex64), TypeError, "histogram takes"),
])
def test_construction_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_histogram_checks_bins_and_range_as_numpy():
    assert outer_edges(3, (0, 1)) == (0.0, 1.0)
    assert outer_edges(100, (5, 5)) == (4.5, 5.5)  # an empty range widens, as numpy's
    for bins, range_, error, message in [
            (0, (0, 1), ValueError, "at least 1"), (2.5, (0, 1), TypeError, "an int"),
            ([0, 1, 2], (0, 1), TypeError, "an int"), (4, None, TypeError, "is required"),
            (4, (1, 0), ValueError, "past the high end"), (4, (0, np.inf), ValueError, "finite")]:
        with pytest.raises(error, match=message):
            outer_edges(bins, range_)


def test_histogram_checks_a_call_asked_differently_again(monkeypatch):
    """A Histogram keeps its last bins and range, checked and converted, while calls ask the
    same way: an iterator's pair is read once, and bins=True is refused after bins=1 (equal
    as keys) as it is on its own; a bad range after a good one is still refused."""
    module = importlib.import_module("scangen.primitives.histogram")
    monkeypatch.setattr(module, "_gpuarray", lambda: types.SimpleNamespace(
        to_gpu=lambda host: object()))
    monkeypatch.setattr(module, "context_key", lambda: (0xC0,))
    hist = module.Histogram(np.float32)
    first = hist._bins(4, (0.0, 1.0))
    assert hist._bins(4, (0, 1))[3] is first[3]  # the same pair, as ints
    assert hist._bins(5, iter([0.0, 1.0]))[:2] == (0.0, 1.0)
    for bins, range_, error in [(True, (0, 1), TypeError), (4, None, TypeError),
                                (4, (1.0, 0.0), ValueError), (4, (0.0, np.nan), ValueError)]:
        with pytest.raises(error):
            hist._bins(bins, range_)


def test_histogram_compares_in_numpys_bin_type():
    assert HistogramModule(np.dtype("float32")).edge_dtype == np.float32
    assert np.histogram_bin_edges(np.zeros(3, np.float32), 4, (0, 1)).dtype == np.float32
    for dtype in ("float64", "int8", "uint64"):
        assert HistogramModule(np.dtype(dtype)).edge_dtype == np.float64
        assert np.histogram_bin_edges(np.zeros(3, dtype), 4, (0, 1)).dtype == np.float64
    assert "typedef float edge_t;" in HistogramModule(np.dtype("float32")).module_source().text


def _bins_as_the_kernel_finds_them(x, edges, low, high, margin):
    """clear_bin and bin_by_edges (histogram.cu.j2) in numpy, with the same rounded
    arithmetic in the edges' type: ``(bins, clear)``, bins -1 outside the range, clear where
    no edge was read."""
    bins = len(edges) - 1
    edge_t = edges.dtype.type
    v = x.astype(edges.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        position = (v - edge_t(low)) * edge_t(bins / (high - low))
        whole = np.floor(position)
        fraction = position - whole
        clear = (whole >= 0) & (whole < bins) & \
            (np.abs(fraction - edge_t(0.5)) < edge_t(0.5) - edge_t(margin))
        inside = (v >= edge_t(low)) & (v <= edge_t(high))
        if margin < 1.0:
            guess = np.clip(np.nan_to_num(whole), 0, bins - 1).astype(np.int64)
        else:
            guess = np.minimum(((v - edge_t(low)).astype(np.float64) / (high - low)
                                * bins).astype(np.int64), bins - 1)
    guess = np.where(inside, guess, 0)
    stepped = guess - (v < edges[guess])
    stepped = stepped + ((stepped != bins - 1) & (v >= edges[np.minimum(stepped + 1, bins)]))
    by_edges = np.where(inside, stepped, -1)
    assert not (clear & ~inside).any()  # a clear value is inside the range
    with np.errstate(invalid="ignore"):  # whole may be NaN or past int64 where not clear
        return np.where(clear, whole.astype(np.int64), by_edges), clear


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("range_", [(-3.0, 3.0), (0.1, 0.7), (1e6, 1e6 + 100),
                                    (-1e-30, 1e-30), (10, 200), (0, 256)])
@pytest.mark.parametrize("bins", [1, 7, 256, 1000, 100_000])
def test_histogram_bins_values_as_numpy(rng, dtype, range_, bins):
    """The kernel's bin rule (done here in numpy) bins every value as numpy.histogram does:
    random values, and for floats the edges with their neighbours either side; and it reads
    no edge for most random floats where the edges lie where they should."""
    edge_type = HistogramModule(np.dtype(dtype)).edge_dtype
    if edge_type == np.float32 and range_ == (1e6, 1e6 + 100) and bins == 100_000:
        for check in (lambda: np.histogram(np.zeros(1, dtype), bins, range_),
                      lambda: bin_edges(bins, range_, edge_type)):
            with pytest.raises(ValueError, match="(?i)too many bins"):
                check()
        return
    low, high, edges = bin_edges(bins, range_, edge_type)
    margin = fast_path_margin(edges, low, high)
    if np.dtype(dtype).kind == "f":
        near = edges.astype(dtype)
        random = rng.uniform(low, high, 100_000).astype(dtype)
        x = np.concatenate([random, near, np.nextafter(near, np.inf),
                            np.nextafter(near, -np.inf)])
    else:
        x = rng.integers(int(low) - 5, int(high) + 5, 100_000).astype(dtype)
    found, fast = _bins_as_the_kernel_finds_them(x, edges, low, high, margin)
    np.testing.assert_array_equal(np.bincount(found[found >= 0], minlength=bins),
                                  np.histogram(x, bins, (low, high))[0])
    if edges.dtype == np.float32 and range_ == (1e6, 1e6 + 100):
        # float32 values there are 1/16 apart: 0.44 of a bin's width at 7 bins, 2.56 at 256
        assert (margin < 0.25) == (bins <= 7)
    elif bins <= 256 and np.dtype(dtype).kind == "f":
        # a value reads edges only within margin of one: about 2 * margin of them
        assert margin < 0.25 and fast[:random.size].mean() > 0.9 - 2 * margin


@pytest.mark.parametrize("what", ["radix_sort", "argsort", "radix_digit_offsets", "histogram"])
def test_cli_prints_the_source(what):
    result = subprocess.run([sys.executable, "-m", "scangen", "source", what, "--dtype",
                             "int32"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "extern \"C\" __global__" in result.stdout
    refused = subprocess.run([sys.executable, "-m", "scangen", "source", what, "--dtype",
                              "int32", "--algorithm", "naive"], capture_output=True, text=True)
    assert refused.returncode != 0 and "takes no --algorithm" in refused.stderr
