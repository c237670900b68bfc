"""``python -m scangen bench --primitives``: scangen's primitives next to their peers (torch,
CuPy, CUB) and a copy of the same bytes.

Every contender is timed the way the scan bench times scans (scangen.bench.Timer: CUDA events
on the default stream around back-to-back calls, warm-up first, median of the trials). A
primitive whose result size is data-dependent (select, unique) reads its count on the host,
as torch.masked_select does; ``count on device`` rows leave it on the GPU. The "copy" row of
each table moves the bytes the primitive must move at least (reads plus writes) with one
device-to-device copy, the roof the targets are stated against. The segmented-scan tables
(float32 add, 1 to 2^20 segments of random lengths) time SegmentedScan by CSR offsets, by
head flags and by keys over the same segments (the offsets are checked on the device each
call, as SegmentedScan does by default). With ``--cub``, CUB's primitives join the tables
after scangen's rows: the program scangen/cub/cub_primitives.cu, built with the nvcc on
PATH, timed the same way on input made the same way (its counts stay on the device).

``--json FILE`` writes one row per primitive and size: ``primitive``, ``dtype``, ``n``,
``scangen_us`` (its first scangen row) and ``<peer>_us`` for each peer timed (``copy``,
``cub``, ``cupy``, ``torch``: the first row of each), with every contender's time under
``contenders``; ``--plot FILE`` draws each primitive's peers against scangen at the largest
size.
"""
from __future__ import annotations

import json
import time

import numpy as np

from .bench import CUB_DIR, Timer, _progress, cub_program, cub_rows
from .primitives import (Histogram, Partition, RadixDigitOffsets, RadixSort, RunLengthEncode,
                         Select, Unique, argsort)
from .runtime.contexts import current_context
from .runtime.gpu import require_pycuda
from .segmented import SegmentedScan

CUB_SOURCE = CUB_DIR / "cub_primitives.cu"
#: The first word of a contender's name that says whose it is, and the key of its JSON column.
PEERS = {"copy": "copy", "cub": "cub", "cupy": "cupy", "torch": "torch"}


def _peers():
    found = {}
    for name in ("torch", "cupy"):
        try:
            found[name] = __import__(name)
        except ImportError:
            pass
    return found


