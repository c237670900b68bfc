"""The compaction primitives without a GPU: construction checks, the kernels they render,
nvcc compiling them (where nvcc is on PATH), and errors that name the predicate."""
import concurrent.futures
import os
import types

import numpy as np
import pytest

import scangen
from scangen.tuning import HELD_ELEMENT_BYTES

from tests.support import marked_source_line, simulate_device
from tests.support import needs_nvcc



def every_primitive(dtype):
    return [scangen.Select(dtype, "x > 0 && i % 7 != 3"),
            scangen.Select(dtype, flags=np.bool_),
            scangen.Select(dtype, flags=np.int32, keep=False),
            scangen.Partition(dtype, "x < 0"),
            scangen.Unique(dtype),
            scangen.RunLengthEncode(dtype)]


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64", "float32", "float64"])
def test_kernels_hold_their_hooks(dtype):
    select, flags, rejected, part, unique, rle = every_primitive(dtype)
    c = scangen.ELEMENT_TYPES[np.dtype(dtype)].c_name
    assert f"bool scangen_keep(const {c} x, long long i)" in select.source
    assert "x > 0 && i % 7 != 3" in select.source
    assert "const bool *__restrict__ flags" in flags.source
    assert "const int *__restrict__ flags" in rejected.source
    assert "!(flags[i] != 0)" in rejected.source
    assert "last_item + (i - prev_item)" in part.source
    assert part.kernel.plan(1 << 24).strategy == "reduce_then_scan"
    # a condition on the values themselves keeps one pass (reduce_then_scan reads x twice);
    # flags are cheap to read again
    for kernel in (unique.kernel, rle.kernel):
        assert kernel.plan(1 << 30).strategy == "decoupled_lookback"
        assert (kernel.spec.section_size, kernel.spec.block_size) == (4096, 128)
    assert (flags.kernel.spec.section_size, flags.kernel.spec.block_size) == (2048, 128)
    assert scangen.Unique(dtype, section_size=1024).kernel.spec.section_size == 1024
    assert flags.kernel.plan(1 << 26).strategy == "reduce_then_scan"
    assert scangen.Unique(dtype, strategy="reduce_then_scan").kernel.plan(1 << 26).strategy \
        == "reduce_then_scan"
    assert "(i == 0 || !scangen_equal(x[i], x[i - 1]))" in unique.source
    # a predicate's x is loaded once and held in registers to its output statement where a
    # thread's elements fit (scangen.kernel.HeldElement); a mask's x and a run head's are
    # read where the hooks name them
    itemsize = np.dtype(dtype).itemsize
    for primitive in (select, part):
        module = primitive.kernel.scan_module
        held = module.scan.items_per_thread * itemsize <= HELD_ELEMENT_BYTES
        assert module.holds_elements == held == (itemsize <= 4)
        assert ("UserIO::element_t elements[ITEMS_PER_THREAD];" in primitive.source) == held
        assert "out[prev_item] = element;" in primitive.source
    for primitive in (flags, rejected, unique, rle):
        assert primitive.kernel.scan_module.hooks.counting.element is None
        assert "unsigned rows[ITEMS_PER_THREAD];" in primitive.source
    # Run-length encoding in one pass: heads counted, each run's value written at its head,
    # with the length of the run before it (whose head is prev_last_counted)
    assert "counts[prev_item - 1] = i - prev_last_counted;" in rle.source
    assert rle.kernel.scan_module.tracks_last_counted
    assert "run_lengths" not in rle.source
    # from 2^32 elements: heads with their starts, then the lengths, which read the number
    # of runs from the device (queued right after the heads)
    wide_heads, wide_lengths = rle.wide_kernels()
    assert "starts[prev_item] = i;" in wide_heads.source
    lengths = wide_lengths.module_source().text
    assert "const long long total = *runs;" in lengths
    assert "run_lengths(const long long *__restrict__ starts, long long *__restrict__ counts, " \
        "const long long *__restrict__ runs, long long end)" in lengths
    for primitive in (select, flags, rejected, part, unique, rle):
        assert primitive.dtype == np.dtype(dtype)
    for kernel in (p.kernel for p in (select, flags, rejected, part, unique, rle)):
        assert kernel.spec.etype.dtype == np.int64  # 64-bit counts
        assert kernel.scan_module.counts_by_ballots  # counted with ballots


@needs_nvcc
def test_every_primitive_compiles():
    primitives = [p for dtype in ("int8", "uint64", "float32", "float64")
                  for p in every_primitive(dtype)]
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda p: p.check_compile(), primitives))


@needs_nvcc
def test_a_predicate_that_does_not_compile_is_named():
    with pytest.raises(scangen.ScanCompileError, match="in your predicate") as caught:
        scangen.Select(np.float32, "x > undefined_name").check_compile()
    assert marked_source_line(str(caught.value)) == "x > undefined_name"


