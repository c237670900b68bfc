"""A Sphinx extension of this documentation: before the build reads the pages, it writes
what scangen generates into docs/_generated/ (git-ignored), so the algorithms page shows
the CUDA and the launch plans of the code it documents, never a copy that could go stale:

* ``block-scan-<algorithm>.cu``: each block algorithm's ``block_scan`` function (with the
  comment above it) as scangen emits it for int32 add;
* ``plan-<strategy>.txt``: each strategy's launch plan for 2^20 float32 elements;
* ``plan-axis-<kernel>.txt``: the plans of a float32 (8, 4096, 1024) array scanned along
  its middle axis (the columns kernel) and its last (rows of 1,024: a smaller tile each),
  and of an (8, 1024, 4096) array along its last (row tiles of the tuned section).
"""
import re
from pathlib import Path

import numpy as np

import scangen

GENERATED = Path(__file__).resolve().parent / "_generated"
#: The size the strategies' plans are shown at.
PLAN_SIZE = 1 << 20
#: The array the scans along an axis are shown for: (batch, length, channels).
AXIS_SHAPE = (8, 4096, 1024)
#: Rows a section long or longer along the last axis: the columns kernel's row tiles.
ROW_TILES_SHAPE = (8, 1024, 4096)
#: A segmented scan by CSR offsets in segment tiles: its size and number of segments.
SEGMENT_TILES = (1 << 26, 1024)


def block_scan_function(source: str) -> str:
    """The ``block_scan`` definition of a module's source, from the comment lines above it
    to its closing brace."""
    lines = source.splitlines()
    start = next(k for k, line in enumerate(lines)
                 if re.match(r"static __device__.*\bblock_scan\(", line))
    while start > 0 and lines[start - 1].startswith("//"):
        start -= 1
    depth, opened = 0, False
    for end in range(start, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        opened = opened or "{" in lines[end]
        if opened and depth == 0:
            break
    return "\n".join(lines[start:end + 1]) + "\n"


def write_generated(app=None) -> None:
    GENERATED.mkdir(exist_ok=True)
    for name in scangen.ALGORITHMS:
        scan = scangen.Scan(np.int32, "add", algorithm=name, strategy="hierarchical")
        (GENERATED / f"block-scan-{name}.cu").write_text(block_scan_function(scan.source))
    for strategy in scangen.STRATEGIES:
        plan = scangen.Scan(np.float32, "add", strategy=strategy).plan(PLAN_SIZE)
        (GENERATED / f"plan-{strategy}.txt").write_text(f"{plan}\n")
    scan = scangen.Scan(np.float32, "add")
    for kernel, shape, axis in (("columns", AXIS_SHAPE, 1), ("rows", AXIS_SHAPE, 2),
                                ("row-tiles", ROW_TILES_SHAPE, 2)):
        (GENERATED / f"plan-axis-{kernel}.txt").write_text(f"{scan.plan(shape, axis)}\n")
    n, segments = SEGMENT_TILES
    plan = scangen.SegmentedScan(np.float32, "add").plan(n, form="offsets", segments=segments)
    (GENERATED / "plan-segment-tiles.txt").write_text(f"{plan}\n")


def setup(app):
    app.connect("builder-inited", write_generated)
    return {"parallel_read_safe": True}
