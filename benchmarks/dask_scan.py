"""A scan (or, with --sort, a sort) of a Dask array of CuPy chunks on 1 and on k GPUs of one
host (scangen.dask).

For each GPU count, a local cluster with one worker per GPU (scangen.dask.gpu_cluster:
dask-cuda's LocalCUDACluster where it is installed, otherwise one Nanny per GPU with
CUDA_VISIBLE_DEVICES set), an array of 2^log2n elements in chunks spread over the workers,
created and persisted on the GPUs before timing; then the best of ``--repeat`` runs of
``inclusive_scan(x).persist()`` until every chunk is done (its task returned, its GPU
idle): compute only, no data creation, no gathering. ``--check`` first compares, at 2^26
in 8 chunks, the k-GPU result of a non-commutative scan (last non-zero) with the CPU
reference. ``--breakdown`` says where the time goes: the
same kernels on the same chunks without Dask (one GPU, in this process), the same graph
whose tasks do no work (Dask's own time), and one more run's task stream by kind of task and
by worker. ``--sort`` times ``scangen.dask.sort(x).persist()`` of random uint32 keys instead
(``--check`` then compares a sort of 2^26 keys with numpy's; ``--partitions`` sets its
output partitions). ``--dask-config KEY=VALUE`` sets a Dask setting for the clusters and
the runs, to weigh one (Dask's scheduling is most of the time at these sizes). Run on the
GPU host:

    python benchmarks/dask_scan.py [--log2n 31] [--gpus 1,2] [--chunk-log2 27] [--check]
                                   [--breakdown] [--sort [--partitions P]]
                                   [--dask-config KEY=VALUE ...]
"""
import argparse
import ast
import sys
import time

import numpy as np

import scangen


def _to_gpu(block, op_name, block_id=None):
    import cupy

    rng = cupy.random.default_rng(block_id[0])  # chunks differ: a carry from the wrong one shows
    if op_name == "sort":
        return (rng.random(len(block), dtype=np.float64) * 2.0 ** 32).astype(np.uint32)
    values = rng.random(len(block), dtype=np.float32)
    if op_name == "last_nonzero":
        values = cupy.where(values < 0.7, 0, (values * 1000).astype(np.int32)).astype(np.int32)
    return values


def on_gpus(client, n, chunk, op_name):
    """A persisted dask.array of CuPy chunks, spread over the workers."""
    import cupy
    import dask.array as da
    from distributed import wait

    dtype = {"last_nonzero": np.int32, "sort": np.uint32}.get(op_name, np.float32)
    x = da.empty(n, chunks=chunk, dtype=np.uint8).map_blocks(
        _to_gpu, op_name, dtype=dtype, meta=cupy.empty(0, dtype))
    x = client.persist(x)
    wait(x)
    return x


def operator(op_name):
    return scangen.LAST_NONZERO if op_name == "last_nonzero" else op_name