def cases(n, rng, gpuarray, driver, peers):
    """(primitive, bytes it must move, [(contender, call)]) for each benchmark at size n."""
    torch, cupy = peers.get("torch"), peers.get("cupy")
    out = []

    x = rng.random(n, dtype=np.float32)
    mask = rng.random(n) < 0.5
    kept = int(mask.sum())
    xg, mg = gpuarray.to_gpu(x), gpuarray.to_gpu(mask)
    select = Select(np.float32, flags=np.bool_)
    selected = gpuarray.empty(n, np.float32)
    calls = [("scangen.Select(flags)", lambda: select(xg, mg, out=selected)),
             ("scangen.Select(flags), count on device",
              lambda: select(xg, mg, out=selected, count_on_device=True))]
    # The same with one pass over x (auto takes reduce_then_scan at this size, which reads x
    # twice): which strategy suits compaction is this row against the first.
    lookback = Select(np.float32, flags=np.bool_, strategy="decoupled_lookback")
    calls.append(("scangen.Select(flags), decoupled_lookback",
                  lambda: lookback(xg, mg, out=selected)))
    predicate = Select(np.float32, "x < 0.5f")
    calls.append(("scangen.Select('x < 0.5f')", lambda: predicate(xg, out=selected)))
    if torch is not None:
        tx, tm = torch.from_numpy(x).cuda(), torch.from_numpy(mask).cuda()
        calls.append(("torch.masked_select", lambda: torch.masked_select(tx, tm)))
    if cupy is not None:
        cx, cm = cupy.asarray(x), cupy.asarray(mask)
        calls.append(("cupy.compress", lambda: cupy.compress(cm, cx)))
    out.append(("select float32, half kept, mask given", 5 * n + 4 * kept, calls))

    keys = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
    values = rng.integers(0, 2 ** 32, n, dtype=np.uint32)
    kg, vg = gpuarray.to_gpu(keys), gpuarray.to_gpu(values)
    sort_keys, sort_pairs = RadixSort(np.uint32), RadixSort(np.uint32, np.uint32)
    key_calls = [("scangen.RadixSort", lambda: sort_keys(kg))]
    pair_calls = [("scangen.RadixSort(pairs)", lambda: sort_pairs(kg, vg))]
    if torch is not None:
        # torch has no uint32 sort on every version; int64 holds the same keys in order
        tk = torch.from_numpy(keys.astype(np.int64)).cuda()
        tv = torch.from_numpy(values.astype(np.int64)).cuda()
        key_calls.append(("torch.sort (int64 keys)", lambda: torch.sort(tk)))
        pair_calls.append(("torch.sort + gather (int64)",
                           lambda: tv[torch.sort(tk).indices]))
    if cupy is not None:
        ck, cv = cupy.asarray(keys), cupy.asarray(values)
        key_calls.append(("cupy.sort", lambda: cupy.sort(ck)))
        pair_calls.append(("cupy.argsort + take", lambda: cv[cupy.argsort(ck)]))
    out.append(("radix_sort uint32 keys", 8 * n, key_calls))
    out.append(("radix_sort uint32 keys + uint32 values", 16 * n, pair_calls))
    # Other key types, and argsort (int64 indices out), against the peers' stable sorts.
    floats = rng.standard_normal(n).astype(np.float32)
    wide = rng.integers(0, 2 ** 64, n, dtype=np.uint64)
    fg, wg = gpuarray.to_gpu(floats), gpuarray.to_gpu(wide)
    sort_floats, sort_wide = RadixSort(np.float32), RadixSort(np.uint64)
    float_calls = [("scangen.RadixSort", lambda: sort_floats(fg))]
    wide_calls = [("scangen.RadixSort", lambda: sort_wide(wg))]
    order_calls = [("scangen.argsort", lambda: argsort(fg))]
    if torch is not None:
        tf = torch.from_numpy(floats).cuda()
        float_calls.append(("torch.sort", lambda: torch.sort(tf)))
        order_calls.append(("torch.argsort(stable=True)",
                            lambda: torch.argsort(tf, stable=True)))
    if cupy is not None:
        cf, cw = cupy.asarray(floats), cupy.asarray(wide)
        float_calls.append(("cupy.sort", lambda: cupy.sort(cf)))
        wide_calls.append(("cupy.sort", lambda: cupy.sort(cw)))
        order_calls.append(("cupy.argsort", lambda: cupy.argsort(cf)))
    out.append(("radix_sort float32 keys", 8 * n, float_calls))
    out.append(("radix_sort uint64 keys", 16 * n, wide_calls))
    out.append(("argsort float32", 12 * n, order_calls))
    # Skewed keys: passes over a digit every key shares copy instead of ranking.
    for label, skewed in (("16 distinct", rng.integers(0, 16, n, dtype=np.uint32)),
                          ("all equal", np.full(n, 7, np.uint32))):
        sg = gpuarray.to_gpu(skewed)
        calls = [("scangen.RadixSort", lambda sg=sg: sort_keys(sg))]
        if cupy is not None:
            cs = cupy.asarray(skewed)
            calls.append(("cupy.sort", lambda cs=cs: cupy.sort(cs)))
        out.append((f"radix_sort uint32 keys, {label}", 8 * n, calls))

    offsets = RadixDigitOffsets(np.uint32, 8)
    out.append(("radix_digit_offsets uint32, 8 bits", 12 * n,
                [("scangen.RadixDigitOffsets", lambda: offsets(kg, 8))]))

    runs = np.repeat(rng.integers(0, 1000, n // 4 + 1), 4)[:n].astype(np.int32)
    rg = gpuarray.to_gpu(runs)
    unique, rle = Unique(np.int32), RunLengthEncode(np.int32)
    unique_out = gpuarray.empty(n, np.int32)
    # Unique and RunLengthEncode count in one pass at every size (tuning.COUNTING_VALUES):
    # the second row of each is the three-pass alternative, on the same tiles.
    unique_passes = Unique(np.int32, strategy="reduce_then_scan")
    calls = [("scangen.Unique", lambda: unique(rg, out=unique_out)),
             # as CUB's row runs: the count left on the device
             ("scangen.Unique, count on device",
              lambda: unique(rg, out=unique_out, count_on_device=True)),
             ("scangen.Unique, reduce_then_scan", lambda: unique_passes(rg, out=unique_out))]
    rle_values, rle_counts = gpuarray.empty(n, np.int32), gpuarray.empty(n, np.int64)
    rle_calls = [("scangen.RunLengthEncode", lambda: rle(rg)),
                 ("scangen.RunLengthEncode, count on device",
                  lambda: rle(rg, count_on_device=True)),
                 # as CUB's row runs: outputs allocated once, the count left on the device
                 ("scangen.RunLengthEncode, outputs given, count on device",
                  lambda: rle(rg, values=rle_values, counts=rle_counts, count_on_device=True))]
    rle_passes = RunLengthEncode(np.int32, strategy="reduce_then_scan")
    rle_calls.append(("scangen.RunLengthEncode, reduce_then_scan", lambda: rle_passes(rg)))
    if torch is not None:
        tr = torch.from_numpy(runs).cuda()
        calls.append(("torch.unique_consecutive", lambda: torch.unique_consecutive(tr)))
        rle_calls.append(("torch.unique_consecutive(return_counts)",
                          lambda: torch.unique_consecutive(tr, return_counts=True)))
    out.append(("unique int32, runs of 4", 4 * n + n, calls))
    out.append(("run_length_encode int32, runs of 4", 4 * n + 3 * n, rle_calls))

    part = Partition(np.float32, "x < 0.5f")
    parted = gpuarray.empty(n, np.float32)
    # The others in reverse order (CUB's): one pass over x, auto's and the single pass's.
    reversing = Partition(np.float32, "x < 0.5f", reverse_rejected=True)
    one_pass = Partition(np.float32, "x < 0.5f", reverse_rejected=True,
                         strategy="decoupled_lookback")
    out.append(("partition float32, half true", 8 * n,
                [("scangen.Partition", lambda: part(xg, out=parted)),
                 ("scangen.Partition, count on device",
                  lambda: part(xg, out=parted, count_on_device=True)),
                 ("scangen.Partition(reverse_rejected), count on device",
                  lambda: reversing(xg, out=parted, count_on_device=True)),
                 ("scangen.Partition(reverse_rejected), decoupled_lookback, count on device",
                  lambda: one_pass(xg, out=parted, count_on_device=True))]))

    hist = Histogram(np.float32)
    calls = [("scangen.Histogram(256 bins)", lambda: hist(xg, 256, (0.0, 1.0)))]
    if torch is not None:
        tx = torch.from_numpy(x).cuda()
        calls.append(("torch.histc(256 bins)", lambda: torch.histc(tx, 256, 0.0, 1.0)))
    if cupy is not None:
        cx = cupy.asarray(x)
        calls.append(("cupy.histogram(256 bins)", lambda: cupy.histogram(cx, 256, (0.0, 1.0))))
    out.append(("histogram float32, 256 bins", 4 * n, calls))

    # Segmented scans: the same segments given three ways. Small whole numbers as floats, so
    # every sum is exact (up to 2^24) in any order, as in CUB's run. A generator of their
    # own, so the tables above keep their inputs.
    rng = np.random.default_rng([2026, n])
    summed = gpuarray.to_gpu(rng.integers(0, 4, n).astype(np.float32))
    segmented = SegmentedScan(np.float32)
    scanned = gpuarray.empty(n, np.float32)
    for segments in SEGMENT_COUNTS:
        if segments > n:
            continue
        starts = segment_offsets(rng, n, segments)
        heads = np.zeros(n, np.bool_)
        heads[starts[:-1][starts[:-1] < n]] = True
        segment_keys = np.repeat(np.arange(segments, dtype=np.int32), np.diff(starts))
        og, hg, sk = (gpuarray.to_gpu(a) for a in (starts, heads, segment_keys))
        calls = [("scangen.SegmentedScan(offsets=)",
                  lambda og=og: segmented(summed, scanned, offsets=og)),
                 ("scangen.SegmentedScan(flags=)",
                  lambda hg=hg: segmented(summed, scanned, flags=hg)),
                 ("scangen.SegmentedScan(keys=, int32)",
                  lambda sk=sk: segmented(summed, scanned, keys=sk))]
        out.append((f"segmented scan float32 add, {segments} segment"
                    f"{'s' if segments > 1 else ''}",
                    8 * n + starts.nbytes, calls))
    return out


#: Segments of the segmented-scan tables (random lengths; up to the size).
SEGMENT_COUNTS = (1, 1024, 65536, 1 << 20)


def segment_offsets(rng, n, segments):
    """CSR offsets (int64) of n elements in ``segments`` segments of random lengths: the
    cuts between them drawn uniformly with replacement, so a few segments may be empty (as
    cub_primitives.cu makes them)."""
    cuts = np.sort(rng.integers(0, n + 1, segments - 1))
    return np.concatenate([[0], cuts, [n]]).astype(np.int64)


def cub_timings(args, driver) -> dict:
    """{(primitive, n): [(contender, seconds)]} from CUB_SOURCE, built once and run with the
    same sizes and trials; {} (after a skip line) without nvcc."""
    major, minor = driver.Context.get_device().compute_capability()
    found = {}
    with cub_program(CUB_SOURCE, f"sm_{major}{minor}") as binary:
        if binary is not None:
            _progress(f"{CUB_SOURCE.name} {' '.join(map(str, args.sizes))} ...")
            for r in cub_rows(binary, args.sizes, args.trials, args.queued):
                found.setdefault((r["primitive"], r["n"]), []).append((r["contender"],
                                                                       r["seconds"]))
    return found


def after_scangen(rows, inserted):
    """rows, (contender, seconds) pairs, with `inserted` after the last scangen row."""
    scangen_rows = [i for i, (name, _) in enumerate(rows) if name.startswith("scangen")]
    at = scangen_rows[-1] + 1 if scangen_rows else len(rows)
    return rows[:at] + inserted + rows[at:]


def dtype_of(primitive: str) -> str:
    """The element type a primitive's table names ("select float32, ..." -> "float32")."""
    for word in primitive.replace(",", " ").split():
        if word in ("int32", "uint32", "float32", "float64", "int64", "uint64"):
            return word
    return ""


def owner(contender: str) -> str:
    """Whose row it is: "scangen", one of PEERS, or "" (a name none of them starts)."""
    first = contender.split(".")[0].split()[0].lower()
    if first == "scangen":
        return "scangen"
    return PEERS.get(first, "")


def summary_rows(results: list[dict]) -> list[dict]:
    """One row per (primitive, n), in the order timed: scangen's first row and each peer's
    first, in microseconds, and every contender's time under ``contenders``."""
    rows = {}
    for r in results:
        row = rows.setdefault((r["primitive"], r["n"]), dict(
            primitive=r["primitive"], dtype=dtype_of(r["primitive"]), n=r["n"],
            contenders={}))
        us = r["seconds"] * 1e6
        row["contenders"][r["contender"]] = us
        who = owner(r["contender"])
        if who and f"{who}_us" not in row:
            row[f"{who}_us"] = us
    return list(rows.values())


def plot(rows: list[dict], path: str, title: str) -> bool:
    """Bars of each peer's time over scangen's (above 1: scangen is faster), per primitive
    at the largest size timed; False where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    largest = max(row["n"] for row in rows)
    shown = [row for row in rows if row["n"] == largest and "scangen_us" in row]
    peers = [p for p in PEERS if p != "copy" and any(f"{p}_us" in row for row in shown)]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) + 1.5))
    height = 0.8 / max(1, len(peers))
    for k, peer in enumerate(peers):
        ratios = [row.get(f"{peer}_us", np.nan) / row["scangen_us"] for row in shown]
        ax.barh(np.arange(len(shown)) + k * height, ratios, height, label=peer)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(np.arange(len(shown)) + height * (len(peers) - 1) / 2)
    ax.set_yticklabels([row["primitive"] for row in shown], fontsize=8)
    ax.set_xlabel(f"peer time / scangen time at n = {largest:,} (above 1: scangen faster)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def run(args) -> list[dict]:
    """Every contender of every primitive at every size: dicts of primitive, n, contender,
    seconds and device, in order, each table printed as it completes."""
    driver = require_pycuda()
    current_context()
    from pycuda import gpuarray

    device = driver.Context.get_device().name()
    peers = {} if args.no_peers else _peers()
    timer = Timer(driver, args.trials, args.warmup, args.queued)
    rng = np.random.default_rng(2026)
    cub = cub_timings(args, driver) if args.cub else {}
    results = []
    for n in args.sizes:
        for primitive, n_bytes, calls in cases(n, rng, gpuarray, driver, peers):
            if args.only and not any(word in primitive for word in args.only):
                continue
            source = gpuarray.empty(max(n_bytes // 2, 1), np.uint8)
            target = gpuarray.empty_like(source)
            copy = ("copy of the same bytes",
                    lambda: driver.memcpy_dtod_async(target.gpudata, source.gpudata,
                                                     source.nbytes))
            rows = []
            for name, call in [copy, *calls]:
                _progress(f"{primitive} n={n:,} {name} ...")
                try:
                    seconds = timer.seconds_per_call(call, n_bytes)
                except Exception as err:  # a peer missing a feature: report, go on
                    _progress(f"  {name} failed: {err}\n")
                    continue
                rows.append((name, seconds))
            rows = after_scangen(rows, cub.get((primitive, n), []))
            results += [dict(primitive=primitive, n=n, contender=name, seconds=seconds,
                             device=device) for name, seconds in rows]
            print(table(primitive, n, device, rows))
    _progress("done.\n")
    return results


def table(primitive: str, n: int, device: str, rows) -> str:
    """A primitive's markdown table: each contender's time, % of the copy, and its time over
    the first scangen row's."""
    copy_seconds = rows[0][1]
    first = next((s for name, s in rows if owner(name) == "scangen"), None)
    lines = [f"\n**{primitive}, n = {n:,}** ({device})\n",
             "| contender | time (us) | % of copy | time / first scangen row |",
             "|---|---:|---:|---:|"]
    for name, seconds in rows:
        ratio = f"{seconds / first:.2f}x" if first else ""
        lines.append(f"| {name} | {seconds * 1e6:.1f} | {100 * copy_seconds / seconds:.0f}% | "
                     f"{ratio} |")
    return "\n".join(lines)


def main(args) -> int:
    """``bench --primitives``: time, print the tables, write the JSON and the plot."""
    started = time.time()
    results = run(args)
    device = results[0]["device"] if results else current_context().get_device().name()
    rows = summary_rows(results)
    title = f"scangen primitives on {device}, {time.strftime('%Y-%m-%d')}"
    with open(args.json, "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"),
                   "method": __doc__.strip(), "queued": args.queued, "rows": rows}, f,
                  indent=1)
    print(f"\nwrote {args.json}", end="")
    if args.plot and rows and plot(rows, args.plot, title):
        print(f" and {args.plot}", end="")
    print(f" in {time.time() - started:.0f} s")
    return 0
