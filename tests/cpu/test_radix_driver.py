"""RadixSort's and argsort's passes without a GPU: which digit each pass takes, where its
keys and values come from and go (the last pass must land in the returned arrays), with
each pass replaced by a numpy model of what radix_scatter_tiles computes (a stable order by
one digit of the order-preserving bit pattern). The kernels themselves are checked against
numpy on the GPU (tests/gpu/test_radix.py); this checks the Python around them on CI."""
import numpy as np
import pytest

import scangen
from scangen.primitives import radix

from tests.support import digit_offsets, digits, simulate_device


class Memory:
    """Host arrays at made-up device addresses, seen through __cuda_array_interface__."""

    def __init__(self):
        self.arrays, self.next_address = {}, 0x100000

    def array(self, host):
        host = np.ascontiguousarray(host)
        address, self.next_address = self.next_address, self.next_address + host.nbytes + 256
        self.arrays[address] = host
        return FakeArray(host, address)

    def empty(self, shape, dtype):
        return self.array(np.zeros(shape, dtype))

    def at(self, view):
        return None if view is None or not view.size else self.arrays[view.ptr]


class FakeArray:
    """What the driver sees of an array: the interface, and (as of a pycuda GPUArray, which
    the spare buffers are) ptr, size and dtype."""

    def __init__(self, host, address):
        self.host, self.address = host, address
        self.ptr, self.size, self.dtype = address, host.size, host.dtype
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str,
                                         "data": (address, False), "version": 3}


@pytest.fixture
def memory(monkeypatch):
    simulate_device(monkeypatch)
    memory = Memory()
    monkeypatch.setattr(radix, "_gpuarray", lambda: memory)
    from scangen import interop
    monkeypatch.setattr(interop._Kind, "empty",
                        lambda self, shape, dtype, like, stream, current:
                        memory.empty(shape, dtype))
    passes, counted = [], []

    def count(self, keys, n, digits_of_passes, descending, stream):
        """The digit counts a sort starts with: which passes they are for (the fake passes
        need none)."""
        counted.append((keys.ptr, list(digits_of_passes)))

    def run(self, keys, moved, n, number, shift, bits, descending, stream, digit_start=None):
        """What one pass computes: a stable order by the digit; keys (and values, or the
        indices where there are none) to their places. The pass must be the next one
        counted."""
        assert counted and counted[-1][1][number] == (shift, bits)
        assert number == 0 or passes[-1][:2] == counted[-1][1][number - 1]
        host = memory.at(keys)
        order = np.argsort(digits(host, shift, bits, descending), kind="stable")
        passes.append((shift, bits, keys.ptr, [None if a is None else a.ptr for a in moved]))
        memory.at(moved[0])[:] = host[order]
        if len(moved) > 1:
            values = memory.at(moved[1])
            values = np.arange(n) if values is None else values
            memory.at(moved[2])[:] = values[order]

    monkeypatch.setattr(radix._RadixPasses, "count", count)
    monkeypatch.setattr(radix._RadixPasses, "run", run)
    memory.passes, memory.counted = passes, counted

    def finish_wide_digit(module, sorted_keys, order, dest, digit_start, n, shift, bits,
                          descending, stream):
        """What the places kernels compute: each key's place from the stable order, and
        where each digit starts (the first key in that order with that digit or more)."""
        assert module.output == "places"
        memory.at(dest)[memory.at(order)] = np.arange(n)
        digit = digits(memory.at(sorted_keys), shift, bits, descending)
        memory.at(digit_start)[:] = np.searchsorted(digit, np.arange(1 << bits))
        memory.finished.append((shift, bits))

    monkeypatch.setattr(radix, "_finish_wide_digit", finish_wide_digit)
    memory.finished = []

    def zero(view, stream):
        memory.at(view)[:] = 0
        memory.zeroed.append(view.ptr)

    monkeypatch.setattr(radix, "_zero", zero)
    memory.zeroed = []
    # The one-shots' cached objects keep their spare buffers: none may outlive this memory.
    radix._radix_sort.cache_clear()
    yield memory
    radix._radix_sort.cache_clear()


def keys_of(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = rng.normal(size=n).astype(dtype)
        specials = rng.random(n) < 0.1
        x[specials] = rng.choice(np.array([0.0, -0.0, np.nan, np.inf, -np.inf], dtype),
                                 specials.sum())
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype,passes", [("uint8", 1), ("int16", 2), ("float32", 4),
                                          ("int64", 8)])
