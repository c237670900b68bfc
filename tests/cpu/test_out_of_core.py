"""scangen.out_of_core without a GPU: the pipeline's schedule driven by a CPU executor (data
through every buffer slot, the carry between chunks, with a non-commutative operator), the
schedule's waits checked against every buffer reuse, the budget, progress and refusals."""
import io
import mmap
import sys
import threading
import types

import numpy as np
import pytest

import scangen
from scangen import out_of_core as ooc
from scangen.chunked import ReferenceBackend
from tests.support import AFFINE, random_input, scan_reference


class CPUExecutor:
    """The steps on numpy buffers, one per slot and place, executed in issue order: wrong
    slots or a carry taken from the wrong chunk show up in the result."""

    def __init__(self, x, out, chunk_elements, slots, mode, op, first_carry, direct=False):
        self.x, self.out, self.mode, self.op, self.direct = x, out, mode, op, direct
        places = ("device_in", "device_out") if direct else \
            ("pinned_in", "device_in", "device_out", "pinned_out")
        self.buffers = {place: [np.empty(chunk_elements, x.dtype) for _ in range(slots)]
                        for place in places}
        self.carries = np.array([first_carry, first_carry], x.dtype)
        self.order = []

    def _move(self, step, source, target):
        m = step.stop - step.start
        self.buffers[target][step.slot][:m] = self.buffers[source][step.slot][:m]

    def stage(self, step):
        self.buffers["pinned_in"][step.slot][:step.stop - step.start] = \
            self.x[step.start:step.stop]

    def upload(self, step):
        if self.direct:  # from the host array, pinned in place
            self.buffers["device_in"][step.slot][:step.stop - step.start] = \
                self.x[step.start:step.stop]
        else:
            self._move(step, "pinned_in", "device_in")

    def compute(self, step):
        self.order.append(step.chunk)
        m = step.stop - step.start
        chunk = self.buffers["device_in"][step.slot][:m]
        carry = self.carries[step.chunk % 2:step.chunk % 2 + 1]
        self.buffers["device_out"][step.slot][:m] = ReferenceBackend().scan(
            chunk, self.op, self.mode, carry)
        self.carries[(step.chunk + 1) % 2] = ReferenceBackend().scan(
            chunk, self.op, "inclusive", carry)[-1]

    def download(self, step):
        if self.direct:  # into the host array, pinned in place
            self.out[step.start:step.stop] = \
                self.buffers["device_out"][step.slot][:step.stop - step.start]
        else:
            self._move(step, "device_out", "pinned_out")

    def drain(self, step):
        if not self.direct:
            self.out[step.start:step.stop] = \
                self.buffers["pinned_out"][step.slot][:step.stop - step.start]


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "pinned_in_place"])
@pytest.mark.parametrize("slots", [2, 3])
@pytest.mark.parametrize("mode", scangen.MODES)
def test_schedule_scans_chunk_by_chunk_with_the_carry(rng, mode, slots, direct):
    n = int(rng.integers(100, 2000))
    chunk = int(rng.integers(1, n // 3))
    x = random_input(rng, "uint64", "affine_then", n)
    initial = random_input(rng, "uint64", "affine_then", 1)[0]
    out = np.full_like(x, 7)
    executor = CPUExecutor(x, out, chunk, slots, mode, AFFINE, initial, direct)
    seen = []
    steps = ooc.schedule(n, chunk, slots, staged_in=not direct, staged_out=not direct)
    ooc.run(steps, executor, lambda done, total: seen.append(done))
    np.testing.assert_array_equal(out, scan_reference(x, AFFINE, mode, initial=initial))
    chunks = -(-n // chunk)
    assert executor.order == list(range(chunks))
    assert seen == [min((k + 1) * chunk, n) for k in range(chunks)]


#: Which step writes and which reads each buffer of a slot.
BUFFERS = {"pinned in": ("stage", "upload"), "device in": ("upload", "compute"),
           "device out": ("compute", "download"), "pinned out": ("download", "drain")}


def hazards(steps, slots, buffers=tuple(BUFFERS)):
    """What can go wrong when each step starts as early as its waits, its stream's order
    and the host's order allow: reads before the write, writes before the last read (of
    ``buffers``, those the schedule uses)."""
    index = {(s.op, s.chunk): i for i, s in enumerate(steps)}
    before = [set() for _ in steps]  # the steps each one surely starts after
    last_on, last_host = {}, None
    for i, step in enumerate(steps):
        edges = {index[dep] for dep in step.after}
        stream = ooc.STREAMS[step.op]
        if stream is None:
            edges.add(last_host)
            last_host = i
        else:
            edges |= {last_on.get(stream), last_host}  # issued after the host's work
            last_on[stream] = i
        for j in edges - {None}:
            before[i] |= before[j] | {j}
    found = []

    def require(first, then, why):
        if index[first] not in before[index[then]]:
            found.append(f"{then} may start before {first}: {why}")

    chunks = max(s.chunk for s in steps) + 1
    for k in range(chunks):
        for name in buffers:
            writer, reader = BUFFERS[name]
            require((writer, k), (reader, k), f"{name} read before it is written")
            if k + slots < chunks:
                require((reader, k), (writer, k + slots), f"{name} overwritten while read")
        if k:
            require(("compute", k - 1), ("compute", k), "the carry")
    return found


@pytest.mark.parametrize("slots", [2, 3, 4])
def test_schedule_waits_for_every_buffer_reuse(slots):
    for n, chunk in ((10, 1), (10, 3), (12, 4), (5, 5), (1, 7)):
        steps = ooc.schedule(n, chunk, slots)
        assert hazards(steps, slots) == []
        for op in ooc.STREAMS:  # every element passes every step once, in order
            covered = [(s.start, s.stop) for s in steps if s.op == op]
            assert covered == ooc.chunk_bounds(n, chunk)


@pytest.mark.parametrize("slots", [2, 3, 4])
def test_schedules_of_arrays_pinned_in_place_wait_for_every_buffer_reuse(slots):
    """No staging (uploads from x pinned in place), no pinned output buffers (downloads into
    out pinned in place; the drain only waits), or both: the device buffers' reuse is still
    waited for, and the steps left cover every element once, in order."""
    for staged_in, staged_out in ((False, True), (True, False), (False, False)):
        used = [name for name in BUFFERS if (staged_in or name != "pinned in")
                and (staged_out or name != "pinned out")]
        for n, chunk in ((10, 1), (10, 3), (12, 4), (5, 5), (1, 7)):
            steps = ooc.schedule(n, chunk, slots, staged_in=staged_in, staged_out=staged_out)
            assert hazards(steps, slots, buffers=used) == []
            assert ("stage" in {s.op for s in steps}) == staged_in
            for op in {s.op for s in steps}:
                covered = [(s.start, s.stop) for s in steps if s.op == op]
                assert covered == ooc.chunk_bounds(n, chunk)
    # no outputs (a histogram of x pinned in place): no drain waits for anything, so only
    # the uploads' own waits keep a device buffer from being overwritten while computed
    for n, chunk in ((10, 1), (10, 3), (5, 5)):
        steps = ooc.schedule(n, chunk, slots, outputs=False, staged_in=False)
        assert {s.op for s in steps} == {"upload", "compute"}
        assert hazards(steps, slots, buffers=("device in",)) == []


@pytest.mark.parametrize("slots", [2, 3])
def test_a_schedule_without_outputs_uploads_and_computes_in_order(slots):
    """What a histogram streams: no downloads or drains, the input buffers' reuse waited
    for, the computes in chunk order."""
    for n, chunk in ((10, 1), (10, 3), (5, 5)):
        steps = ooc.schedule(n, chunk, slots, outputs=False)
        assert {s.op for s in steps} == {"stage", "upload", "compute"}
        assert hazards(steps, slots, buffers=("pinned in", "device in")) == []
        assert [s.chunk for s in steps if s.op == "compute"] == \
            list(range(len(ooc.chunk_bounds(n, chunk))))


@pytest.mark.parametrize("op,wait,hazard", [("compute", "upload", "device in read before"),
                                             ("download", "compute", "device out read before"),
                                             ("drain", "download", "pinned out read before")])
def test_hazard_check_finds_a_missing_wait(op, wait, hazard):
    # The waits before overwriting a buffer are implied as well by the host draining chunk
    # k - slots before it issues chunk k; those between streams are not.
    steps = ooc.schedule(10, 2, 3)
    broken = [ooc.Step(s.op, s.chunk, s.slot, s.start, s.stop,
                       tuple(d for d in s.after if s.op != op or d[0] != wait))
              for s in steps]
    assert any(hazard in h for h in hazards(broken, 3))


def test_budget_decides_the_chunk():
    budget = 64 << 20
    chunk = ooc.chunk_elements_for(budget, 4)
    assert 2 * 2 * chunk * 4 <= budget * (1 - 1 / 32) < 2 * 2 * (chunk + 1) * 4
    assert ooc.chunk_elements_for(1 << 40, 8) * 8 == ooc.DEFAULT_MAX_CHUNK_BYTES
    with pytest.raises(ValueError, match="cannot hold"):
        ooc.chunk_elements_for(10, 8)
    with pytest.raises(ValueError, match="at least 2"):
        ooc.schedule(10, 2, slots=1)


def test_stderr_progress_ends_with_a_line():
    text = io.StringIO()
    progress = ooc.StderrProgress(4, stream=text)
    progress(1 << 28, 1 << 29)
    progress(1 << 29, 1 << 29)
    assert text.getvalue().endswith("2.0 of 2.0 GiB (100%), " + text.getvalue().split(", ")[-1])
    assert text.getvalue().endswith("GB/s\n")


def test_refusals_before_any_gpu_work(rng):
    x = random_input(rng, "int32", "last_nonzero", 100)
    with pytest.raises(ValueError, match="1-D host"):
        ooc.inclusive_scan(x.reshape(10, 10), chunk_elements=4)
    with pytest.raises(ValueError, match="shape"):
        ooc.inclusive_scan(x, out=np.empty(100, np.int64), chunk_elements=4)
    read_only = np.empty_like(x)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ooc.exclusive_scan(x, out=read_only, chunk_elements=4)
    with pytest.raises(TypeError, match="bitwise"):
        ooc.inclusive_scan(x.astype(np.float32), "bit_or", chunk_elements=4)
    empty = np.empty(0, np.int32)
    assert ooc.inclusive_scan(empty, out=empty) is empty  # nothing to do, no GPU needed


# --- the CUDA executor on a fake driver ------------------------------------------------------

class FakeDriver:
    """Enough of pycuda.driver and pycuda.gpuarray for the out-of-core executor, on host
    memory: allocations are numpy byte arrays at made-up addresses, copies happen when
    issued, streams and events do nothing (the schedule's order is tested above)."""

    event_flags = types.SimpleNamespace(DISABLE_TIMING=2)

    class Stream:
        def wait_for_event(self, event):
            pass

        def synchronize(self):
            pass

    class Event:
        def __init__(self, flags=0):
            pass

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class Allocation(int):
        pass

    def __init__(self, free=1 << 34):
        self.memory, self.next, self.allocated, self.free = {}, 1 << 32, 0, free
        self.registered, self.pinned_buffers, self.refuse_registration = [], 0, None
        self.pinned_ranges = {}  # address -> bytes, of host memory registered
        self.staging = []  # the pinned buffers (pagelocked_empty), kept alive
        self.lock = threading.Lock()  # scangen pins on a thread of its own
        # thread -> its current context: the test's thread has the executor's
        self.contexts = {threading.get_ident(): self.CONTEXT}

    CONTEXT = 0xC0

    def driver_context(self):
        return self.contexts.get(threading.get_ident(), 0)

    def set_driver_context(self, handle):
        self.contexts[threading.get_ident()] = handle

    def pin_host_memory(self, address, nbytes):
        """scangen.runtime.streams.pin_host_memory (cuMemHostRegister): refused for memory
        of which any page is registered already."""
        if self.driver_context() != self.CONTEXT:  # the driver pins for a context
            raise RuntimeError("cuMemHostRegister failed: invalid context")
        with self.lock:
            if self.refuse_registration:
                raise RuntimeError(self.refuse_registration)
            page = mmap.PAGESIZE
            first, end = address // page * page, -(-(address + nbytes) // page) * page
            if any(start < end and first < start + size
                   for start, size in self.pinned_ranges.items()):
                raise RuntimeError("cuMemHostRegister failed: host memory already registered")
            self.registered.append(address)
            self.pinned_ranges[address] = nbytes

    def unpin_host_memory(self, address):
        with self.lock:
            self.registered.remove(address)
            del self.pinned_ranges[address]

    def is_pinned_host_memory(self, address):
        with self.lock:
            return any(start <= address < start + nbytes
                       for start, nbytes in self.pinned_ranges.items())

    def _check_pinned(self, host):
        """A copy's host side lies within one registration or pinned buffer: the driver
        stages (and does not overlap) any other."""
        begin, end = host.ctypes.data, host.ctypes.data + host.nbytes
        with self.lock:
            places = list(self.pinned_ranges.items()) + \
                [(buffer.ctypes.data, buffer.nbytes) for buffer in self.staging]
        assert any(start <= begin and end <= start + size for start, size in places), \
            "a copy from or to pageable memory, or across two registrations"

    def mem_get_info(self):
        return self.free, self.free

    def mem_alloc(self, nbytes):
        base = self.next
        self.memory[base] = np.zeros(nbytes, np.uint8)
        self.next += nbytes + (1 << 20)
        self.allocated += nbytes
        return self.Allocation(base)

    def view(self, address, dtype, count):
        base = max(b for b in self.memory if b <= address)
        offset = address - base
        return self.memory[base][offset:offset + count * np.dtype(dtype).itemsize].view(dtype)

    def pagelocked_empty(self, shape, dtype):
        self.pinned_buffers += 1
        self.staging.append(np.empty(shape, dtype))
        return self.staging[-1]

    def memcpy_htod_async(self, dest, src, stream=None):
        self._check_pinned(src)
        self.view(int(dest), np.uint8, src.nbytes)[:] = src.view(np.uint8)

    def memcpy_dtoh_async(self, dest, src, stream=None):
        self._check_pinned(dest)
        dest.view(np.uint8)[:] = self.view(int(src), np.uint8, dest.nbytes)

    def to_gpu(self, host):  # a synchronous copy, from pageable memory
        allocation = self.mem_alloc(host.nbytes)
        self.view(allocation, np.uint8, host.nbytes)[:] = host.view(np.uint8)
        return type("FakeGPUArray", (), {"gpudata": allocation})()


@pytest.fixture
def fake_driver(monkeypatch):
    driver = FakeDriver()
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = driver
    pycuda.gpuarray = types.SimpleNamespace(to_gpu=driver.to_gpu)
    for name, module in (("pycuda", pycuda), ("pycuda.driver", driver),
                         ("pycuda.gpuarray", pycuda.gpuarray)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(ooc, "current_context", lambda: None)
    monkeypatch.setattr(ooc, "pin_host_memory", driver.pin_host_memory)
    monkeypatch.setattr(ooc, "unpin_host_memory", driver.unpin_host_memory)
    monkeypatch.setattr(ooc, "is_pinned_host_memory", driver.is_pinned_host_memory)
    monkeypatch.setattr(ooc, "driver_context", driver.driver_context)
    monkeypatch.setattr(ooc, "set_driver_context", driver.set_driver_context)

    class NumpyCarryScan:
        """CarryScan's contract on the fake device memory."""

        def __init__(self, dtype, op, mode, **options):
            self.dtype, self.op, self.mode = np.dtype(dtype), op, mode

        def launch(self, pointers, n, stream):
            x, out, carry_in, carry_out = (driver.view(p, self.dtype, count)
                                           for p, count in zip(pointers, (n, n, 1, 1)))
            carry = carry_in.copy()
            out[:] = ReferenceBackend().scan(x, self.op, self.mode, carry)
            carry_out[:] = ReferenceBackend().scan(x, self.op, "inclusive", carry)[-1:]

    monkeypatch.setattr(ooc, "CarryScan", NumpyCarryScan)
    return driver


@pytest.mark.parametrize("slots", [2, 3])
@pytest.mark.parametrize("mode", scangen.MODES)
def test_cuda_executor_on_a_fake_driver(fake_driver, rng, mode, slots, capsys):
    n = 50_000
    x = random_input(rng, "uint64", "affine_then", n)
    budget = 64 * 1024  # bytes: chunks of under 2 K uint64 elements, many of them
    scan = ooc.inclusive_scan if mode == "inclusive" else ooc.exclusive_scan
    got = scan(x, AFFINE, max_device_bytes=budget, slots=slots, progress=True)
    np.testing.assert_array_equal(got, scan_reference(x, AFFINE, mode))
    assert fake_driver.allocated <= budget + 2 * 8  # the buffers, and the two carries
    err = capsys.readouterr().err
    assert "(100%)" in err and err.endswith("GB/s\n")


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("mode", scangen.MODES)
def test_arrays_pinned_in_place_need_no_pinned_buffers(fake_driver, rng, mode, in_place):
    """pin_in_place=True: x and out registered for the call (once where out is x), chunks
    uploaded from and downloaded into them, no pinned buffers, every registration undone."""
    n = 30_001
    x = random_input(rng, "uint64", "affine_then", n)
    want = scan_reference(x, AFFINE, mode)
    out = x if in_place else np.full_like(x, 7)
    scan = ooc.inclusive_scan if mode == "inclusive" else ooc.exclusive_scan
    got = scan(x, AFFINE, out=out, max_device_bytes=64 * 1024, pin_in_place=True)
    assert got is out
    np.testing.assert_array_equal(got, want)
    assert fake_driver.pinned_buffers == 0 and fake_driver.registered == []


@pytest.mark.parametrize("pin_threads", [1, 3])
@pytest.mark.parametrize("work", ["scan", "scan in place", "histogram"])
def test_arrays_pinned_in_place_are_pinned_a_few_chunks_at_a_time(fake_driver, monkeypatch, rng,
                                                                   work, pin_threads):
    """pin_in_place pins each array a run of pages at a time, a few chunks ahead of the
    copies and unpinned behind them (by one thread or several), so what is pinned at once
    stays a few chunks however long the array; every copy lies within one registration (the
    fake driver checks), and chunks that do not end on a page are cut where runs meet."""
    pinned_now, peak, lock = {}, [0], threading.Lock()
    pin, unpin = fake_driver.pin_host_memory, fake_driver.unpin_host_memory

    def pinning(address, nbytes):
        with lock:
            pin(address, nbytes)
            pinned_now[address] = nbytes
            peak[0] = max(peak[0], sum(pinned_now.values()))

    def unpinning(address):
        with lock:
            unpin(address)
            del pinned_now[address]

    monkeypatch.setattr(ooc, "PIN_THREADS", pin_threads)
    monkeypatch.setattr(ooc, "pin_host_memory", pinning)
    monkeypatch.setattr(ooc, "unpin_host_memory", unpinning)
    n, chunk, slots = 300_007, 3_001, 2  # chunks of 24,008 bytes: not whole pages
    x = random_input(rng, "uint64", "affine_then", n)
    if work == "histogram":  # nothing comes back: the uploads say when a chunk is done
        monkeypatch.setattr(ooc, "Histogram", _numpy_histogram(fake_driver))
        values = x.view(np.float64)
        want = np.histogram(values, 10, (-1e300, 1e300))[0]
        got, _ = ooc.histogram(values, 10, (-1e300, 1e300), chunk_elements=chunk,
                               slots=slots, pin_in_place=True)
    else:
        want = scan_reference(x, AFFINE, "inclusive")
        out = x if work == "scan in place" else np.full_like(x, 7)
        got = ooc.inclusive_scan(x, AFFINE, out=out, chunk_elements=chunk, slots=slots,
                                 pin_in_place=True)
    np.testing.assert_array_equal(got, want)
    arrays = 2 if work == "scan" else 1
    at_most = arrays * (slots + ooc.PIN_AHEAD_CHUNKS + 2) * (chunk * 8 + mmap.PAGESIZE)
    assert 0 < peak[0] <= at_most < x.nbytes / 4
    assert fake_driver.registered == [] and pinned_now == {}


def _own_pages(values):
    """A copy of ``values`` that starts on a page and shares its last page with nothing."""
    page = mmap.PAGESIZE
    room = np.empty(values.nbytes + 3 * page, np.uint8)
    start = -room.ctypes.data % page
    copy = room[start:start + values.nbytes].view(values.dtype)
    copy[:] = values
    return copy


@pytest.mark.parametrize("pinned", ["x", "out", "both", "x as out"])
@pytest.mark.parametrize("pin_in_place", [False, True])
def test_arrays_pinned_by_the_caller_go_direct_and_stay_pinned(fake_driver, rng, pinned,
                                                               pin_in_place):
    """Arrays the caller pinned (allocated pinned, or registered) are not staged, whatever
    pin_in_place says, and are neither pinned again nor unpinned; a pageable one beside
    them is staged, or pinned for the call with pin_in_place."""
    n = 30_001
    # pages of their own (the driver pins whole pages, once)
    x = _own_pages(random_input(rng, "uint64", "affine_then", n))
    want = scan_reference(x, AFFINE, "inclusive")
    out = x if pinned == "x as out" else _own_pages(np.full_like(x, 7))
    by_caller = [a for a, name in ((x, "x"), (out, "out"))
                 if pinned in (name, "both", "x as out")]
    for array in by_caller[:1] if out is x else by_caller:
        fake_driver.pin_host_memory(array.ctypes.data, array.nbytes)
    callers = list(fake_driver.registered)
    got = ooc.inclusive_scan(x, AFFINE, out=out, max_device_bytes=64 * 1024,
                             pin_in_place=pin_in_place)
    assert got is out
    np.testing.assert_array_equal(got, want)
    staged = 0 if pin_in_place else 2 * (2 - len(by_caller) if out is not x else 0)
    assert fake_driver.pinned_buffers == staged
    assert fake_driver.registered == callers  # the caller's pinning, and only it, is left


def test_pinning_in_place_refused_says_what_to_do(fake_driver, rng):
    x = random_input(rng, "int32", "last_nonzero", 1000)
    fake_driver.refuse_registration = "cuMemHostRegister failed: operation not permitted"
    with pytest.raises(RuntimeError, match="could not pin x in place.*pin_in_place=False"):
        ooc.inclusive_scan(x, scangen.LAST_NONZERO, pin_in_place=True)
    fake_driver.refuse_registration = None
    with pytest.raises(ValueError, match="contiguous"):
        ooc.inclusive_scan(x[::2], scangen.LAST_NONZERO, pin_in_place=True)
    with pytest.raises(RuntimeError, match="could not pin out in place"):
        ooc.inclusive_scan(x, scangen.LAST_NONZERO, out=x[::-1][::-1], pin_in_place=True)
    assert fake_driver.registered == []  # x, pinned before out was refused, is unpinned


def test_default_budget_is_the_free_memory_less_a_margin(fake_driver, rng):
    fake_driver.free = 1 << 20
    x = random_input(rng, "int32", "last_nonzero", 100_000)
    got = ooc.inclusive_scan(x, scangen.LAST_NONZERO, out=x.copy())
    np.testing.assert_array_equal(got, scan_reference(x, scangen.LAST_NONZERO, "inclusive"))
    assert fake_driver.allocated <= 0.9 * (1 << 20) + 2 * 4


def _numpy_histogram(driver):
    class NumpyHistogram:
        """scangen.Histogram's contract on the fake device memory."""

        def __init__(self, dtype):
            self.dtype = np.dtype(dtype)

        def __call__(self, x, bins, range, stream=None):
            counts, edges = np.histogram(driver.view(x.ptr, self.dtype, x.size), bins, range)
            return types.SimpleNamespace(get=lambda: counts), edges

    return NumpyHistogram


@pytest.mark.parametrize("pin_in_place", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_histogram_streams_chunks_and_sums_their_counts(fake_driver, monkeypatch, rng,
                                                        dtype, pin_in_place, capsys):
    """Only input buffers on the device, one count per chunk summed: numpy.histogram of the
    whole array, NaN and values on and past the edges included."""
    monkeypatch.setattr(ooc, "Histogram", _numpy_histogram(fake_driver))
    x = (rng.normal(size=30_001) * 50).astype(dtype)
    x[:7] = [-100, 100, 0, -100.5, 99.99, 150, -150]
    if x.dtype.kind == "f":
        x[10::997] = np.nan
    budget = 16 * 1024  # bytes: chunks of 2 K elements in two slots
    counts, edges = ooc.histogram(x, 40, (-100, 100), max_device_bytes=budget, progress=True,
                                  pin_in_place=pin_in_place)
    assert fake_driver.pinned_buffers == (0 if pin_in_place else 2)
    assert fake_driver.registered == []
    want, want_edges = np.histogram(x, 40, (-100, 100))
    np.testing.assert_array_equal(counts, want)
    np.testing.assert_array_equal(edges, want_edges)
    assert counts.dtype == np.int64
    assert fake_driver.allocated <= budget + 2 * x.itemsize  # input buffers and the carries
    assert "(100%)" in capsys.readouterr().err
    empty_counts, empty_edges = ooc.histogram(x[:0], 4, (0, 1))
    np.testing.assert_array_equal(empty_counts, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="1-D host numpy array"):
        ooc.histogram(list(x), 4, (0, 1))


@pytest.mark.parametrize("pin_in_place", [False, True])
@pytest.mark.parametrize("slots", [2, 3])
def test_select_keeps_each_chunks_kept_elements_in_order(fake_driver, monkeypatch, rng, slots,
                                                         pin_in_place, capsys):
    """Each chunk compacted on the device, its count copied back with it, and only its kept
    elements landing in the output right after the previous chunk's: x[x > 0] of the whole
    array, chunks keeping all, some and none of theirs."""
    class NumpySelect:
        """scangen.Select's contract (count on the device) on the fake device memory; the
        predicate x > 0."""

        def __init__(self, dtype, predicate):
            assert predicate == "x > 0"
            self.dtype = np.dtype(dtype)

        def __call__(self, x, *, out, stream=None, count_on_device=False):
            assert count_on_device
            values = fake_driver.view(x.ptr, self.dtype, x.size)
            kept = values[values > 0]
            fake_driver.view(out.ptr, self.dtype, out.size)[:kept.size] = kept
            return out, fake_driver.to_gpu(np.array([kept.size], np.int64))

    monkeypatch.setattr(ooc, "Select", NumpySelect)
    x = rng.normal(size=40_003).astype(np.float32)
    x[:5000] = np.abs(x[:5000]) + 1  # whole chunks kept, and whole chunks dropped
    x[5000:9000] = -1
    budget = 16 * 1024  # bytes: chunks of 1 K float32 in two directions, many of them
    got = ooc.select(x, "x > 0", max_device_bytes=budget, slots=slots, progress=True,
                     pin_in_place=pin_in_place)
    np.testing.assert_array_equal(got, x[x > 0])
    # pinned in place, x needs no staging; the kept elements still land through buffers
    # (and one more holds the chunks' counts)
    assert fake_driver.pinned_buffers == (1 if pin_in_place else 2) * slots + 1
    assert fake_driver.registered == []
    assert "(100%)" in capsys.readouterr().err
    out = np.full(x.size, -7, np.float32)
    view = ooc.select(x, "x > 0", out=out, chunk_elements=3000)
    assert view.base is out and np.array_equal(view, x[x > 0])
    assert (out[view.size:] == -7).all()  # nothing written past the kept elements
    assert ooc.select(x[:0], "x > 0").size == 0
    with pytest.raises(ValueError, match="1-D host numpy array"):
        ooc.select(x.reshape(1, -1), "x > 0")
