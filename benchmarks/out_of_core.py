"""Throughput of an out-of-core scan (scangen.out_of_core) against copying the same bytes
through the same path.

A host array of ``--gib`` GiB is scanned under a device budget of ``--budget-gib`` GiB, in
place (so the host holds the array once). The same pipeline is then run with the scan
replaced by a device-to-device copy: the same host staging copies, pinned buffers, streams
and waits, so the difference is what the scan costs on top of moving the data. Both run
again with the array pinned in place (``pin_in_place=True``: cuMemHostRegister for the
call, no staging); pinning and unpinning the array alone is timed too, and the scan of the
array pinned beforehand (as an array allocated pinned is: no staging, no pinning). Then a
plain loop of synchronous copies of each chunk to the GPU and back, from and to the (pageable)
host array, and the bare pinned transfer rate for context: ``--gib`` of uploads and as
much of downloads, on two streams at once, without host staging copies: from two pinned
buffers, and from the array itself pinned beforehand (the same memory the scans move).
Rates are GB/s of the array (each byte goes up and comes back). Data creation is not timed.
``--copy-threads``, ``--pin-threads`` and ``--pin-ahead`` set scangen.out_of_core's
HOST_COPY_THREADS, PIN_THREADS and PIN_AHEAD_CHUNKS for every row (the sweep their
defaults come from). Run on the GPU host:

    python benchmarks/out_of_core.py [--gib 32] [--budget-gib 2] [--dtype float32] [--slots 2]
                                     [--copy-threads N] [--pin-threads N] [--pin-ahead N]
"""
import argparse
import time

import numpy as np

import scangen
from scangen import out_of_core as ooc
from scangen.runtime.streams import pin_host_memory, unpin_host_memory


def timed(run, repeat):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def both_ways(pieces, chunk_bytes):
    """Seconds to upload each (source, target) pair's source and download into its target
    (pinned host memory, at most chunk_bytes each) on two streams at once."""
    import pycuda.driver as cuda

    device = [cuda.mem_alloc(chunk_bytes) for _ in range(2)]
    up, down = cuda.Stream(), cuda.Stream()
    start = time.perf_counter()
    for source, target in pieces:
        cuda.memcpy_htod_async(device[0], source, up)
        cuda.memcpy_dtoh_async(target, device[1], down)
    up.synchronize()
    down.synchronize()
    return time.perf_counter() - start


def bare_transfers(nbytes, chunk_bytes):
    """Seconds to upload and download nbytes in chunks from two pinned buffers, both at
    once."""
    import pycuda.driver as cuda

    host = [cuda.pagelocked_empty(chunk_bytes, np.uint8) for _ in range(2)]
    return both_ways([tuple(host)] * max(1, nbytes // chunk_bytes), chunk_bytes)


def bare_transfers_of(x, chunk):
    """Seconds to upload x and download into x chunk by chunk on two streams at once, x
    pinned already: the transfers a scan of x pinned beforehand makes, and nothing else."""
    parts = [x[begin:begin + chunk] for begin in range(0, len(x), chunk)]
    return both_ways([(part, part) for part in parts], chunk * x.itemsize)


def plain_copies(x, chunk):
    """Seconds to copy x to the GPU and back chunk by chunk with plain synchronous copies
    from and to the (pageable) host array: what a scan-free loop over the array costs."""
    import pycuda.driver as cuda

    device = cuda.mem_alloc(chunk * x.itemsize)
    start = time.perf_counter()
    for begin in range(0, len(x), chunk):
        part = x[begin:begin + chunk]
        cuda.memcpy_htod(device, part)
        cuda.memcpy_dtoh(part, device)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=32)
    parser.add_argument("--budget-gib", type=float, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--operator", default="add")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--copy-threads", type=int, default=ooc.HOST_COPY_THREADS,
                        help="threads per staged host copy")
    parser.add_argument("--pin-threads", type=int, default=ooc.PIN_THREADS,
                        help="threads pinning in place")
    parser.add_argument("--pin-ahead", type=int, default=ooc.PIN_AHEAD_CHUNKS,
                        help="chunks pinned ahead of the transfers")
    args = parser.parse_args(argv)

    import pycuda.driver as cuda

    ooc.HOST_COPY_THREADS, ooc.PIN_THREADS = args.copy_threads, args.pin_threads
    ooc.PIN_AHEAD_CHUNKS = args.pin_ahead
    scangen.current_context()
    dtype = np.dtype(args.dtype)
    n = int(args.gib * (1 << 30)) // dtype.itemsize
    budget = int(args.budget_gib * (1 << 30))
    chunk = min(ooc.chunk_elements_for(budget, dtype.itemsize, args.slots), n)
    x = np.empty(n, dtype)
    x[:] = 1  # touches every page, outside the timings
    gb = x.nbytes / 1e9

    def scan(pin_in_place=False):
        ooc.inclusive_scan(x, args.operator, out=x, max_device_bytes=budget,
                           slots=args.slots, pin_in_place=pin_in_place)

    def copy(src, dst, carry_in, carry_out, count, stream):
        cuda.memcpy_dtod_async(dst, src, count * dtype.itemsize, stream)

    def copy_through_pipeline(pin_in_place=False):
        ooc.pipeline(x, x, copy, chunk_elements=chunk, slots=args.slots,
                     pin_in_place=pin_in_place)

    def pin_and_unpin():
        pin_host_memory(x.ctypes.data, x.nbytes)
        unpin_host_memory(x.ctypes.data)

    def pinned_beforehand():
        """The scan of an array the caller pinned (as one allocated pinned: no staging and
        no pinning in the call), and the bare transfers of that array."""
        pin_host_memory(x.ctypes.data, x.nbytes)
        try:
            return (timed(scan, args.repeat),
                    timed(lambda: bare_transfers_of(x, chunk), args.repeat))
        finally:
            unpin_host_memory(x.ctypes.data)

    device = cuda.Context.get_device()
    print(f"{device.name()}: {args.gib:g} GiB {dtype} host array, device budget "
          f"{args.budget_gib:g} GiB, chunks of {chunk * dtype.itemsize / (1 << 20):.0f} MiB, "
          f"{args.slots} slots, operator {args.operator}; {args.copy_threads} copy threads, "
          f"{args.pin_threads} pin threads pinning {args.pin_ahead} chunks ahead")
    scan_pinned, bare_pinned = pinned_beforehand()
    results = [("scan", timed(scan, args.repeat)),
               ("copy through the same pipeline", timed(copy_through_pipeline, args.repeat)),
               ("scan, array pinned in place", timed(lambda: scan(True), args.repeat)),
               ("copy through the pipeline, array pinned in place",
                timed(lambda: copy_through_pipeline(True), args.repeat)),
               ("pinning and unpinning the array alone", timed(pin_and_unpin, args.repeat)),
               ("scan, array pinned by the caller beforehand", scan_pinned),
               ("plain copies up and back (pageable, synchronous)",
                timed(lambda: plain_copies(x, chunk), args.repeat)),
               ("bare pinned transfers (no host staging)",
                timed(lambda: bare_transfers(x.nbytes, chunk * dtype.itemsize), args.repeat)),
               ("bare transfers of the array, pinned beforehand", bare_pinned)]
    print("| what | seconds | GB/s of array | vs pipeline copy |")
    print("| --- | --- | --- | --- |")
    for name, seconds in results:
        print(f"| {name} | {seconds:.2f} | {gb / seconds:.1f} | {results[1][1] / seconds:.2f} |")


if __name__ == "__main__":
    main()