@pytest.mark.parametrize("n", [1, 2, 1000])
def test_passes_cover_the_key_and_end_in_the_output(memory, rng, dtype, passes, n):
    keys, values = keys_of(rng, dtype, n), rng.random(n)
    given_keys, given_values = memory.array(keys), memory.array(values)
    got_keys, got_values = scangen.RadixSort(dtype, np.float64)(given_keys, given_values)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(got_keys.host.view(f"u{keys.itemsize}"),
                                  keys[order].view(f"u{keys.itemsize}"))
    np.testing.assert_array_equal(got_values.host, values[order])
    assert [(shift, bits) for shift, bits, _, _ in memory.passes] == \
        [(8 * k, 8) for k in range(passes)]
    # the first pass reads the caller's arrays, the last one writes the returned ones
    (_, _, first_keys, (_, first_values, _)) = memory.passes[0]
    (_, _, _, (last_keys, _, last_values)) = memory.passes[-1]
    assert (first_keys, first_values) == (given_keys.address, given_values.address)
    # one count of every pass's digits, over the caller's keys, before the first pass
    assert memory.counted == [(given_keys.address, [(8 * k, 8) for k in range(passes)])]
    assert (last_keys, last_values) == (got_keys.address, got_values.address)
    np.testing.assert_array_equal(given_keys.host.view(np.uint8), keys.view(np.uint8))


def test_argsort_numbers_the_keys_in_its_first_pass(memory, rng):
    keys = keys_of(rng, "float64", 5000)
    got = scangen.argsort(memory.array(keys))
    np.testing.assert_array_equal(got.host, np.argsort(keys, kind="stable"))
    assert memory.passes[0][3][1] is None  # no values array: the kernel numbers the keys
    down = scangen.argsort(memory.array(keys), descending=True)
    _, rank = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(down.host,
                                  np.lexsort((np.arange(keys.size), -rank.reshape(-1))))


@pytest.mark.parametrize("begin,end,shifts", [(0, 8, [(0, 8)]), (4, 12, [(4, 8)]),
                                              (3, 20, [(3, 8), (11, 8), (19, 1)]),
                                              (5, 5, [(0, 0)]), (32, 32, [(0, 0)])])
def test_bit_ranges(memory, rng, begin, end, shifts):
    keys = rng.integers(0, 2 ** 32, 3000, dtype=np.uint32)
    got = scangen.radix_sort(memory.array(keys), begin_bit=begin, end_bit=end)
    part = (keys.astype(np.uint64) >> np.uint64(begin)) & np.uint64((1 << (end - begin)) - 1)
    np.testing.assert_array_equal(got.host, keys[np.argsort(part, kind="stable")])
    assert [(shift, bits) for shift, bits, _, _ in memory.passes] == shifts


def test_empty_keys_launch_nothing(memory):
    got_keys, got_values = scangen.radix_sort(memory.array(np.zeros(0, np.int32)),
                                              memory.array(np.zeros(0, np.float32)))
    assert got_keys.host.size == 0 and got_values.host.size == 0
    assert not memory.passes and not memory.counted


@pytest.mark.parametrize("dtype,shift,bits", [("uint32", 0, 16), ("uint32", 20, 12),
                                              ("int16", 4, 9), ("uint8", 0, 16),
                                              ("float64", 50, 14), ("int64", 60, 10)])
@pytest.mark.parametrize("descending", [False, True])
def test_digits_wider_than_a_pass(memory, rng, dtype, shift, bits, descending):
    """bits 9..16: argsort passes over the digit's bits (those past the key's width are
    zero: no pass), then the places kernels; the result is the one-pass definition's."""
    keys = keys_of(rng, dtype, 3000)
    dest, digit_start = scangen.RadixDigitOffsets(dtype, bits)(
        memory.array(keys), shift, descending=descending)
    want_dest, want_start = digit_offsets(keys, shift, bits, descending)
    np.testing.assert_array_equal(dest.host, want_dest)
    np.testing.assert_array_equal(digit_start.host, want_start)
    end = min(shift + bits, 8 * keys.itemsize)
    assert [(s, b) for s, b, _, _ in memory.passes] == \
        [(s, min(8, end - s)) for s in range(shift, end, 8)]
    assert memory.passes[0][3][1] is None  # the first pass numbers the keys
    assert memory.finished == [(shift, bits)]


