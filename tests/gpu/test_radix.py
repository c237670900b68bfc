"""Radix digit offsets, radix sort, argsort and histogram on the GPU against numpy: random
keys, duplicates, all-equal keys, keys of a narrow range (some passes of one digit, which
copy), sorted and reversed keys, floats with -0.0, inf and NaN, sizes
around tile boundaries, values carried along (structs too), and one sort past 2^31 keys."""
import itertools

import numpy as np
import pytest

import scangen
from scangen import compile as scan_compile
from scangen.primitives import radix
from scangen.primitives.histogram import HistogramModule
from scangen.primitives.radix import (KEY_DTYPES, MAX_DIGIT_BITS, DigitPlacesModule,
                                      RadixPassesModule, WideDigitPlacesModule)

from tests.support import digit_offsets, precompile
from tests.support import require_module

#: Around warp runs, tiles (1024 to 4096 keys, by key and value width) and many tiles
#: (many onesweep launches: test_passes_in_portions).
SIZES = [0, 1, 2, 31, 33, 255, 257, 2047, 2048, 2049, 4095, 4096, 4097, 3 * 4096 + 5,
         100_003, 1_000_003]
PATTERNS = ["random", "duplicates", "all_equal", "narrow", "sorted", "reversed"]
FLOAT_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0]


def keys_for(rng, dtype, n, pattern):
    dtype = np.dtype(dtype)
    if pattern == "all_equal":  # every pass's digit the same for every key
        return np.full(n, 7, dtype)
    if pattern == "narrow":  # 0 .. 99 and their negatives: passes of one digit among others
        x = rng.integers(0, 100, n)
        return (x if dtype.kind == "u" else x * rng.choice([-1, 1], n)).astype(dtype)
    if dtype.kind == "f":
        x = rng.normal(scale=1e3, size=n).astype(dtype)
        specials = rng.random(n) < 0.05
        x[specials] = rng.choice(np.array(FLOAT_SPECIALS, dtype), specials.sum())
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if pattern == "duplicates":  # few distinct keys: stability shows
        x = rng.choice(x[:5] if n else x, n) if n else x
    elif pattern == "sorted":
        x = np.sort(x, kind="stable")
    elif pattern == "reversed":
        x = np.sort(x, kind="stable")[::-1].copy()
    return x


def descending_order(keys):
    """Stable descending order, independent of scangen's bit patterns: ranks from numpy's
    sort (NaN greatest, -0.0 == 0.0), ties in input order."""
    _, rank = np.unique(keys, return_inverse=True)
    return np.lexsort((np.arange(keys.size), -rank.reshape(-1)))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel(gpu):
    modules = [RadixPassesModule(k) for k in KEY_DTYPES]
    modules += [RadixPassesModule(k, np.dtype(np.int64), index_values=True) for k in KEY_DTYPES]
    modules += [DigitPlacesModule(k) for k in KEY_DTYPES]
    modules += [WideDigitPlacesModule(k) for k in KEY_DTYPES]
    precompile(modules)


@pytest.mark.parametrize("dtype", [str(k) for k in KEY_DTYPES])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_radix_sort_and_argsort(gpu, rng, dtype, pattern):
    for n in SIZES:
        keys = keys_for(rng, dtype, n, pattern)
        order = np.argsort(keys, kind="stable")
        got = scangen.radix_sort(gpu.to_gpu(keys)).get()
        np.testing.assert_array_equal(got.view(f"u{keys.itemsize}"),
                                      keys[order].view(f"u{keys.itemsize}"))  # -0.0 kept
        np.testing.assert_array_equal(scangen.argsort(gpu.to_gpu(keys)).get(), order)
        down = descending_order(keys)
        np.testing.assert_array_equal(
            scangen.argsort(gpu.to_gpu(keys), descending=True).get(), down)


