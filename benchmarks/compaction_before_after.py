"""Time the compaction primitives of the current checkout against another one (a baseline
commit checked out beside it), in one run on one GPU.

    git worktree add .baseline <commit>      # here; name .baseline in the device call's carry
    python3 benchmarks/compaction_before_after.py --baseline .baseline [--sizes 2^24 2^26]

Each side runs in its own process (its package first on sys.path), the two alternating
``--rounds`` times. A process times, at each size, a copy of 4n bytes and then, queued
(scangen.bench.Timer: the GPU's time a call, median of 7), each primitive with its count
left on the device: Select(float32) by a bool mask and by ``x < 0.5f`` (half kept),
Partition(float32, ``x < 0.5f``, reverse_rejected=True), and Unique and RunLengthEncode
of sorted int32 in runs of about 4. Each result is checked against numpy first; a wrong one
prints WRONG. One line a size and side, in microseconds.
"""
import sys

import sides


def time_side(label: str, args) -> None:
    """The line of each size for the scangen first on sys.path."""
    import numpy as np
    import cupy

    import scangen
    from scangen.workloads import parse_size

    timer = sides.queued_timer(7)
    rng = np.random.default_rng(5)
    for n in [parse_size(s) for s in args.cases]:
        values = rng.random(n, dtype=np.float32)
        x = cupy.asarray(values)
        mask = cupy.asarray(values < 0.5)
        kept = values[values < 0.5]
        runs = np.sort(rng.integers(0, n // 4, n, dtype=np.int32))
        r = cupy.asarray(runs)
        heads = np.r_[True, runs[1:] != runs[:-1]]
        lengths = np.diff(np.r_[np.flatnonzero(heads), n])
        source, target = cupy.empty(n, np.float32), cupy.empty(n, np.float32)
        copy = timer.seconds_per_call(lambda: target.__setitem__(slice(None), source), 8 * n)
        cases = [("select_mask", scangen.Select(np.float32, flags=np.bool_), (x, mask), (kept,)),
                 ("select_pred", scangen.Select(np.float32, "x < 0.5f"), (x,), (kept,)),
                 ("partition_rr", scangen.Partition(np.float32, "x < 0.5f",
                                                    reverse_rejected=True), (x,), (kept,)),
                 ("unique", scangen.Unique(np.int32), (r,), (runs[heads],)),
                 ("rle", scangen.RunLengthEncode(np.int32), (r,), (runs[heads], lengths))]
        line = [f"{label} 2^{n.bit_length() - 1} copy {copy * 1e6:.1f}"]
        for name, primitive, args, wanted in cases:
            *results, count = primitive(*args, count_on_device=True)
            k = int(count.get()[0])
            right = k == wanted[0].size and all(
                np.array_equal(got[:k].get(), want) for got, want in zip(results, wanted))
            seconds = timer.seconds_per_call(lambda: primitive(*args, count_on_device=True),
                                             8 * n)
            line.append(f"{name} {seconds * 1e6:.1f}{'' if right else ' WRONG'}")
        print(" | ".join(line), flush=True)


def main(argv=None) -> int:
    made = sides.parser(__doc__, "--sizes", ["2^24", "2^26"])
    return sides.run(__file__, made.parse_args(argv), made, time_side)


if __name__ == "__main__":
    sys.exit(main())