def check(client):
    import scangen.dask as sd

    n = 1 << 26
    x = on_gpus(client, n, n // 8, "last_nonzero")  # chunks on every worker
    got = sd.inclusive_scan(x, scangen.LAST_NONZERO).map_blocks(
        lambda b: b.get(), meta=np.empty(0, np.int32)).compute()
    host = x.map_blocks(lambda b: b.get(), meta=np.empty(0, np.int32)).compute()
    same = np.array_equal(got, scangen.reference_scan(host, scangen.LAST_NONZERO))
    print(f"  check: last non-zero over 2^26 int32 equals the CPU reference: {same}", flush=True)
    return same


def check_sort(client):
    import scangen.dask as sd

    n = 1 << 26
    x = on_gpus(client, n, n // 8, "sort")  # chunks on every worker
    on_host = dict(meta=np.empty(0, np.uint32))
    got = sd.sort(x).map_blocks(lambda b: b.get(), **on_host).compute()
    host = x.map_blocks(lambda b: b.get(), **on_host).compute()
    same = np.array_equal(got, np.sort(host))
    print(f"  check: the sort of 2^26 uint32 keys equals numpy's: {same}", flush=True)
    return same


def print_task_stream(client, x, op):
    """Where one more run's time goes, from Dask's task stream: for each kind of task (Dask's
    key prefix), how many ran, their summed and longest compute and transfer times; for each
    worker, its busy time and when its first task started and its last ended, after the
    graph was submitted."""
    import collections

    import scangen.dask as sd
    from distributed import get_task_stream, wait

    with get_task_stream(client) as stream:
        submitted = time.time()
        wait(sd.inclusive_scan(x, op).persist())
        wall = time.time() - submitted
    kinds = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # count, compute, max, transfer
    workers = collections.defaultdict(lambda: [0.0, float("inf"), 0.0])  # busy, first, last
    for task in stream.data:
        key = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        row = kinds[str(key).rsplit("-", 1)[0]]
        worker = workers[task.get("worker", "?")]
        row[0] += 1
        for span in task["startstops"]:
            seconds = span["stop"] - span["start"]
            worker[0] += seconds
            worker[1] = min(worker[1], span["start"] - submitted)
            worker[2] = max(worker[2], span["stop"] - submitted)
            if span["action"] == "compute":
                row[1] += seconds
                row[2] = max(row[2], seconds)
            elif span["action"] == "transfer":
                row[3] += seconds
    print(f"  task stream of one run ({wall * 1e3:.1f} ms wall):")
    for name, (count, compute, longest, transfer) in sorted(kinds.items(), key=lambda r: -r[1][1]):
        print(f"    {name:40} {count:4} tasks  compute {compute * 1e3:8.2f} ms "
              f"(longest {longest * 1e3:6.2f})  transfer {transfer * 1e3:7.2f} ms")
    for name, (busy, first, last) in sorted(workers.items()):
        print(f"    worker {name}: busy {busy * 1e3:7.2f} ms, first task from "
              f"{first * 1e3:6.1f} ms, last until {last * 1e3:6.1f} ms after submitting")


class NoWork:
    """A backend whose tasks do nothing (a total of zeros, a scan that returns its chunk):
    the same graph, so its time is Dask's own."""

    def total(self, chunk, op, axis=0):
        return np.zeros(1, chunk.dtype)

    def scan(self, chunk, op, mode, carry=None, axis=0):
        return chunk


def _synchronize():
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def timed(client, work, repeat, what="run"):
    """The best of ``repeat`` runs of ``work().persist()`` (``work``: the lazy result)
    until every chunk's task has returned and every worker's GPU has finished (a task
    returns once its kernels are queued), after one more that compiles."""
    from distributed import wait

    best = float("inf")
    for run in range(repeat + 1):
        start = time.perf_counter()
        result = work().persist()
        wait(result)
        client.run(_synchronize)
        seconds = time.perf_counter() - start
        progress(f"{what} {run}: {seconds:.3f} s" + (" (compiles)" if run == 0 else ""))
        best = min(best, seconds)
        del result
    return best


def without_dask(n, chunk, op, repeat):
    """Seconds of the same work on the same chunks with no Dask, on one GPU, until the GPU
    is done (best of ``repeat``): what the tasks of a scan of up to
    scangen.dask.DIRECT_CARRIES_MAX_CHUNKS chunks do, every chunk's total but the last,
    then each chunk's scan with the totals before it folded into its carry."""
    import cupy

    import scangen.dask as sd
    from scangen.chunked import GPUBackend, operator_of

    x = cupy.random.default_rng(0).random(n, dtype=np.float32)
    backend, op = GPUBackend(), operator_of(op)
    chunks = [x[start:start + chunk] for start in range(0, n, chunk)]
    best = float("inf")
    for run in range(repeat + 1):
        cupy.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        totals = [backend.total(c, op) for c in chunks[:-1]]
        scanned = [sd._scan_after(c, *totals[:k], backend=backend, op=op, mode="inclusive")
                   for k, c in enumerate(chunks)]
        cupy.cuda.runtime.deviceSynchronize()
        best = min(best, time.perf_counter() - start) if run else best
        del scanned
    del x, chunks
    cupy.get_default_memory_pool().free_all_blocks()
    return best


_START = time.perf_counter()


def progress(what):
    """A line on stderr with the seconds since the start: the phases of a long run."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {what}", file=sys.stderr, flush=True)


def _setting_value(text):
    """A --dask-config value as Dask takes it: a number or a boolean where it reads as one
    (1.5, False), else the text ("inf", "10ms")."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=31)
    parser.add_argument("--chunk-log2", type=int, default=27)
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--operator", default="add", choices=["add", "last_nonzero"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--sort", action="store_true",
                        help="time scangen.dask.sort of uint32 keys instead of the scan")
    parser.add_argument("--partitions", type=int, default=None,
                        help="--sort's output partitions (default: one per chunk)")
    parser.add_argument("--breakdown", action="store_true",
                        help="where the time goes: the kernels without Dask, the graph with "
                             "no work in its tasks, and one more run's task stream")
    parser.add_argument("--dask-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a Dask setting for the cluster and the runs (repeatable), "
                             "e.g. distributed.scheduler.worker-saturation=inf")
    args = parser.parse_args(argv)
    settings = {key: _setting_value(value)
                for key, value in (setting.split("=", 1) for setting in args.dask_config)}

    import dask
    # distributed's defaults must be loaded before --dask-config sets any of its keys: a key
    # set first leaves the others of its section unset (distributed.comm... then fails).
    import distributed  # noqa: F401

    import scangen.dask as sd

    n, chunk = 1 << args.log2n, 1 << args.chunk_log2
    op = operator(args.operator)
    what = "sort" if args.sort else args.operator
    if args.partitions is not None and not args.sort:
        raise SystemExit("--partitions is --sort's")
    if args.breakdown and args.sort:
        raise SystemExit("--breakdown takes a scan apart: leave out --sort")
    if args.breakdown:
        floor = without_dask(n, chunk, op, args.repeat)
        print(f"the same kernels without Dask, one GPU: {floor * 1e3:.1f} ms", flush=True)
    rows, base = [], None
    for gpus in [int(g) for g in args.gpus.split(",")]:
        with dask.config.set(settings), sd.gpu_cluster(gpus) as client:
            print(f"{gpus} GPU(s): {len(client.scheduler_info()['workers'])} workers", flush=True)
            if args.check and not (check_sort if args.sort else check)(client):
                raise SystemExit(f"the multi-GPU {what} differs from the reference")
            progress("cluster up" + (", check done" if args.check else ""))
            x = on_gpus(client, n, chunk, what)
            progress(f"2^{args.log2n} elements made on the GPU(s)")
            best = timed(client, (lambda x=x: sd.sort(x, partitions=args.partitions))
                         if args.sort else
                         (lambda x=x: sd.inclusive_scan(x, op)), args.repeat)
            if args.breakdown:
                idle = timed(client, lambda x=x: sd.inclusive_scan(x, op, backend=NoWork()),
                             args.repeat, "no work")
                print(f"  the same graph, no work in its tasks: {idle * 1e3:.1f} ms", flush=True)
                print_task_stream(client, x, op)
            del x
            base = base or best
            rows.append((gpus, best, base / best))
    itemsize = 4
    print(f"\n2^{args.log2n} elements ({what}), chunks of 2^{args.chunk_log2}:")
    print("| GPUs | seconds | GB/s (read + write once) | speedup |")
    print("| --- | --- | --- | --- |")
    for gpus, seconds, speedup in rows:
        print(f"| {gpus} | {seconds:.3f} | {2 * n * itemsize / seconds / 1e9:.0f} | "
              f"{speedup:.2f}x |")


if __name__ == "__main__":
    main()
