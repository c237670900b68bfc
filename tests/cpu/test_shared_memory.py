"""Shared memory: the defaults fit every algorithm, value width and kind of scan.

A section the user leaves unnamed must fit the static shared memory of a block (48 KiB)
whatever is scanned: wide structs, segmented (value, head) pairs, counting scans. These
build every algorithm x strategy x value width with no section named, check the spec,
render it, and compile a few with nvcc where it is on PATH.
"""
import dataclasses
import re
import shutil
import sys
import types

import numpy as np
import pytest

from scangen import ALGORITHMS, STRATEGIES, Scan, ScanKernel, SegmentedScan, Tuning, tuning
from scangen.compile import CompiledModule
from scangen.runtime import gpu, launcher, streams
from scangen.spec import MAX_STATIC_SHARED_BYTES
from tests.support import COMPACTION, WIDE_STRUCTS, field_sums

NVCC = shutil.which("nvcc")

#: From 1-byte integers to a 48-byte struct.
DTYPES = [np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.float32), np.dtype(np.float64),
          np.dtype(np.complex128), *WIDE_STRUCTS.values()]


def _operator(dtype):
    return field_sums(dtype) if dtype.names else "add"


def _tuned(spec, counts=False):
    """(section, items per thread) the defaults start from, before any shrinking."""
    if spec.algorithm == "warp_shuffle":
        tile = tuning.COUNTING.tile() if counts else tuning.SCAN.tile(spec.acc_itemsize)
        return tile.section_size, tile.items_per_thread
    return tuning.DEFAULT_SECTION_SIZE, ALGORITHMS[spec.algorithm].default_items_per_thread


def _check_default(spec, counts=False):
    """The default fits, and is the first that fits of the tuned tile and its halvings:
    first of the items per thread (coarsening algorithms), then of the threads."""
    assert spec.shared_bytes <= MAX_STATIC_SHARED_BYTES, spec
    section, items = _tuned(spec, counts)
    coarsening = ALGORITHMS[spec.algorithm].coarsening_is_parameter
    while True:
        candidate = dataclasses.replace(spec, section_size=section, items_per_thread=items)
        if candidate.shared_bytes <= MAX_STATIC_SHARED_BYTES:
            break
        section //= 2
        if coarsening and items > 1:
            items //= 2
    assert (spec.section_size, spec.items_per_thread) == (section, items), spec


def _name(dtype):
    return f"struct{dtype.itemsize}" if dtype.names else dtype.name


