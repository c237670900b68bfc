"""RadixSort's, argsort's and RadixDigitOffsets' calls without a GPU: the plan a call
runs (which digit each pass takes, where its keys and values come from and go: the last
pass must land in the returned arrays) run on the host by numpy models of the kernels
(tests.support.module_machine), against numpy. The kernels themselves are checked
against numpy on the GPU (tests/gpu/test_radix.py); this checks the Python around them
on CI."""
import numpy as np
import pytest

import scangen
from scangen.plan import NULL, BufferArg
from scangen.runtime.modules import ModuleRuntime
from tests.support import digit_offsets, simulate_device
from tests.support.module_machine import ModuleMachine


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
def memory(monkeypatch, rng):
    """Arrays in host memory at made-up addresses, and every primitive's plan run on the
    host (tests.support.module_machine) over them: which buffers each launch reads and
    writes is the plan's, and the result is what those buffers hold after."""
    simulate_device(monkeypatch)
    memory = Memory()
    from scangen import interop
    monkeypatch.setattr(interop._Kind, "empty",
                        lambda self, shape, dtype, like, stream, current:
                        memory.empty(shape, dtype))
    machine = ModuleMachine(rng)
    memory.plans, memory.ran = [], []

    def run(self, plan, arrays, stream, values=None):
        memory.plans.append(plan)
        machine.run(plan, {name: memory.at(view) for name, view in arrays.items()}, values)
        memory.ran += machine.ran

    monkeypatch.setattr(ModuleRuntime, "run", run)
    return memory


def onesweeps(plan):
    """(shift, bits) of each radix_onesweep launch of a plan."""
    return [(args["shift"], int(args["mask"]).bit_length())
            for args in (dict(launch.args) for launch in plan.launches
                         if launch.kernel.name == "radix_onesweep")]


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
    [plan] = memory.plans
    assert onesweeps(plan) == [(8 * k, 8) for k in range(passes)]
    # one count of every pass's digits, over the caller's keys, before the first pass
    counts = dict(plan.launches[0].args)
    assert plan.launches[0].kernel.name == "radix_digit_counts"
    assert (counts["keys"], counts["passes"]) == (BufferArg("keys"), passes)
    assert ("digit_counts", passes * 256 * 8) in plan.zeroed
    # the first pass reads the caller's arrays, the last one writes the returned ones
    first, last = dict(plan.launches[1].args), dict(plan.launches[-1].args)
    assert (first["keys"], first["values"]) == (BufferArg("keys"), BufferArg("values"))
    assert (last["keys_out"], last["values_out"]) == (BufferArg("out_keys"),
                                                      BufferArg("out_values"))
    np.testing.assert_array_equal(given_keys.host.view(np.uint8), keys.view(np.uint8))


def test_argsort_numbers_the_keys_in_its_first_pass(memory, rng):
    keys = keys_of(rng, "float64", 5000)
    got = scangen.argsort(memory.array(keys))
    np.testing.assert_array_equal(got.host, np.argsort(keys, kind="stable"))
    first = dict(memory.plans[0].launches[1].args)
    assert first["values"] is NULL  # no values array: the kernel numbers the keys
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
    assert onesweeps(memory.plans[0]) == shifts


def test_empty_keys_launch_nothing(memory):
    got_keys, got_values = scangen.radix_sort(memory.array(np.zeros(0, np.int32)),
                                              memory.array(np.zeros(0, np.float32)))
    assert got_keys.host.size == 0 and got_values.host.size == 0
    assert not memory.ran


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
    [plan] = memory.plans
    assert onesweeps(plan) == [(s, min(8, end - s)) for s in range(shift, end, 8)]
    assert dict(plan.launches[1].args)["values"] is NULL  # the first pass numbers the keys
    assert [name for name, _ in memory.ran][-2:] == ["radix_places_from_order",
                                                     "radix_digit_starts"]
    assert dict(plan.launches[-1].args)["mask"] == (1 << bits) - 1


def test_wide_digits_of_no_keys(memory):
    dest, digit_start = scangen.RadixDigitOffsets("uint16", 12)(
        memory.array(np.zeros(0, np.uint16)), 0)
    assert dest.host.size == 0 and not memory.ran
    assert memory.plans[0].zeroed == (("digit_start", 8 << 12),)
    np.testing.assert_array_equal(digit_start.host, np.zeros(1 << 12))


@pytest.mark.parametrize("dtype,shift,bits", [("uint32", 0, 8), ("int32", 28, 4),
                                              ("uint8", 0, 1), ("float64", 52, 8),
                                              ("int64", 60, 8)])
@pytest.mark.parametrize("descending", [False, True])
def test_digit_offsets_of_one_pass(memory, rng, dtype, shift, bits, descending):
    """A digit up to 8 bits: tile counts, their scan over every (digit, tile), tile places;
    the result is the definition's, on sizes around the tile."""
    offsets = scangen.RadixDigitOffsets(dtype, bits)
    tile = offsets.modules[0].tile_size
    for n in [1, tile - 1, tile, 2 * tile + 1]:
        del memory.ran[:]
        keys = keys_of(rng, dtype, n)
        dest, digit_start = offsets(memory.array(keys), shift, descending=descending)
        want_dest, want_start = digit_offsets(keys, shift, bits, descending)
        np.testing.assert_array_equal(dest.host, want_dest)
        np.testing.assert_array_equal(digit_start.host, want_start)
        tiles = -(-n // tile)
        assert memory.ran == [("radix_tile_counts", tiles),
                              ("radix digit offsets: tile bases", (1 << bits) * tiles),
                              ("radix_tile_places", tiles)]
