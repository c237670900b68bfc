"""``python -m scangen tune``: measure the scan's tiles and register bounds on the GPU this
process sees, and save the fastest as that GPU's table, which every later process on it
uses (scangen.tuning.active_scan_table).

For each element size (1, 2, 4 and 8 bytes: uint8, int16, float32 and float64 add) it times
the scan ``auto`` runs at ``--n`` elements (the single pass, by default 2^26 elements) with
each candidate: a warp_shuffle tile of THREADS x ITEMS, the register bound
``tile_min_threads_per_sm``, and whether a lane's run moves in 16-byte words
(``tile_vector_runs``, where the run fills whole words) or warp by warp. The table in
effect comes first for every size, and the candidates are taken in turns across the sizes,
so a time budget that runs out leaves each size measured alike. The GPU is first kept busy
for WARM_UP_S (the table's values then come first on a GPU at its clocks), and the fastest
candidate of a size is then timed again against the table's values side by side,
CONFIRM_ROUNDS times each, alternating: it replaces them only where those medians show it
at least MIN_GAIN faster (so the saved table is never slower than the one it replaces,
within the noise of one run). The report lists both times for every size, and each as a
share of a device-to-device copy of the same bytes timed in the same run. Timing: CUDA
events around batches of calls, the median of ``--trials`` (scangen.bench.Timer).

The sweep itself (:func:`sweep`, :func:`choose`, :func:`tuned_table`) is pure Python over a
``measure(itemsize, candidate) -> seconds`` function (``candidate`` COPY: the copy), so it
is tested without a GPU.
"""
from __future__ import annotations

import itertools
import shlex
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from . import bench, tuning
from .compile import precompile
from .runtime.contexts import current_context
from .runtime.gpu import require_pycuda
from .scan import Scan
from .tuning import Table, Tuning

#: A candidate must be at least this much faster than the table's values to replace them.
MIN_GAIN = 0.02
#: Seconds of work before the first measurement, so that it is not taken at idle clocks.
WARM_UP_S = 1.0
#: Side-by-side timings of the table's values and the fastest candidate, each.
CONFIRM_ROUNDS = 5
#: What ``measure(itemsize, COPY)`` times: a device-to-device copy of the scan's bytes.
COPY = "copy"

#: The dtype timed for each element size (add: the scan users run most).
DTYPES = {1: "uint8", 2: "int16", 4: "float32", 8: "float64"}

#: The grid: warp_shuffle threads and items per thread, tile_min_threads_per_sm, and
#: tile_vector_runs (short runs of wide values fill a word or two, which vector runs may
#: move better than long ones: items of 4).
BLOCKS = (128, 256, 512)
ITEMS = (4, 8, 16, 32)
BOUNDS = (1024, 1536, 2048)
VECTOR_RUNS = (False, True)


@dataclass(frozen=True)
class Candidate:
    """One tile, register bound and way of moving runs of the single pass."""

    block_size: int
    items_per_thread: int
    tile_min_threads_per_sm: int
    vector_runs: bool = False

    def __str__(self):
        words = ", words" if self.vector_runs else ""
        return (f"{self.block_size}x{self.items_per_thread}, "
                f"{self.tile_min_threads_per_sm}/SM{words}")

    def scan(self, dtype) -> Scan:
        """The scan of ``dtype`` with this candidate's tile and bound (add, auto)."""
        return Scan(dtype, "add", algorithm="warp_shuffle",
                    section_size=self.block_size * self.items_per_thread,
                    items_per_thread=self.items_per_thread,
                    tuning=Tuning(tile_min_threads_per_sm=self.tile_min_threads_per_sm,
                                  tile_vector_runs=self.vector_runs))


@dataclass(frozen=True)
class Measured:
    itemsize: int
    candidate: Candidate
    seconds: float