@pytest.mark.parametrize("make,error,message", [
    (lambda: scangen.Select(np.float32, "x > 0; x = 1"), scangen.UserCodeError,
     "predicate must be a single C expression"),
    (lambda: scangen.Select(np.float32, "(x > 0"), scangen.UserCodeError, "unclosed"),
    (lambda: scangen.Select(np.float32), ValueError,
     "give a predicate or the dtype of a flags mask .* not neither"),
    (lambda: scangen.Select(np.float32, "x > 0", flags=np.bool_), ValueError, "not both"),
    (lambda: scangen.Select(np.float32, flags=np.float32), TypeError,
     "flags must be bool or an integer dtype"),
    (lambda: scangen.Select(np.bool_, "x > 0"), TypeError, "unsupported dtype bool"),
    (lambda: scangen.Partition(np.int32, "x > 0", strategy="decoupled_lookback"), ValueError,
     "last_item"),
    (lambda: scangen.Partition(np.int32, "x > 0", reverse_rejected=1), TypeError,
     "reverse_rejected"),
])
def test_bad_requests_are_refused_before_any_gpu_work(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_count_read_on_the_host_waits_for_its_stream_and_copies_nothing(monkeypatch):
    """The kernel writes a host-read count straight into mapped page-locked memory
    (scangen.runtime.mapped.MappedWord): reading it synchronises the call's stream and reads the host array; an
    empty input sets it on the host, with nothing queued. A count left on the device is
    copied after the stream's work."""
    from scangen.primitives import compaction
    from scangen.runtime import mapped

    events = []

    def no_page_locked_memory(count):
        count.host, count.ptr = np.array([-1], np.int64), 0x1000

    simulate_device(monkeypatch)  # the count is kept per thread and context
    monkeypatch.setattr(mapped.MappedWord, "__init__", no_page_locked_memory)
    monkeypatch.setattr(compaction, "synchronize", lambda stream: events.append(("sync", stream)))
    monkeypatch.setattr(compaction, "memset_d8_async", lambda *a: events.append(("memset",)))
    monkeypatch.setattr(compaction, "copy_to_host",
                        lambda host, address, stream: events.append(("copy", address, stream)))
    select = scangen.Select("float32", "x > 0")
    stream = types.SimpleNamespace(handle=0x55)
    call = types.SimpleNamespace(stream=stream)

    count, view = select._launch(call, [], 0, count_on_device=False)
    assert count is view is select._counts.get() and events == []
    assert count.host[0] == 0
    count.host[0] = 123  # as the kernel would write it
    assert select._read(count, stream) == 123
    assert events == [("sync", stream)]
    events.clear()
    select._read(types.SimpleNamespace(ptr=0x2000), stream)
    assert events == [("copy", 0x2000, stream)]


def test_count_buffers_and_radix_scratch_are_each_threads_own(monkeypatch):
    """The one-shot primitives share their objects between threads, which may queue work on
    one stream at once: a compaction's count and a radix sort's scratch (per
    stream) are kept per calling thread, and kept between one thread's calls."""
    from scangen.runtime import mapped

    simulate_device(monkeypatch)  # counts and scratch are kept per thread and context
    monkeypatch.setattr(mapped, "MappedWord", object)  # no page-locked memory here
    select = scangen.Select("float32", "x > 0")
    passes = scangen.RadixSort("uint32")._runtime
    stream = types.SimpleNamespace(handle=0x55)

    def buffers():
        return select._counts.get(), passes.scratch(None), passes.scratch(stream)

    here = buffers()
    assert all(a is b for a, b in zip(here, buffers()))
    assert here[1] is not here[2]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        there = pool.submit(buffers).result()
    assert all(a is not b for a, b in zip(here, there))
    select.release_device_memory()
    assert select._counts.get() is not here[0]


def test_a_partition_with_the_rejected_reversed_needs_no_total():
    """reverse_rejected places each rejected element from the end back (CUB's order), by
    its own position and the count before it: no last_item, so the single-pass strategies
    take it, and its repr says so."""
    for strategy in ("decoupled_lookback", "chained", "auto"):
        part = scangen.Partition(np.float32, "x > 0", reverse_rejected=True, strategy=strategy)
        assert "out[n - 1 - (i - prev_item)] = element;" in part.source
        assert not part.kernel.scan_module.hooks.uses_last_item
    assert "reverse_rejected=True" in repr(part)
    assert "reverse_rejected" not in repr(scangen.Partition(np.float32, "x > 0"))
    assert str(part.plan(1 << 20)).splitlines()[1].split()[1] == "decoupled_lookback"
