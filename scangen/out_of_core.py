"""Scans of host arrays larger than the GPU memory they may use: a numpy array or np.memmap
streamed through the GPU in chunks, the result written to a host array (a memmap too).

Each chunk travels host array -> pinned buffer (a host copy) -> device (upload stream) ->
scan with the carry (compute stream) -> device -> pinned buffer (download stream) -> out (a
host copy). Buffers come in ``slots`` (2: double buffering), so while chunk k is scanned,
chunk k+1 is uploaded, chunk k-1 downloaded, and the host copies the next chunk in and the
previous one out. Uploads and downloads have a stream each: PCIe is full duplex and the GPU
has a copy engine per direction. The carry stays on the device: chunk k's scan
(scangen.chunked.CarryScan) reads it and writes chunk k+1's, in two alternating slots (a
kernel may not read and write one place, see CarryScan), and the compute stream keeps the
scans in chunk order: no trip to the host between chunks. Host arrays that are page-locked
already (allocated pinned, or registered by the caller), and with ``pin_in_place=True``
any host array, page-locked a few chunks at a time ahead of the transfers
(cuMemHostRegister), are not staged: chunks go between them and the device with no pinned
buffer or host copy in between.

The plan (which step waits for which) is pure Python, apart from the CUDA calls:
:func:`schedule` lists the steps, :func:`run` hands them to an executor; the CUDA executor
here turns each wait into an event, and tests drive the same schedule with a CPU executor.
"""
from __future__ import annotations

import bisect
import mmap
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from .chunked import CarryScan, identity_of, operator_of
from .interop import DevicePointer
from .primitives.compaction import Select
from .primitives.histogram import Histogram, outer_edges
from .runtime.contexts import current_context
from .runtime.streams import (driver_context, is_pinned_host_memory, pin_host_memory,
                              set_driver_context, unpin_host_memory)
from .types import element_type

__all__ = ["inclusive_scan", "exclusive_scan", "histogram", "select", "Step", "schedule", "run",
           "chunk_elements_for", "pipeline"]

#: Where each step runs: None on the host (in program order), else its stream.
STREAMS = {"stage": None, "upload": "upload", "compute": "compute", "download": "download",
           "drain": None}

#: The largest chunk by default: enough to hide a launch and an event (microseconds) behind
#: milliseconds of transfer, small enough that a large budget does not pin GiBs of host
#: memory and that the first upload and the last download (not overlapped) stay short.
DEFAULT_MAX_CHUNK_BYTES = 256 << 20

#: Part of the budget kept for the scan's own temporaries (section totals, tile states).
_SCRATCH_SHARE = 1 / 32

#: Free device memory left unused by the default budget (other allocations, the driver).
_FREE_MARGIN = 0.1


@dataclass(frozen=True)
class Step:
    """One step of the pipeline on elements [start, stop) of chunk ``chunk`` in buffer slot
    ``slot``; it may start once every step in ``after`` (pairs (op, chunk)) has finished."""

    op: str
    chunk: int
    slot: int
    start: int
    stop: int
    after: tuple = ()


def chunk_bounds(n, chunk_elements):
    """[(start, stop)] of consecutive chunks of at most chunk_elements covering [0, n)."""
    if chunk_elements < 1:
        raise ValueError(f"chunk_elements must be at least 1, got {chunk_elements}")
    return [(start, min(start + chunk_elements, n)) for start in range(0, n, chunk_elements)]