def test_wide_digits_of_no_keys(memory):
    dest, digit_start = scangen.RadixDigitOffsets("uint16", 12)(
        memory.array(np.zeros(0, np.uint16)), 0)
    assert dest.host.size == 0 and not memory.passes and not memory.finished
    assert memory.zeroed == [digit_start.address] and digit_start.host.size == 1 << 12


@pytest.fixture
def tile_kernels(memory, monkeypatch):
    """numpy models of radix_digit_offsets' launches, from what their comments promise:
    radix_tile_counts (each tile's count of every digit, digit-major, and each key's
    digit), the in-place exclusive scan of those counts, and radix_tile_places (each key's
    tile base plus its rank among its tile's keys of its digit; tile 0's bases to
    digit_start)."""
    launches = []

    def launch_function(compiled, name, stream):
        module = compiled

        def launch(grid, block, stream, *args):
            assert block == (module.block_size, 1, 1)
            launches.append(name)
            tiles = grid[0]
            if name == "radix_tile_counts":
                keys, counts, digit_out, n, shift, mask, flip = args
                assert tiles == -(-int(n) // module.tile_size)
                assert int(mask) == (1 << module.radix_bits) - 1
                digit = digits(memory.arrays[keys][:int(n)], int(shift), module.radix_bits,
                               int(flip) != 0)
                tile = np.arange(int(n)) // module.tile_size
                counts = memory.arrays[counts]
                counts[:module.radix * tiles] = np.bincount(
                    digit.astype(np.int64) * tiles + tile, minlength=module.radix * tiles)
                memory.arrays[digit_out][:int(n)] = digit
                return
            assert name == "radix_tile_places"
            digit_in, bases, dest, digit_start, n = args
            n = int(n)
            assert tiles == -(-n // module.tile_size)
            digit = memory.arrays[digit_in][:n].astype(np.int64)
            tile = np.arange(n) // module.tile_size
            bases = memory.arrays[bases]
            rank = np.empty(n, np.int64)
            for t in range(tiles):
                for d in np.unique(digit[tile == t]):
                    mine = np.flatnonzero((tile == t) & (digit == d))
                    rank[mine] = np.arange(mine.size)
            memory.arrays[dest][:n] = bases[digit * tiles + tile] + rank
            memory.arrays[digit_start][:] = bases[np.arange(module.radix) * tiles]
        return launch

    class Scan:
        def launch_converted(self, values, n, stream):
            counts = memory.arrays[values[0]]
            launches.append(("scan", n))
            counts[:n] = np.concatenate([[0], np.cumsum(counts[:n])[:-1]])

    monkeypatch.setattr(radix, "launch_function", launch_function)
    monkeypatch.setattr(radix, "compile_module", lambda module: module)
    monkeypatch.setattr(radix, "_tile_bases_scan", lambda: Scan())
    return launches


@pytest.mark.parametrize("dtype,shift,bits", [("uint32", 0, 8), ("int32", 28, 4),
                                              ("uint8", 0, 1), ("float64", 52, 8),
                                              ("int64", 60, 8)])
@pytest.mark.parametrize("descending", [False, True])
def test_digit_offsets_of_one_pass(memory, tile_kernels, rng, dtype, shift, bits, descending):
    """A digit up to 8 bits: tile counts, their scan over every (digit, tile), tile places;
    the result is the definition's, on sizes around the tile."""
    offsets = scangen.RadixDigitOffsets(dtype, bits)
    tile = offsets._passes.module.tile_size
    for n in [1, tile - 1, tile, 2 * tile + 1]:
        del tile_kernels[:]
        keys = keys_of(rng, dtype, n)
        dest, digit_start = offsets(memory.array(keys), shift, descending=descending)
        want_dest, want_start = digit_offsets(keys, shift, bits, descending)
        np.testing.assert_array_equal(dest.host, want_dest)
        np.testing.assert_array_equal(digit_start.host, want_start)
        assert tile_kernels == ["radix_tile_counts", ("scan", (1 << bits) * -(-n // tile)),
                                "radix_tile_places"]