@pytest.mark.parametrize("portion_tiles", [1, 3])
def test_passes_in_portions(gpu, rng, monkeypatch, portion_tiles):
    """Inputs past one onesweep launch (ONESWEEP_PORTION_TILES, here shrunk so that small
    inputs take many launches): each portion starts its digits where the one before left
    them, and its look-back stops at its own first tile."""
    monkeypatch.setattr(radix, "ONESWEEP_PORTION_TILES", portion_tiles)
    sort = scangen.RadixSort("int32", "float32")
    offsets = scangen.RadixDigitOffsets("uint16", 5)
    for n, pattern in itertools.product([4095, 4097, 3 * 4096 + 5, 100_003],
                                        ["duplicates", "narrow"]):
        keys = keys_for(rng, "int32", n, pattern)
        values = rng.random(n).astype(np.float32)
        got_keys, got_values = sort(gpu.to_gpu(keys), gpu.to_gpu(values))
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(got_keys.get(), keys[order])
        np.testing.assert_array_equal(got_values.get(), values[order])
        narrow = keys_for(rng, "uint16", n, "random")
        dest, digit_start = offsets(gpu.to_gpu(narrow), 7, descending=True)
        want_dest, want_start = digit_offsets(narrow, 7, 5, True)
        np.testing.assert_array_equal(dest.get(), want_dest)
        np.testing.assert_array_equal(digit_start.get(), want_start)


@pytest.mark.parametrize("key,value", [("uint32", "uint32"), ("float32", "int64"),
                                       ("int64", "float64"), ("uint16", "complex128"),
                                       ("float64", "uint8")])
def test_values_move_with_their_keys(gpu, rng, key, value):
    sort = scangen.RadixSort(key, value)
    for n in SIZES:
        keys = keys_for(rng, key, n, "duplicates")
        values = (np.arange(n) * 3 + 1).astype(value)
        got_keys, got_values = sort(gpu.to_gpu(keys), gpu.to_gpu(values))
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(got_keys.get(), keys[order])
        np.testing.assert_array_equal(got_values.get(), values[order])


def test_struct_values(gpu, rng):
    pair = np.dtype([("weight", np.float32), ("cell", np.int16)], align=True)
    n = 50_001
    keys = rng.integers(0, 100, n).astype(np.int32)
    values = np.zeros(n, pair)
    values["weight"] = rng.random(n)
    values["cell"] = np.arange(n) % 1000
    got_keys, got_values = scangen.radix_sort(gpu.to_gpu(keys), gpu.to_gpu(values))
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(got_keys.get(), keys[order])
    np.testing.assert_array_equal(got_values.get(), values[order])


@pytest.mark.parametrize("begin,end", [(0, 8), (4, 12), (8, 32), (3, 4), (5, 5), (0, 17),
                                       (32, 32)])
def test_bit_range(gpu, rng, begin, end):
    keys = rng.integers(0, 2 ** 32, 100_003, dtype=np.uint32)
    got = scangen.radix_sort(gpu.to_gpu(keys), begin_bit=begin, end_bit=end).get()
    part = (keys >> np.uint32(begin)) & np.uint32((1 << (end - begin)) - 1)
    np.testing.assert_array_equal(got, keys[np.argsort(part, kind="stable")])


@pytest.mark.parametrize("dtype,shift,bits", [("uint32", 0, 8), ("uint32", 24, 8),
                                              ("int32", 28, 4), ("uint8", 0, 1),
                                              ("int64", 56, 8), ("uint16", 12, 8),
                                              # wider than a pass: argsort, then places
                                              ("uint32", 0, 16), ("uint32", 20, 12),
                                              ("int16", 4, 9), ("uint8", 0, 16),
                                              ("float64", 50, 14), ("int64", 60, 10)])
@pytest.mark.parametrize("descending", [False, True])
def test_radix_digit_offsets(gpu, rng, dtype, shift, bits, descending):
    # and either side of the tile of the digit offsets' tile kernels (digits up to 8 bits),
    # with few distinct keys too (many keys of one digit in a warp's round)
    tile = DigitPlacesModule(np.dtype(dtype)).tile_size
    edges = [tile - 1, tile, tile + 1, 2 * tile - 1, 2 * tile, 2 * tile + 1]
    cases = [(n, "random") for n in SIZES + edges] + [(n, "duplicates") for n in edges]
    for n, pattern in cases:
        keys = keys_for(rng, dtype, n, pattern)
        dest, digit_start = scangen.radix_digit_offsets(gpu.to_gpu(keys), shift, bits,
                                                        descending=descending)
        want_dest, want_start = digit_offsets(keys, shift, bits, descending)
        np.testing.assert_array_equal(dest.get(), want_dest)
        np.testing.assert_array_equal(digit_start.get(), want_start)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "int64"])
