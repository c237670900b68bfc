"""A scan of a Dask array of CuPy chunks on 1 and on k GPUs of one host (scangen.dask).

For each GPU count, a local cluster with one worker per GPU (scangen.dask.gpu_cluster:
dask-cuda's LocalCUDACluster where it is installed, otherwise one Nanny per GPU with
CUDA_VISIBLE_DEVICES set), an array of 2^log2n elements in chunks spread over the workers,
created and persisted on the GPUs before timing; then the best of ``--repeat`` runs of
``inclusive_scan(x).persist()`` until every chunk is done: compute only, no data creation,
no gathering. ``--check`` first compares, at 2^26, the k-GPU result of a non-commutative
scan (last non-zero) with the CPU reference. Run on the GPU host:

    python benchmarks/dask_scan.py [--log2n 31] [--gpus 1,2] [--chunk-log2 27] [--check]
                                   [--task-stream]
"""
import argparse
import sys
import time

import numpy as np

import scangen


def _to_gpu(block, op_name, block_id=None):
    import cupy

    rng = cupy.random.default_rng(block_id[0])  # chunks differ: a carry from the wrong one shows
    values = rng.random(len(block), dtype=np.float32)
    if op_name == "last_nonzero":
        values = cupy.where(values < 0.7, 0, (values * 1000).astype(np.int32)).astype(np.int32)
    return values


def on_gpus(client, n, chunk, op_name):
    """A persisted dask.array of CuPy chunks, spread over the workers."""
    import cupy
    import dask.array as da
    from distributed import wait

    dtype = np.int32 if op_name == "last_nonzero" else np.float32
    x = da.empty(n, chunks=chunk, dtype=np.uint8).map_blocks(
        _to_gpu, op_name, dtype=dtype, meta=cupy.empty(0, dtype))
    x = client.persist(x)
    wait(x)
    return x


def operator(op_name):
    return scangen.LAST_NONZERO if op_name == "last_nonzero" else op_name


def check(client, chunk):
    import scangen.dask as sd

    n = 1 << 26
    x = on_gpus(client, n, chunk, "last_nonzero")
    got = sd.inclusive_scan(x, scangen.LAST_NONZERO).map_blocks(
        lambda b: b.get(), meta=np.empty(0, np.int32)).compute()
    host = x.map_blocks(lambda b: b.get(), meta=np.empty(0, np.int32)).compute()
    same = np.array_equal(got, scangen.reference_scan(host, scangen.LAST_NONZERO))
    print(f"  check: last non-zero over 2^26 int32 equals the CPU reference: {same}", flush=True)
    return same


def print_task_stream(client, x, op):
    """Where one more run's time goes: for each kind of task (Dask's key prefix), how many
    ran, their summed and longest compute and transfer times, from Dask's task stream."""
    import collections

    import scangen.dask as sd
    from distributed import get_task_stream, wait

    with get_task_stream(client) as stream:
        start = time.time()
        wait(sd.inclusive_scan(x, op).persist())
        wall = time.time() - start
    rows = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # count, compute, max, transfer
    for task in stream.data:
        key = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        row = rows[str(key).rsplit("-", 1)[0]]
        row[0] += 1
        for span in task["startstops"]:
            seconds = span["stop"] - span["start"]
            if span["action"] == "compute":
                row[1] += seconds
                row[2] = max(row[2], seconds)
            elif span["action"] == "transfer":
                row[3] += seconds
    print(f"  task stream of one run ({wall * 1e3:.1f} ms wall):")
    for name, (count, compute, longest, transfer) in sorted(rows.items(), key=lambda r: -r[1][1]):
        print(f"    {name:40} {count:4} tasks  compute {compute * 1e3:8.2f} ms "
              f"(longest {longest * 1e3:6.2f})  transfer {transfer * 1e3:7.2f} ms")


_START = time.perf_counter()


def progress(what):
    """A line on stderr with the seconds since the start: the phases of a long run."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {what}", file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=31)
    parser.add_argument("--chunk-log2", type=int, default=27)
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--operator", default="add", choices=["add", "last_nonzero"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--task-stream", action="store_true",
                        help="after the timings, one more run with Dask's task stream: "
                             "compute and transfer time per kind of task")
    args = parser.parse_args(argv)

    import scangen.dask as sd
    from distributed import wait

    n, chunk = 1 << args.log2n, 1 << args.chunk_log2
    rows, base = [], None
    for gpus in [int(g) for g in args.gpus.split(",")]:
        with sd.gpu_cluster(gpus) as client:
            print(f"{gpus} GPU(s): {len(client.scheduler_info()['workers'])} workers", flush=True)
            if args.check and not check(client, chunk):
                raise SystemExit("the multi-GPU scan differs from the reference")
            progress("cluster up" + (", check done" if args.check else ""))
            x = on_gpus(client, n, chunk, args.operator)
            progress(f"2^{args.log2n} elements made on the GPU(s)")
            best = float("inf")
            for run in range(args.repeat + 1):  # one more: the first compiles on every worker
                start = time.perf_counter()
                result = sd.inclusive_scan(x, operator(args.operator)).persist()
                wait(result)
                seconds = time.perf_counter() - start
                progress(f"run {run}: {seconds:.3f} s" + (" (compiles)" if run == 0 else ""))
                best = min(best, seconds)
                del result
            if args.task_stream:
                print_task_stream(client, x, operator(args.operator))
            del x
            base = base or best
            rows.append((gpus, best, base / best))
    itemsize = 4
    print(f"\n2^{args.log2n} elements ({args.operator}), chunks of 2^{args.chunk_log2}:")
    print("| GPUs | seconds | GB/s (read + write) | speedup |")
    print("| --- | --- | --- | --- |")
    for gpus, seconds, speedup in rows:
        print(f"| {gpus} | {seconds:.3f} | {2 * n * itemsize / seconds / 1e9:.0f} | "
              f"{speedup:.2f}x |")


if __name__ == "__main__":
    main()