def schedule(n, chunk_elements, slots=2, outputs=True, staged_in=True, staged_out=True):
    """The steps that stream n elements through the GPU in chunks, in the order the host
    issues them: each chunk staged, uploaded, computed (scanned with its carry, or
    counted) and, with ``outputs``, downloaded and drained into the output.
    ``staged_in=False``: no staging, chunks are uploaded from the host array itself (pinned
    in place); ``staged_out=False``: downloaded into the output itself, the drain only waits
    for the download (the pinned buffers those steps would use do not exist).

    Chunk k uses buffer slot k % slots, last used by chunk k - slots: each step waits for
    the step that last read the buffer it writes (and for the one that wrote what it reads);
    computes wait for the previous compute, whose carry (or sum) they take. After issuing
    chunk k the host drains chunk k - (slots - 1), the oldest in flight, so it copies out
    while the GPU works on the newer ones (and waits for no more than it must: with 2
    slots, chunk k-1).
    """
    if slots < 2:
        raise ValueError("the pipeline needs at least 2 buffer slots to overlap anything")
    steps = []
    lag = slots - 1

    def add(op, k, *after):
        start, stop = bounds[k]
        steps.append(Step(op, k, k % slots, start, stop,
                          tuple((o, c) for o, c in after if c >= 0)))

    bounds = chunk_bounds(n, chunk_elements)
    for k in range(len(bounds)):
        before = k - slots  # the chunk that used this slot's buffers last
        if staged_in:
            add("stage", k, ("upload", before))                 # pinned in: uploaded
            add("upload", k, ("stage", k), ("compute", before))  # device in: computed
        else:
            add("upload", k, ("compute", before))
        if not outputs:
            add("compute", k, ("upload", k), ("compute", k - 1))  # in order (a carry, a sum)
            continue
        add("compute", k, ("upload", k), ("compute", k - 1), ("download", before))  # out
        if staged_out:
            add("download", k, ("compute", k), ("drain", before))  # pinned out: drained
        else:
            add("download", k, ("compute", k))
        if k >= lag:
            add("drain", k - lag, ("download", k - lag))
    for k in range(max(0, len(bounds) - lag), len(bounds)) if outputs else ():
        add("drain", k, ("download", k))
    return steps


def run(steps, executor, progress=None):
    """Call ``executor.<op>(step)`` for each step in order; ``progress(done, total)`` after
    each chunk lands in the output (or, where there is none, is computed)."""
    total = max((step.stop for step in steps), default=0)
    last = "drain" if any(step.op == "drain" for step in steps) else "compute"
    for step in steps:
        getattr(executor, step.op)(step)
        if progress is not None and step.op == last:
            progress(step.stop, total)