@pytest.mark.parametrize("segmented", [False, True], ids=["plain", "segmented"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_the_default_section_fits(dtype, algorithm, segmented):
    for strategy in STRATEGIES:
        if segmented:
            kernel = SegmentedScan(dtype, _operator(dtype), algorithm=algorithm,
                                   strategy=strategy).kernel("flags", np.dtype(np.bool_))
        else:
            kernel = Scan(dtype, _operator(dtype), algorithm=algorithm, strategy=strategy)
        _check_default(kernel.spec)
        assert kernel.spec.segmented == segmented and not kernel.spec.dynamic_shared
        assert "__global__" in kernel.source and "extern __shared__" not in kernel.source


def test_the_reported_struct_with_double_buffering():
    """(count, mean, m2) with kogge_stone_double_buffered and no section: two buffers of
    1024 24-byte values do not fit; half of them do."""
    dtype = WIDE_STRUCTS[24]
    scan = Scan(dtype, field_sums(dtype), algorithm="kogge_stone_double_buffered")
    assert scan.spec.section_size == 512
    _check_default(scan.spec)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_the_default_counting_section_fits(dtype, algorithm):
    for strategy in ("auto", "hierarchical", "reduce_then_scan"):
        kernel = ScanKernel(dtype, "add", counts=True, algorithm=algorithm, strategy=strategy,
                            arguments="const float *x, long long *out",
                            input_expr="x[i] > 0.5f", output_statement="out[i] = item;")
        _check_default(kernel.spec, counts=True)
        assert "__global__" in kernel.source


def test_the_tuned_tiles_are_kept_where_they_fit():
    """The shrinking leaves alone every default that fitted before."""
    assert Scan(np.float32).spec.section_size == tuning.SCAN.tile(4).section_size
    assert Scan(np.float64).spec.section_size == tuning.SCAN.tile(8).section_size
    counting = ScanKernel("int32", counts=True, **COMPACTION)
    assert (counting.spec.section_size, counting.spec.items_per_thread) == \
        (tuning.COUNTING.tile().section_size, tuning.COUNTING.tile().items_per_thread)
    for algorithm in ALGORITHMS:
        assert Scan(np.int32, algorithm=algorithm).spec.section_size == \
            (tuning.SCAN.tile(4).section_size if algorithm == "warp_shuffle"
             else tuning.DEFAULT_SECTION_SIZE)


def test_only_what_the_user_left_unnamed_shrinks():
    dtype = WIDE_STRUCTS[48]
    # items per thread named: the section shrinks around them
    spec = Scan(dtype, field_sums(dtype), algorithm="coarsened", items_per_thread=2).spec
    assert spec.items_per_thread == 2 and spec.shared_bytes <= MAX_STATIC_SHARED_BYTES
    # a named section is the user's: kept (past 48 KiB, in dynamic shared memory)
    spec = Scan(dtype, field_sums(dtype), algorithm="coarsened", section_size=1024).spec
    assert spec.section_size == 1024 and spec.shared_bytes > MAX_STATIC_SHARED_BYTES


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("algorithm,dtype,segmented", [
    ("kogge_stone_double_buffered", WIDE_STRUCTS[24], False),
    ("coarsened", WIDE_STRUCTS[32], True),
    ("warp_shuffle", WIDE_STRUCTS[48], True),
    ("brent_kung", WIDE_STRUCTS[12], True),
], ids=["double_buffered-24", "coarsened-32-segmented", "warp_shuffle-48-segmented",
        "brent_kung-12-segmented"])
def test_shrunk_defaults_compile(algorithm, dtype, segmented):
    if segmented:
        kernel = SegmentedScan(dtype, field_sums(dtype), algorithm=algorithm).kernel(
            "flags", np.dtype(np.bool_))
    else:
        kernel = Scan(dtype, field_sums(dtype), algorithm=algorithm)
    kernel.check_compile()


# --- sections past 48 KiB: dynamic shared memory --------------------------------------------

#: A named section past the static limit for each algorithm: (dtype, section, items).
LARGE_SECTIONS = {
    "naive": (WIDE_STRUCTS[48], 1024, None),
    "kogge_stone": (WIDE_STRUCTS[48], 1024, None),
    "kogge_stone_double_buffered": (WIDE_STRUCTS[32], 1024, None),
    "brent_kung": (WIDE_STRUCTS[32], 2048, None),
    "coarsened": (np.dtype(np.float64), 8192, 8),
    "warp_shuffle": (np.dtype(np.float32), 16384, 16),
}

#: The arrays of the section and of the block scan's scratch, declared static.
_STATIC_SECTION = re.compile(r"__shared__ acc_t \w+(\[\d+\])?"
                             r"\[(SECTION_SLOTS|SECTION_SIZE|BLOCK_SIZE|WARP_SIZE \+ 1)\]")


def _large(algorithm, strategy="auto", **kwargs):
    dtype, section, items = LARGE_SECTIONS[algorithm]
    return Scan(dtype, _operator(dtype), algorithm=algorithm, section_size=section,
                items_per_thread=items, strategy=strategy, **kwargs)


def _holds_sections(launch) -> int:
    return 0 if launch.kernel.family.name == "add_prefixes" else 2 if launch.persistent else 1


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_a_named_section_past_48_kib_is_held_in_dynamic_shared_memory(algorithm):
    for strategy in STRATEGIES:
        scan = _large(algorithm, strategy)
        spec = scan.spec
        assert spec.section_size == LARGE_SECTIONS[algorithm][1]  # named: never shrunk
        assert spec.dynamic_shared
        assert MAX_STATIC_SHARED_BYTES < spec.shared_bytes <= tuning.max_shared_bytes("sm_90")
        source = scan.source
        assert source.count("extern __shared__") == 1
        assert not _STATIC_SECTION.search(source), _STATIC_SECTION.search(source).group(0)
        section = spec.section_size
        for n in (1, section - 1, section, section + 1, 3 * section, section ** 2 + 1):
            plan = scan.plan(n)
            for launch in plan.launches:
                holds = _holds_sections(launch)
                expected = spec.section_shared_bytes(holds) if holds else 0
                assert launch.dynamic_shared_bytes == expected, (launch.kernel.name, n)
                assert (f"{launch.shared_bytes} B smem ({expected} dynamic)>>>" in str(plan)) \
                    == bool(expected)
                # what the compiled module opts in to for the kernel
                assert scan.kernel.scan_module.dynamic_shared().get(launch.kernel.name, 0) \
                    == expected


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_static_shared_memory_up_to_48_kib_and_dynamic_past_it(algorithm):
    """The same algorithm and value on both sides of the static limit: the largest section
    that fits is declared statically and launched with no dynamic shared memory; the next
    one is held dynamically."""
    dtype, section, items = LARGE_SECTIONS[algorithm]
    smaller = Scan(dtype, _operator(dtype), algorithm=algorithm, section_size=section // 2,
                   items_per_thread=items, strategy="hierarchical")
    assert smaller.spec.shared_bytes <= MAX_STATIC_SHARED_BYTES < _large(algorithm).spec.shared_bytes
    assert not smaller.spec.dynamic_shared
    assert "extern __shared__" not in smaller.source and "scangen_shared_acc" not in smaller.source
    assert _STATIC_SECTION.search(smaller.source)
    assert all(launch.dynamic_shared_bytes == 0 for launch in smaller.plan(10 ** 6).launches)
    assert smaller.kernel.scan_module.dynamic_shared() == {}


def test_persistent_tiles_hold_two_sections_dynamically():
    scan = Scan(np.float64, "add", section_size=4096, strategy="decoupled_lookback",
                tuning=Tuning(tile_persistent_min_bytes=0))
    spec = scan.spec
    assert spec.has_persistent_tiles and spec.dynamic_shared
    (launch,) = scan.plan(10 ** 6).launches
    assert launch.persistent and launch.kernel.name == "scan_tiles_persistent_user"
    assert launch.dynamic_shared_bytes == spec.section_shared_bytes(2) == \
        (2 * spec.section_slots + ALGORITHMS["warp_shuffle"].scratch_elements(
            4096, spec.block_size)) * 8
    assert "acc_t (*const sections)[SECTION_SLOTS] = " in scan.source


def test_counting_kernels_take_dynamic_shared_memory_only_where_they_hold_values():
    """A counting module counts its user io by ballots (no section in shared memory); the
    section totals are scanned as values, in sections of the same size."""
    kernel = ScanKernel("int64", counts=True, section_size=8192, strategy="reduce_then_scan",
                        **COMPACTION)
    spec = kernel.spec
    assert kernel.scan_module.counts_by_ballots and spec.dynamic_shared
    launches = kernel.plan(10 ** 8).launches
    assert {launch.kernel.io for launch in launches} == {"user", "totals"}
    for launch in launches:
        assert launch.dynamic_shared_bytes == (
            0 if launch.kernel.io == "user" else spec.section_shared_bytes(1)), launch.kernel


def test_refused_past_what_a_block_may_have():
    dtype = WIDE_STRUCTS[48]
    limit = tuning.max_shared_bytes("sm_90")
    assert limit == tuning.max_shared_bytes() == 227 * 1024
    with pytest.raises(ValueError, match=rf"section_size 4096 of .* with warp_shuffle needs "
                                         rf"\d+ bytes of shared memory; the limit of a block "
                                         rf"on sm_90 is {limit}: use a smaller section_size"):
        Scan(dtype, field_sums(dtype), section_size=4096)
    # the next smaller section fits
    assert Scan(dtype, field_sums(dtype), section_size=2048).spec.shared_bytes <= limit


# --- the launch: the device's limit, the opt-in attribute, the bytes each launch passes -----

class _FakeDevice:
    def __init__(self, optin, name="NVIDIA GeForce RTX 4090", capability=(8, 9)):
        self.optin, self._name, self.capability = optin, name, capability

    def get_attribute(self, attribute):
        assert attribute == "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
        return self.optin

    def compute_capability(self):
        return self.capability

    def name(self):
        return self._name


def _fake_driver(device):
    return types.SimpleNamespace(
        Context=types.SimpleNamespace(get_device=lambda: device),
        device_attribute=types.SimpleNamespace(
            MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"))


def test_a_device_with_less_shared_memory_refuses_at_launch(monkeypatch):
    """make_spec checks against Hopper's limit; a device that offers less refuses before
    compiling, naming itself and its limit."""
    scan = _large("coarsened")  # 84 KiB: within an Ada block's 99 KiB
    assert scan.spec.shared_bytes < 99 * 1024
    big = Scan(np.float64, "add", algorithm="coarsened", section_size=16384,
               items_per_thread=16)
    assert 99 * 1024 < big.spec.shared_bytes <= tuning.max_shared_bytes()
    monkeypatch.setattr(gpu, "require_pycuda", lambda: _fake_driver(_FakeDevice(99 * 1024)))
    gpu.check_shared_memory(scan.kernel.scan_module)  # fits this device
    with pytest.raises(ValueError, match=rf"section_size 16384 of float64 with coarsened needs "
                                         rf"{big.spec.shared_bytes} bytes of shared memory; the "
                                         rf"limit of a block on NVIDIA GeForce RTX 4090 \(sm_89\) "
                                         rf"is {99 * 1024}: use a smaller section_size"):
        gpu.check_shared_memory(big.kernel.scan_module)
    # a spec within 48 KiB asks the device nothing
    monkeypatch.setattr(gpu, "require_pycuda", lambda: pytest.fail("asked the device"))
    gpu.check_shared_memory(Scan(np.float64).kernel.scan_module)


class _FakeFunction:
    """A prepared pycuda Function: what scangen calls on it, recorded."""

    arg_format = "Pq"

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def prepare(self, arg_format):
        pass

    def set_attribute(self, attribute, value):
        self.calls.append(("set_attribute", self.name, attribute, value))

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        self.calls.append(("prepared_async_call", self.name, grid, shared_size))


@pytest.fixture
def fake_pycuda(monkeypatch):
    """pycuda.driver's function_attribute, as scangen.compile imports it."""
    driver = types.ModuleType("pycuda.driver")
    driver.function_attribute = types.SimpleNamespace(
        MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")
    package = types.ModuleType("pycuda")
    package.driver = driver
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setitem(sys.modules, "pycuda._pvt_struct", None)  # no fast path: see below


def _compiled(scan_module, calls):
    module = types.SimpleNamespace(get_function=lambda name: _FakeFunction(name, calls))
    return CompiledModule(module, scan_module)


def test_the_compiled_module_opts_in_once_per_kernel_that_needs_it(fake_pycuda):
    calls = []
    spec = _large("kogge_stone_double_buffered", "hierarchical").kernel.scan_module
    compiled = _compiled(spec, calls)
    assert compiled.dynamic_shared == spec.dynamic_shared()
    assert sorted(calls) == sorted(
        ("set_attribute", name, "MAX_DYNAMIC_SHARED_SIZE_BYTES", nbytes)
        for name, nbytes in spec.dynamic_shared().items())
    assert "add_prefixes_user" not in {call[1] for call in calls}
    # within 48 KiB: no attribute is set
    calls.clear()
    _compiled(Scan(np.float64, strategy="hierarchical").kernel.scan_module, calls)
    assert calls == []


def test_each_launch_passes_its_dynamic_shared_memory(fake_pycuda, monkeypatch):
    """The plan's bytes reach the launch: prepared_async_call's shared_size (where pycuda
    lacks the fast path's pieces) and _launch_kernel's fourth argument."""
    calls = []
    scan_module = _large("coarsened", "hierarchical").kernel.scan_module
    compiled = _compiled(scan_module, calls)
    calls.clear()
    plan = launcher.make_plan(scan_module, 10 ** 6)
    scratch = types.SimpleNamespace(bind=lambda plan, stream: {
        t.name: 0x1000 * (i + 1) for i, t in enumerate(plan.temporaries)}, generation=0)
    launcher.Launcher(plan, compiled, scratch)((np.uintp(0x10), np.uintp(0x20)), None)
    assert [(name, shared) for _, name, _, shared in calls] == \
        [(launch.kernel.name, launch.dynamic_shared_bytes) for launch in plan.launches]
    assert {shared for _, _, _, shared in calls} == {0, scan_module.scan.section_shared_bytes(1)}

    fast = []
    function = types.SimpleNamespace(
        arg_format="Pq", texrefs=[],
        _launch_kernel=lambda grid, block, packed, shared, stream: fast.append(shared))
    monkeypatch.setitem(sys.modules, "pycuda._pvt_struct",
                        types.SimpleNamespace(pack=lambda fmt, *args: b"packed"))
    launcher._prepared_launch(function, 12345)((1, 1, 1), (32, 1, 1), None, 1, 2)
    launcher._prepared_launch(function)((1, 1, 1), (32, 1, 1), None, 1, 2)
    assert fast == [12345, 0]


def test_launches_on_a_foreign_stream_opt_in_and_pass_the_bytes(monkeypatch):
    calls = []

    class Driver:
        def cuModuleLoadData(self, module, cubin):
            return 0

        def cuModuleGetFunction(self, handle, module, name):
            handle._obj.value = 0xF00 if name == b"scan_sections_user" else 0xB00
            return 0

        def cuFuncSetAttribute(self, function, attribute, value):
            calls.append(("cuFuncSetAttribute", function.value, attribute, value))
            return 0

        def cuLaunchKernel(self, function, *args):
            calls.append(("cuLaunchKernel", function, args[6]))
            return 0

    monkeypatch.setattr(streams, "_library", Driver())
    functions = streams.RawFunctions(b"cubin", {"scan_sections_user": 70000})
    assert functions.function("scan_sections_user") == 0xF00
    assert functions.function("scan_sections_user") == 0xF00  # the attribute is set once
    assert functions.function("add_prefixes_user") == 0xB00
    assert calls == [("cuFuncSetAttribute", 0xF00, 8, 70000)]  # ..._MAX_DYNAMIC_SHARED_SIZE_BYTES
    streams.RawLaunch(0xF00, "Pq", 70000)((2, 1, 1), (256, 1, 1), streams.RawStream(0x44),
                                          np.uintp(0x10), np.int64(5))
    streams.RawLaunch(0xB00, "Pq")((2, 1, 1), (256, 1, 1), streams.RawStream(0x44),
                                   np.uintp(0x10), np.int64(5))
    assert calls[1:] == [("cuLaunchKernel", 0xF00, 70000), ("cuLaunchKernel", 0xB00, 0)]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("algorithm", ["kogge_stone_double_buffered", "coarsened",
                                       "warp_shuffle"])
def test_dynamic_sections_compile(algorithm):
    """A representative few (tests/cpu/test_compile_nvcc.py compiles every algorithm with
    ptxas's shared memory checked)."""
    _large(algorithm).check_compile()