def in_effect(table: Table, itemsize: int) -> Candidate:
    """The candidate ``table`` gives values of ``itemsize`` bytes."""
    tile = table.tile(itemsize)
    return Candidate(tile.block_size, tile.items_per_thread,
                     table.value("tile_min_threads_per_sm", itemsize),
                     table.value("tile_vector_runs", itemsize))


def candidates(itemsize: int, table: Table, blocks=BLOCKS, items=ITEMS,
               bounds=BOUNDS, vector_runs=VECTOR_RUNS) -> list[Candidate]:
    """The table's values first, then every tile, bound and way of moving runs of the
    grid that makes a valid scan of ``itemsize``-byte values (its sections fit the shared
    memory; vector runs only where the scan then moves words: ScanModule.vector_runs)."""
    first = in_effect(table, itemsize)
    found = [first]
    for block, item, bound, vector in itertools.product(blocks, items, bounds, vector_runs):
        candidate = Candidate(block, item, bound, vector)
        if candidate == first:
            continue
        try:
            scan = candidate.scan(DTYPES[itemsize])
        except ValueError:  # sections past the shared memory, or a tile warp_shuffle refuses
            continue
        if vector and scan.kernel.scan_module.vector_runs is None:
            continue  # the same kernel as its warp-by-warp twin
        found.append(candidate)
    return found


def sweep(grid: dict, measure, *, budget_s: float, clock=time.monotonic,
          progress=None) -> list[Measured]:
    """Time the candidates of ``grid`` ({itemsize: candidates, the table's values first})
    with ``measure(itemsize, candidate) -> seconds``, in turns across the sizes, starting
    none once ``budget_s`` seconds have passed (the table's values of every size always
    run). ``progress(done, total, text)`` hears of each."""
    order = [(size, candidate) for batch in itertools.zip_longest(*grid.values())
             for size, candidate in zip(grid, batch) if candidate is not None]
    start, results = clock(), []
    for done, (size, candidate) in enumerate(order):
        first = candidate == grid[size][0]
        if not first and clock() - start > budget_s:
            continue
        results.append(Measured(size, candidate, measure(size, candidate)))
        if progress:
            progress(done + 1, len(order), f"{DTYPES.get(size, size)} {candidate}")
    return results


def choose(results: list[Measured], itemsize: int, table: Table, measure,
           rounds: int = CONFIRM_ROUNDS) -> tuple[Measured, Measured]:
    """``(in effect, chosen)`` for one size: the sweep's fastest candidate, timed again
    against the table's values side by side (``rounds`` times each, alternating, the median
    kept), where it beats them by MIN_GAIN, else the table's values."""
    current = in_effect(table, itemsize)
    mine = [r for r in results if r.itemsize == itemsize]
    baseline = next(r for r in mine if r.candidate == current)
    best = min(mine, key=lambda r: r.seconds)
    if best.candidate == current:
        return baseline, baseline
    times = {current: [], best.candidate: []}
    for _ in range(rounds):
        for candidate, seen in times.items():
            seen.append(measure(itemsize, candidate))
    baseline, best = (Measured(itemsize, c, statistics.median(t)) for c, t in times.items())
    return baseline, best if best.seconds < baseline.seconds * (1 - MIN_GAIN) else baseline


def warm_up(grid: dict, measure, *, seconds: float = WARM_UP_S, clock=time.monotonic) -> None:
    """Measure the table's values of every size, discarding the times, for ``seconds``."""
    start = clock()
    while True:
        for size, batch in grid.items():
            measure(size, batch[0])
        if clock() - start >= seconds:
            return


def tuned_table(table: Table, chosen: dict) -> Table:
    """``table`` with each size's chosen candidate ({itemsize: Candidate})."""
    data = table.as_data()
    for size, candidate in chosen.items():
        data["by_size"].setdefault(str(size), {}).update(
            block_size=candidate.block_size, items_per_thread=candidate.items_per_thread,
            tile_min_threads_per_sm=candidate.tile_min_threads_per_sm,
            tile_vector_runs=candidate.vector_runs)
    return table.with_data(data)