@pytest.mark.parametrize("bins", [1, 10, 256, 8192, 8193, 100_000])
def test_histogram_matches_numpy(gpu, rng, dtype, bins):
    low, high = (-3.0, 3.0) if np.dtype(dtype).kind == "f" else (10, 200)
    tile = HistogramModule(np.dtype(dtype)).tile_size
    for n in [0, 1, 1000, tile - 1, tile, tile + 1, 1_000_003]:
        if np.dtype(dtype).kind == "f":
            x = rng.normal(size=n).astype(dtype) * 2
            x[rng.random(n) < 0.01] = np.nan
            # the edges themselves, and values just either side of them
            edges = np.linspace(low, high, bins + 1).astype(dtype)
            x[:min(n, edges.size)] = edges[:n]
        else:
            x = rng.integers(0, 256, n).astype(dtype)
        counts, edges = scangen.histogram(gpu.to_gpu(x), bins, (low, high))
        want, want_edges = np.histogram(x, bins, (low, high))
        np.testing.assert_array_equal(counts.get(), want)
        np.testing.assert_array_equal(edges, want_edges)
        assert edges.dtype == want_edges.dtype
        assert counts.dtype == np.int64


@pytest.mark.parametrize("dtype,range_,bins", [
    ("float32", (1e6, 1e6 + 100), 1000),  # float32 edges off their ideal places: numpy's guess
    ("float32", (1e6, 1e6 + 100), 7),     # ... less so: the kernel's own, with a wide margin
    ("float64", (0.1, 0.7), 7), ("uint8", (0, 256), 256), ("int16", (-300, 300), 600)])