def chunk_elements_for(max_device_bytes, itemsize, slots=2, buffers=2):
    """The largest chunk whose device buffers (``buffers`` per slot: an input and an output
    for a scan, an input for a histogram) and temporaries fit in max_device_bytes, at most
    DEFAULT_MAX_CHUNK_BYTES."""
    usable = int(max_device_bytes * (1 - _SCRATCH_SHARE))
    elements = min(usable // (buffers * slots * itemsize), DEFAULT_MAX_CHUNK_BYTES // itemsize)
    if elements < 1:
        raise ValueError(f"max_device_bytes={max_device_bytes} cannot hold the buffers of one "
                         f"element ({buffers * slots} x {itemsize} bytes and temporaries)")
    return elements


def _default_budget():
    import pycuda.driver as driver

    current_context()  # mem_get_info asks the current context's device
    free, _ = driver.mem_get_info()
    return int(free * (1 - _FREE_MARGIN))


#: Threads that split each host copy of a staged chunk (numpy releases the GIL while
#: copying): one thread copies a few GB/s, less than a PCIe link moves in one direction.
#: 16 staged a 32 GiB scan at 13.3 GB/s on an H200 host of 32 cores, 8 at 10.5, 24 and 32
#: no faster (benchmarks/out_of_core.py --copy-threads).
HOST_COPY_THREADS = 16


class _HostCopies:
    """Large host copies split across HOST_COPY_THREADS threads."""

    _PIECE = 16 << 20

    def __init__(self):
        self._pool = ThreadPoolExecutor(HOST_COPY_THREADS, thread_name_prefix="scangen-copy")

    def __call__(self, dst, src):
        step = max(1, self._PIECE // max(1, dst.itemsize))
        pieces = [slice(i, i + step) for i in range(0, len(dst), step)]
        for done in [self._pool.submit(np.copyto, dst[p], src[p]) for p in pieces]:
            done.result()

    def close(self):
        self._pool.shutdown()


def _pinned_already(array) -> bool:
    """Whether a contiguous host array is page-locked already, first byte to last (the
    caller allocated it pinned, or registered it)."""
    if not array.flags.c_contiguous or array.nbytes == 0:
        return False
    start = array.ctypes.data
    return is_pinned_host_memory(start) and is_pinned_host_memory(start + array.nbytes - 1)


#: How many chunks ahead of the one being moved ``pin_in_place`` pins: the pinning of the
#: next chunks' pages overlaps the transfers of this one.
PIN_AHEAD_CHUNKS = 3

#: Threads that pin and unpin those runs. More did not pin faster on an H200 host (a
#: 32 GiB scan pinned in place: one thread 3 chunks ahead 16.1 GB/s of array, 2 threads 3
#: ahead 16.3, 4 threads 6 ahead 14.7, 8 threads 8 ahead 14.6): the operating system's page
#: locking, not the thread, bounds it.
PIN_THREADS = 1


def _pin_refused(name, error) -> RuntimeError:
    return RuntimeError(f"could not pin {name} in place ({error}); the driver refuses memory "
                        "pinned already (out a view of x's memory: pass out=x), and may "
                        "refuse file-backed memory (an np.memmap) or more than it can lock: "
                        "pin_in_place=False copies through pinned buffers")


class _PinnedRuns:
    """A host array pinned in place (cuMemHostRegister) a run of whole pages at a time, on
    a thread of its own, as its chunks come: run k spans the pages from chunk k's first
    byte to chunk k+1's first (the last run to the array's end), so no two runs share a
    page (a page cannot be registered twice) and together they hold the array. The driver
    moves a copy without staging only where it lies within one registration, so
    :meth:`pieces` cuts a chunk where runs meet. Runs are pinned PIN_AHEAD_CHUNKS chunks
    ahead of the chunk that needs them, and unpinned once every chunk that touches them is
    done (:meth:`release`), so at most a few chunks are locked at a time."""

    def __init__(self, array, name, bounds):
        if not array.flags.c_contiguous:
            raise ValueError(f"pin_in_place=True pins {name} where it is, which needs it "
                             "contiguous: pass a contiguous array, or pin_in_place=False")
        page, itemsize = mmap.PAGESIZE, array.itemsize
        self.name, self.base, self.itemsize = name, array.ctypes.data, itemsize
        self.bytes = array.reshape(-1).view(np.uint8)
        end = self.base + array.nbytes
        #: run k is [edges[k], edges[k + 1]), addresses; empty where a chunk is within a page
        self.edges = [(self.base + start * itemsize) // page * page for start, _ in bounds]
        self.edges.append(-(-end // page) * page)
        self._pins = [None] * len(bounds)  # each run's pinning, once asked for
        self._released = 0  # runs before it are unpinned (or asked to be)
        self._pinned = set()  # runs pinned now (touched on the pinning threads only)
        # The driver pins for the context current in the calling thread: the same there.
        self._threads = ThreadPoolExecutor(PIN_THREADS, thread_name_prefix="scangen-pin",
                                          initializer=set_driver_context,
                                          initargs=(driver_context(),))
        # The first run now, so that a refusal (file-backed memory) comes before any chunk
        # moves.
        try:
            self._pin_through(min(PIN_AHEAD_CHUNKS, len(bounds) - 1))
            self._wait(0)
        except BaseException:
            self.close()
            raise

    def _pin_run(self, run):
        start, stop = self.edges[run], self.edges[run + 1]
        if stop > start:
            pin_host_memory(start, stop - start)
            self._pinned.add(run)

    def _unpin_run(self, run):
        # Its pinning came first in the queue, but may still run on another thread.
        wait([self._pins[run]])
        if run in self._pinned:
            unpin_host_memory(self.edges[run])
            self._pinned.discard(run)

    def _pin_through(self, last):
        for run in range(last + 1):
            if self._pins[run] is None:
                self._pins[run] = self._threads.submit(self._pin_run, run)

    def _wait(self, run):
        try:
            self._pins[run].result()
        except Exception as error:  # the message names the driver's error
            raise _pin_refused(self.name, error) from error

    def pieces(self, start, stop):
        """The byte ranges of elements [start, stop) of the array, each within one run,
        once those runs are pinned (pinning the next ones ahead)."""
        first_byte, stop_byte = start * self.itemsize, stop * self.itemsize
        first = bisect.bisect_right(self.edges, self.base + first_byte) - 1
        last = bisect.bisect_left(self.edges, self.base + stop_byte) - 1
        self._pin_through(min(last + PIN_AHEAD_CHUNKS, len(self._pins) - 1))
        cuts = []
        for run in range(first, last + 1):
            self._wait(run)
            piece = (max(first_byte, self.edges[run] - self.base),
                     min(stop_byte, self.edges[run + 1] - self.base))
            if piece[1] > piece[0]:
                cuts.append(piece)
        return cuts

    def release(self, chunk):
        """Chunks up to ``chunk`` are done with the array: unpin their runs (no later chunk
        touches them)."""
        for run in range(self._released, chunk + 1):
            if self._pins[run] is not None:
                self._threads.submit(self._unpin_run, run)
        self._released = max(self._released, chunk + 1)

    def close(self):
        """Unpin every run still pinned, once the pinning in flight is done."""
        self.release(len(self._pins) - 1)
        self._threads.shutdown(wait=True)


class _CUDAExecutor:
    """The steps as CUDA calls: pinned and device buffers per slot (for the input, and for
    the output where there is one), three streams, one event per (op, slot) recorded after
    each stream step and waited on by the steps after it. Where the host arrays are pinned
    already or for the call (``direct_in``, ``direct_out``), chunks move between them and
    the device directly, with no pinned buffers on that side; ``to_pin``, the (array, name)
    pairs to pin for the call, are pinned last and unpinned in close()."""

    def __init__(self, x, out, compute, chunk_elements, slots, first_carry, kept=None,
                 direct_in=False, direct_out=False, to_pin=()):
        import pycuda.driver as cuda
        from pycuda import gpuarray

        self._cuda = cuda
        self.x, self.out, self.work, self.kept = x, out, compute, kept
        self.landed = 0  # elements of out written so far
        dtype = x.dtype
        sides = ("in", "out") if out is not None else ("in",)
        staged = [side for side, direct in (("in", direct_in), ("out", direct_out))
                  if side in sides and not direct]
        self.pinned = {side: [cuda.pagelocked_empty(chunk_elements, dtype)
                              for _ in range(slots)] for side in staged}
        self.device = {side: [cuda.mem_alloc(chunk_elements * dtype.itemsize)
                              for _ in range(slots)] for side in sides}
        self.carries = gpuarray.to_gpu(np.array([first_carry, first_carry], dtype))
        self.streams = {name: cuda.Stream() for name in set(STREAMS.values()) if name}
        # Events without timing are cheaper to record and wait on.
        self.events = {(op, slot): cuda.Event(cuda.event_flags.DISABLE_TIMING)
                       for op, stream in STREAMS.items() if stream for slot in range(slots)}
        self.slots = slots
        self.copy = _HostCopies()
        # Pinned last, so that nothing after it can fail: pipeline() unpins in close().
        bounds = chunk_bounds(len(x), chunk_elements)
        self.runs = {}  # side -> _PinnedRuns of the array pinned in place for the call
        try:
            for array, name in to_pin:
                runs = _PinnedRuns(array, name, bounds)
                for side in ("in", "out"):
                    if (self.x if side == "in" else self.out) is array:
                        self.runs[side] = runs
        except BaseException:
            self._unpin()
            raise

    def _host_pieces(self, side, step):
        """[(device byte offset, host memory)]: the chunk's copies between its device
        buffer on ``side`` and the host, one each for a pinned buffer (staged) or an array
        pinned already, one per run it spans of an array pinned in place for the call."""
        if side in self.pinned:
            return [(0, self.pinned[side][step.slot][:step.stop - step.start])]
        runs = self.runs.get(side)
        if runs is None:
            array = self.x if side == "in" else self.out
            return [(0, array[step.start:step.stop])]
        return [(begin - step.start * runs.itemsize, runs.bytes[begin:end])
                for begin, end in runs.pieces(step.start, step.stop)]

    def _stream_after(self, step):
        """The step's stream, made to wait for the stream steps it comes after (host steps
        are done already: the host issues in order)."""
        stream = self.streams[STREAMS[step.op]]
        for op, chunk in step.after:
            if STREAMS[op]:
                stream.wait_for_event(self.events[(op, chunk % self.slots)])
        return stream

    def _host_after(self, step):
        for op, chunk in step.after:
            if STREAMS[op]:
                self.events[(op, chunk % self.slots)].synchronize()

    def _record(self, step, stream):
        self.events[(step.op, step.slot)].record(stream)

    def stage(self, step):
        self._host_after(step)
        self.copy(self.pinned["in"][step.slot][:step.stop - step.start],
                  self.x[step.start:step.stop])

    def upload(self, step):
        if "out" not in self.device and "in" in self.runs and step.chunk >= self.slots:
            # Nothing comes back to say a chunk is done: once the upload that used this
            # slot last is, its chunk's runs are done with.
            self.events[("upload", step.slot)].synchronize()
            self.runs["in"].release(step.chunk - self.slots)
        pieces = self._host_pieces("in", step)
        stream = self._stream_after(step)
        device = int(self.device["in"][step.slot])
        for offset, source in pieces:
            self._cuda.memcpy_htod_async(device + offset, source, stream)
        self._record(step, stream)

    def compute(self, step):
        stream = self._stream_after(step)
        carry = int(self.carries.gpudata)
        itemsize = self.x.dtype.itemsize
        out = self.device.get("out")
        self.work(int(self.device["in"][step.slot]), None if out is None else int(out[step.slot]),
                     carry + (step.chunk % 2) * itemsize,
                     carry + ((step.chunk + 1) % 2) * itemsize, step.stop - step.start, stream)
        self._record(step, stream)

    def download(self, step):
        pieces = self._host_pieces("out", step)
        stream = self._stream_after(step)
        device = int(self.device["out"][step.slot])
        for offset, target in pieces:
            self._cuda.memcpy_dtoh_async(target, device + offset, stream)
        self._record(step, stream)

    def drain(self, step):
        self._host_after(step)
        count = step.stop - step.start if self.kept is None else self.kept(step.chunk)
        if "out" in self.pinned:
            self.copy(self.out[self.landed:self.landed + count],
                      self.pinned["out"][step.slot][:count])
        self.landed += count
        # The chunk is downloaded, so uploaded too: its pinned runs are done with.
        for runs in set(self.runs.values()):
            runs.release(step.chunk)

    def close(self):
        self.copy.close()
        for stream in self.streams.values():
            stream.synchronize()
        self._unpin()

    def _unpin(self):
        for runs in set(self.runs.values()):
            runs.close()
        self.runs = {}


def pipeline(x, out, compute, *, chunk_elements, slots=2, first_carry=0, progress=None,
             kept=None, pin_in_place=False):
    """Stream x through the GPU into out, chunk by chunk, with ``compute(in_ptr, out_ptr,
    carry_in_ptr, carry_out_ptr, n, stream)`` on each chunk (device addresses; a pycuda
    stream), in chunk order on one stream. The scans below pass CarryScan.launch;
    benchmarks pass a copy, to measure the same path without the scan. ``out`` None: no
    output comes back (out_ptr is None), as for the histogram, whose compute keeps what it
    counts. ``kept(chunk)``: how many leading outputs of that chunk to keep (a compaction,
    read once the chunk is downloaded), each chunk's landing right after the previous
    one's; None: all of them, in place. Returns how many elements of out were written.
    ``progress``: True for StderrProgress, a function, or None. x, and out where every
    chunk lands whole in its place (``kept`` None), go between the host and the device
    without host copies where they are pinned already, or with ``pin_in_place`` pinned where
    they are for the call."""
    current_context()
    if progress is True:
        progress = StderrProgress(x.dtype.itemsize)
    x_pinned = _pinned_already(x)
    out_pinned = out is not None and (x_pinned if out is x else _pinned_already(out))
    direct_in = bool(pin_in_place) or x_pinned
    direct_out = out is not None and kept is None and (bool(pin_in_place) or out_pinned)
    to_pin = [(array, name) for array, name, direct, pinned in
              ((x, "x", direct_in, x_pinned), (out, "out", direct_out, out_pinned))
              if direct and not pinned and not (name == "out" and out is x)]
    executor = _CUDAExecutor(x, out, compute, chunk_elements, slots, first_carry, kept,
                             direct_in, direct_out, to_pin)
    try:
        run(schedule(len(x), chunk_elements, slots, outputs=out is not None,
                     staged_in=not direct_in, staged_out=not direct_out),
            executor, progress or None)
    finally:
        executor.close()
    return executor.landed


class StderrProgress:
    """``progress=True``: a line on stderr, rewritten at most twice a second: bytes done, of
    how many, and the rate so far."""

    def __init__(self, itemsize, stream=None):
        self.itemsize, self.stream = itemsize, sys.stderr if stream is None else stream
        self.started = self.shown = time.perf_counter()

    def __call__(self, done, total):
        now = time.perf_counter()
        if done < total and now - self.shown < 0.5:
            return
        self.shown = now
        gib = 1 << 30
        rate = done * self.itemsize / max(now - self.started, 1e-9) / 1e9
        self.stream.write(f"\rscangen.out_of_core: {done * self.itemsize / gib:.1f} of "
                          f"{total * self.itemsize / gib:.1f} GiB ({100 * done // max(total, 1)}"
                          f"%), {rate:.1f} GB/s" + ("\n" if done >= total else ""))
        self.stream.flush()


def _chunk_elements(x, chunk_elements, max_device_bytes, slots, buffers) -> int:
    """The chunk the caller named, else the largest the budget holds (the free memory less a
    margin by default), at most the array."""
    if chunk_elements is None:
        budget = _default_budget() if max_device_bytes is None else max_device_bytes
        chunk_elements = chunk_elements_for(budget, x.dtype.itemsize, slots, buffers)
    return max(1, min(chunk_elements, len(x)))


def _check_host_array(x, verb: str, on_device: str) -> None:
    """x is what every function here takes: a 1-D host numpy array or np.memmap."""
    if not isinstance(x, np.ndarray) or x.ndim != 1:
        raise ValueError(f"scangen.out_of_core {verb} a 1-D host numpy array or np.memmap; "
                         f"for device arrays use {on_device}")


def _checked_out(x, out):
    if out is None:
        return np.empty_like(x)
    if not isinstance(out, np.ndarray) or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out must be a host array (np.ndarray or np.memmap) of shape "
                         f"{x.shape} and dtype {x.dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only (a memmap opened with mode='r'?); open it with "
                         "mode='r+' or 'w+'")
    return out


def _scan(mode, x, operator, identity, max_device_bytes, out, chunk_elements, initial,
          progress, slots, pin_in_place, options):
    _check_host_array(x, "scans", "scangen.inclusive_scan")
    op = operator_of(operator, identity)
    op.check_dtype(x.dtype)
    out = _checked_out(x, out)
    if len(x) == 0:
        return out
    chunk_elements = _chunk_elements(x, chunk_elements, max_device_bytes, slots, buffers=2)
    kernel = CarryScan(x.dtype, op, mode, **options)
    first = identity_of(op, x.dtype) if initial is None else \
        element_type(x.dtype).numpy_value(initial)

    def scan(x, y, carry_in, carry_out, n, stream):
        kernel.launch((x, y, carry_in, carry_out), n, stream)

    pipeline(x, out, scan, chunk_elements=chunk_elements, slots=slots, first_carry=first,
             progress=progress, pin_in_place=pin_in_place)
    return out


_DOC = """The {mode} scan of a host array too large for the GPU: chunks streamed through
    pinned buffers, transfers overlapping the scans, the carry kept on the device.

    Parameters
    ----------
    x:
        A 1-D host numpy array or np.memmap.
    operator, identity:
        As for scangen.{mode}_scan (associative; need not be commutative: each chunk's carry
        is combined on the left). Floating-point results depend on the chunking in the last
        bits.
    max_device_bytes:
        The device memory the scan may use (buffers for ``slots`` chunks in and out, and
        the scan's temporaries); default: the free memory less a margin. Ignored when
        ``chunk_elements`` is given.
    out:
        Where the result goes: a host array of x's shape and dtype (an np.memmap opened
        with mode 'w+' or 'r+' for results larger than RAM); may be x itself. Default: a
        new array.
    chunk_elements:
        Elements per chunk (default: from the budget, at most 256 MiB per chunk).
    initial:
        A value combined first (as Scan's initial=); default: the identity.
    progress:
        True for a progress line on stderr, or a function ``progress(done, total)``
        called (in elements) as chunks land in ``out``.
    slots:
        Chunks in flight (buffers per direction); 2 is double buffering.
    pin_in_place:
        Pin x and out where they are (cuMemHostRegister), so chunks go between them and
        the GPU directly, with no pinned buffers and no host copies. They are pinned a few
        chunks at a time, ahead of the transfers on a thread of their own, and unpinned
        behind them. The driver may refuse (file-backed memory such as an np.memmap, more
        than it can lock): a RuntimeError then says so, before any chunk moves where the
        first chunk's pages are refused, and otherwise with out partly written. Default
        False: chunks are copied through pinned buffers by HOST_COPY_THREADS (16) host
        threads, except to and from arrays that are pinned already (allocated pinned, as by
        cupyx.empty_pinned or pycuda.driver.pagelocked_empty, or registered by the caller),
        which go between the host and the GPU directly either way.
    **options:
        algorithm, section_size, ... as for scangen.Scan.
    """


def inclusive_scan(x, operator="add", *, identity=None, max_device_bytes=None, out=None,
                   chunk_elements=None, initial=None, progress=None, slots=2,
                   pin_in_place=False, **options):
    return _scan("inclusive", x, operator, identity, max_device_bytes, out, chunk_elements,
                 initial, progress, slots, pin_in_place, options)


def exclusive_scan(x, operator="add", *, identity=None, max_device_bytes=None, out=None,
                   chunk_elements=None, initial=None, progress=None, slots=2,
                   pin_in_place=False, **options):
    return _scan("exclusive", x, operator, identity, max_device_bytes, out, chunk_elements,
                 initial, progress, slots, pin_in_place, options)


inclusive_scan.__doc__ = _DOC.format(mode="inclusive")
exclusive_scan.__doc__ = _DOC.format(mode="exclusive")


def histogram(x, bins, range, *, max_device_bytes=None, chunk_elements=None, progress=None,
              slots=2, pin_in_place=False):
    """``(counts, edges)`` of ``bins`` equal-width bins over ``range`` for a host array too
    large for the GPU, as numpy.histogram(x, bins, range) gives them (int64 counts, numpy's
    edges; values outside the range and NaN are not counted): chunks streamed through
    pinned buffers and counted on the device (scangen.Histogram), uploads overlapping the
    counting, and only each chunk's counts kept (summed at the end). ``x``, the budget,
    ``chunk_elements``, ``progress``, ``slots`` and ``pin_in_place`` (x) as for
    inclusive_scan (only input buffers are needed, so chunks are twice the scan's for one
    budget)."""
    _check_host_array(x, "counts", "scangen.histogram")
    hist = Histogram(x.dtype)  # refuses a dtype it cannot count, before any GPU work
    outer_edges(bins, range)
    if len(x) == 0:
        counts, edges = np.histogram(x, bins, range)
        return counts.astype(np.int64), edges
    chunk_elements = _chunk_elements(x, chunk_elements, max_device_bytes, slots, buffers=1)
    partial, edges = [], []

    def count(x_ptr, _out, _carry_in, _carry_out, n, stream):
        counts, chunk_edges = hist(DevicePointer(x_ptr, x.dtype, n), bins, range,
                                   stream=stream)
        partial.append(counts)
        edges[:] = [chunk_edges]

    pipeline(x, None, count, chunk_elements=chunk_elements, slots=slots, progress=progress,
             pin_in_place=pin_in_place)
    return sum(counts.get() for counts in partial).astype(np.int64), edges[0]


def select(x, predicate, *, max_device_bytes=None, out=None, chunk_elements=None,
           progress=None, slots=2, pin_in_place=False):
    """The elements of a host array too large for the GPU for which ``predicate`` (a C
    expression in ``x`` and ``i``, as for scangen.select; ``i`` counts within a chunk) holds,
    in order: chunks streamed through pinned buffers, each compacted on the device
    (scangen.Select), its count copied back with it, and only its kept elements copied into
    the output, right after the previous chunk's. Returns ``out[:kept]``: a view of ``out``
    (default: a new array of x's size in memory; an np.memmap opened with mode 'w+' holds
    results larger than RAM). ``x``, the budget, ``chunk_elements``, ``progress``, ``slots``
    and ``pin_in_place`` (x only: a chunk's kept elements land after the previous chunk's,
    through a pinned buffer) as for inclusive_scan; each chunk comes back whole over PCIe
    (the count is not known on the host before the download is queued)."""
    _check_host_array(x, "selects from", "scangen.select")
    kernel = Select(x.dtype, predicate)  # refuses a bad predicate before any GPU work
    out = _checked_out(x, out)
    if len(x) == 0:
        return out[:0]
    chunk_elements = _chunk_elements(x, chunk_elements, max_device_bytes, slots, buffers=2)
    import pycuda.driver as cuda

    counts = cuda.pagelocked_empty(len(chunk_bounds(len(x), chunk_elements)), np.int64)
    on_device = []  # each chunk's count on the device, alive until copied back

    def compact(x_ptr, y_ptr, _carry_in, _carry_out, n, stream):
        chunk = len(on_device)
        _, count = kernel(DevicePointer(x_ptr, x.dtype, n),
                          out=DevicePointer(y_ptr, x.dtype, n), stream=stream,
                          count_on_device=True)
        on_device.append(count)
        cuda.memcpy_dtoh_async(counts[chunk:chunk + 1], count.gpudata, stream)

    landed = pipeline(x, out, compact, chunk_elements=chunk_elements, slots=slots,
                      progress=progress, kept=lambda chunk: int(counts[chunk]),
                      pin_in_place=pin_in_place)
    return out[:landed]