def gpu_measure(n: int, trials: int, warmup: int):
    """``measure(itemsize, candidate) -> seconds`` on the current GPU: the candidate's scan
    of n elements of DTYPES[itemsize] into a second array (the inputs made once)."""
    driver = require_pycuda()
    from pycuda import gpuarray

    timer, arrays = bench.Timer(driver, trials, warmup), {}

    def measure(itemsize, candidate):
        dtype = DTYPES[itemsize]
        if dtype not in arrays:
            x = gpuarray.to_gpu(np.ones(n, dtype))
            arrays[dtype] = (x, gpuarray.empty_like(x))
        x, out = arrays[dtype]
        if candidate == COPY:
            def call():
                driver.memcpy_dtod_async(out.gpudata, x.gpudata, x.nbytes)
        else:
            scan = candidate.scan(dtype)

            def call():
                scan(x, out=out)
        return timer.seconds_per_call(call, 2 * x.nbytes)

    return measure


def report_lines(rows) -> list[str]:
    """The report: per size, the table's values and time, the fastest and the choice."""
    lines = [f"{'dtype':8} {'copy us':>8} {'in effect':24} {'us':>8} {'of copy':>7} "
             f"{'chosen':24} {'us':>8} {'of copy':>7} {'gain':>6}"]
    for row in rows:
        lines.append(f"{row['dtype']:8} {row['copy_us']:8.1f} {row['in_effect']:24} "
                     f"{row['in_effect_us']:8.1f} {row['copy_us'] / row['in_effect_us']:7.0%} "
                     f"{row['chosen']:24} {row['chosen_us']:8.1f} "
                     f"{row['copy_us'] / row['chosen_us']:7.0%} {row['gain']:6.1%}")
    return lines


def main(args) -> int:
    """The ``tune`` command (scangen.cli): measure, report, save."""
    context = current_context()  # raises GPUUnavailableError, which the CLI reports
    device = context.get_device().name()
    table, source = tuning.active_scan_table()
    grid = {size: candidates(size, table, args.blocks, args.items, args.bounds,
                             args.vector_runs)
            for size in args.sizes}
    total = sum(len(c) for c in grid.values())
    print(f"tuning on {device}: {total} candidates at n={args.n}, budget {args.budget:.0f} s; "
          f"the table in effect: {source}", file=sys.stderr)
    started = time.monotonic()
    precompile([c.scan(DTYPES[size]).kernel.scan_module
                for size, batch in grid.items() for c in batch])
    spent = time.monotonic() - started
    measure = gpu_measure(args.n, args.trials, args.warmup)
    warm_up(grid, measure, seconds=WARM_UP_S)
    results = sweep(grid, measure, budget_s=max(0.0, args.budget - spent),
                    progress=lambda done, count, text: bench._progress(
                        f"[{done}/{count}] {text}"))
    bench._progress("confirming the fastest of each size against the table's values.\n")
    rows, chosen = [], {}
    for size in grid:
        baseline, best = choose(results, size, table, measure)
        chosen[size] = best.candidate
        rows.append(dict(dtype=DTYPES[size], n=args.n, copy_us=measure(size, COPY) * 1e6,
                         in_effect=str(baseline.candidate),
                         in_effect_us=baseline.seconds * 1e6, chosen=str(best.candidate),
                         chosen_us=best.seconds * 1e6,
                         gain=1 - best.seconds / baseline.seconds,
                         measured=sum(r.itemsize == size for r in results)))
    print("\n".join(report_lines(rows)))
    path = args.out or tuning.user_table_path(device)
    command = "python -m scangen tune " + " ".join(shlex.quote(a) for a in args.argv)
    tuning.write_table(path, tuned_table(table, chosen), device, command.strip(), rows)
    print(f"wrote {path} in {time.monotonic() - started:.0f} s: scangen uses it in new "
          f"processes on this GPU (SCANGEN_TUNING=default ignores it)")
    return 0