def test_histogram_of_awkward_ranges(gpu, rng, dtype, range_, bins):
    low, high = range_
    if np.dtype(dtype).kind == "f":
        edges = np.histogram_bin_edges(np.zeros(1, dtype), bins, range_).astype(dtype)
        x = np.concatenate([rng.uniform(low - 1, high + 1, 300_000).astype(dtype), edges,
                            np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, int(info.max) + 1, 300_000).astype(dtype)
    counts, _ = scangen.histogram(gpu.to_gpu(x), bins, range_)
    np.testing.assert_array_equal(counts.get(), np.histogram(x, bins, range_)[0])
    with pytest.raises(ValueError, match="too many bins"):
        scangen.histogram(gpu.to_gpu(np.zeros(4, np.float32)), 100_000, (1e6, 1e6 + 100))


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64"])
def test_histogram_of_views_off_a_16_byte_boundary(gpu, rng, dtype):
    """Tiles are read in 16-byte words from x's first 16-byte boundary; the values before it
    are counted one by one."""
    x = (rng.random(3 * HistogramModule(np.dtype(dtype)).tile_size + 50) * 100).astype(dtype)
    on_device = gpu.to_gpu(x)
    for start in range(0, 17):
        for stop in (x.size, x.size - 5, start + 3):
            counts, _ = scangen.histogram(on_device[start:stop], 7, (0, 100))
            np.testing.assert_array_equal(counts.get(), np.histogram(x[start:stop], 7,
                                                                     (0, 100))[0])


def test_one_shot_functions_compile_once(gpu, rng):
    keys = gpu.to_gpu(rng.random(1000).astype(np.float32))
    scangen.radix_sort(keys)
    scangen.argsort(keys)
    scangen.histogram(keys, 10, (0, 1))
    ints = gpu.to_gpu(rng.integers(0, 99, 1000).astype(np.uint32))
    scangen.radix_digit_offsets(ints, 0)
    before = scan_compile.compile_count
    for _ in range(3):
        scangen.radix_sort(keys)
        scangen.argsort(keys)
        scangen.histogram(keys, 10, (0, 1))
        scangen.radix_digit_offsets(ints, 0)
    assert scan_compile.compile_count == before


def test_stream_and_scratch_reuse(gpu, rng):
    import pycuda.driver as driver

    sort = scangen.RadixSort(np.uint32, np.uint32)
    stream = driver.Stream()
    for n in [100_000, 3_000, 250_000]:  # scratch grows, then is reused
        keys = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
        values = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
        got_keys, got_values = sort(gpu.to_gpu(keys), gpu.to_gpu(values), stream=stream)
        stream.synchronize()
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(got_keys.get(), keys[order])
        np.testing.assert_array_equal(got_values.get(), values[order])


def test_inputs_are_left_as_they_are(gpu, rng):
    keys = rng.integers(0, 1000, 10_000).astype(np.int32)
    values = rng.random(10_000)
    k, v = gpu.to_gpu(keys), gpu.to_gpu(values)
    scangen.radix_sort(k, v)
    np.testing.assert_array_equal(k.get(), keys)
    np.testing.assert_array_equal(v.get(), values)


def test_bad_input(gpu):
    keys = gpu.to_gpu(np.arange(10, dtype=np.uint32))
    with pytest.raises(TypeError, match="cannot be radix sorted"):
        scangen.radix_sort(gpu.to_gpu(np.ones(4, np.complex64)))
    with pytest.raises(ValueError, match="outside the key's 32 bits"):
        scangen.radix_sort(keys, end_bit=33)
    with pytest.raises(ValueError, match="past end_bit"):
        scangen.radix_sort(keys, begin_bit=9, end_bit=8)
    with pytest.raises(ValueError, match="expected 10"):
        scangen.radix_sort(keys, gpu.to_gpu(np.ones(9, np.float32)))
    for bits in (0, MAX_DIGIT_BITS + 1):
        with pytest.raises(ValueError, match=f"a digit has 1..{MAX_DIGIT_BITS} bits"):
            scangen.radix_digit_offsets(keys, 0, bits=bits)
    with pytest.raises(ValueError, match="range"):
        scangen.histogram(keys, 4, (3, 1))
    with pytest.raises(TypeError, match="must be a pycuda GPUArray or another CUDA array"):
        scangen.RadixSort(np.uint32)(np.arange(4, dtype=np.uint32))
    with pytest.raises(TypeError, match="must be a pycuda GPUArray or another CUDA array"):
        scangen.radix_sort([3, 1, 2])


def test_host_arrays_go_through_the_one_shots(gpu, rng):
    keys = rng.integers(0, 50, 10_001).astype(np.int16)
    values = rng.random(10_001)
    got_keys, got_values = scangen.radix_sort(keys, values)
    order = np.argsort(keys, kind="stable")
    assert isinstance(got_keys, np.ndarray) and isinstance(got_values, np.ndarray)
    np.testing.assert_array_equal(got_keys, keys[order])
    np.testing.assert_array_equal(got_values, values[order])
    np.testing.assert_array_equal(scangen.argsort(keys), order)
    counts, _ = scangen.histogram(keys, 5, (0, 50))
    np.testing.assert_array_equal(counts, np.histogram(keys, 5, (0, 50))[0])


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_cupy_and_torch_arrays_come_back_as_they_went_in(gpu, rng, library):
    module = require_module(library)
    keys = rng.integers(0, 2 ** 31, 100_003).astype(np.int32)
    values = rng.random(100_003).astype(np.float32)
    if library == "cupy":
        device_keys, device_values = module.asarray(keys), module.asarray(values)
        back = module.asnumpy
    else:
        device_keys = module.from_numpy(keys).cuda()
        device_values = module.from_numpy(values).cuda()
        back = lambda t: t.cpu().numpy()  # noqa: E731
    order = np.argsort(keys, kind="stable")
    got_keys, got_values = scangen.radix_sort(device_keys, device_values)
    assert type(got_keys) is type(device_keys) and type(got_values) is type(device_values)
    np.testing.assert_array_equal(back(got_keys), keys[order])
    np.testing.assert_array_equal(back(got_values), values[order])
    np.testing.assert_array_equal(back(scangen.argsort(device_keys, descending=True)),
                                  descending_order(keys))
    dest, digit_start = scangen.radix_digit_offsets(device_keys, 24)
    assert type(dest) is type(device_keys)
    counts, _ = scangen.histogram(device_values, 10, (0.0, 1.0))
    np.testing.assert_array_equal(back(counts), np.histogram(values, 10, (0.0, 1.0))[0])


def test_sort_past_2_to_the_31_keys(gpu, rng):
    n = 2 ** 31 + 5
    keys = rng.integers(0, 256, n, dtype=np.uint8)
    counts = np.bincount(keys, minlength=256)
    got = scangen.radix_sort(gpu.to_gpu(keys))
    del keys
    host = got.get()
    del got
    # A sorted uint8 array is its counts, one run per value.
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    assert (host[starts[counts > 0]] == np.flatnonzero(counts)).all()
    assert (np.diff(host) >= 0).all()
    np.testing.assert_array_equal(np.bincount(host, minlength=256), counts)
