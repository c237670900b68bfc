"""SegmentedScan by offsets in segment tiles of several sections, forced past the route's
threshold (scangen.segmented.takes_segment_tiles), against the same segments by head flags
and a copy of the same bytes: whether more, shorter segments should take tiles of their
own, and of what section.

    python benchmarks/segment_tiles_sections.py [--json out.json]

float32 adds at n = 2^24 and 2^26 in 1,024 to 2^20 segments of random lengths (as the
primitives bench draws them). Each contender is timed as ``python -m scangen bench`` times
(scangen.bench.Timer): each call on its own (the host's work counts) and queued behind an
untimed call (``_q``: the GPU's time). Every forced route's result is checked against the
flags form's.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scangen  # noqa: E402
from scangen import segmented  # noqa: E402
from scangen.bench import Timer  # noqa: E402
from scangen.primitive_bench import segment_offsets  # noqa: E402

SIZES = (1 << 24, 1 << 26)
SEGMENT_COUNTS = (1024, 16384, 65536, 262144, 1 << 20)
#: Sections of the forced segment tiles (None: the tuned one).
SECTIONS = (None, 2048, 1024, 512, 256)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write every result here")
    args = parser.parse_args(argv)
    scangen.current_context()
    import pycuda.driver as driver
    from pycuda import gpuarray

    timers = {"": Timer(driver, 7, 3), "_q": Timer(driver, 7, 3, queued=True)}
    routed = segmented.takes_segment_tiles
    rows = []
    for n in SIZES:
        rng = np.random.default_rng([7, n])
        x = gpuarray.to_gpu(rng.integers(0, 4, n).astype(np.float32))
        out, copied = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.float32)
        copy = timers[""].seconds_per_call(
            lambda: driver.memcpy_dtod(copied.gpudata, x.gpudata, 4 * n), 8 * n)
        for segments in SEGMENT_COUNTS:
            starts = segment_offsets(rng, n, segments)
            heads = np.zeros(n, np.bool_)
            heads[starts[:-1][starts[:-1] < n]] = True
            offsets, flags = gpuarray.to_gpu(starts), gpuarray.to_gpu(heads)
            by_flags = segmented.SegmentedScan(np.float32)
            by_flags(x, out, flags=flags)
            want = out.get()
            row = dict(n=n, segments=segments, copy=copy)
            for suffix, timer in timers.items():
                row["flags" + suffix] = timer.seconds_per_call(
                    lambda: by_flags(x, out, flags=flags), 8 * n)
            row["offsets_auto"] = timers[""].seconds_per_call(
                lambda: by_flags(x, out, offsets=offsets), 8 * n)
            segmented.takes_segment_tiles = lambda n, segments, section: True
            try:
                for section in SECTIONS:
                    options = {} if section is None else dict(section_size=section)
                    seg = segmented.SegmentedScan(np.float32, **options)
                    out.fill(np.float32(np.nan))
                    seg(x, out, offsets=offsets)
                    name = f"tiles_{section or 'default'}"
                    row[name + "_ok"] = bool(np.array_equal(out.get(), want))
                    for suffix, timer in timers.items():
                        row[name + suffix] = timer.seconds_per_call(
                            lambda: seg(x, out, offsets=offsets), 8 * n)
            finally:
                segmented.takes_segment_tiles = routed
            print(" ".join(f"{k}={v * 1e6:.1f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in row.items()), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": driver.Context.get_device().name(), "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
