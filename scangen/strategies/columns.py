"""Scans along columns: the n indices as an (outer, axis_length, axis_stride) C-contiguous
array, each of its outer * axis_stride columns scanned along the middle axis on its own
(Hooks.columns: a scan along any axis of an N-D array with no transposing copy). Not a
strategy a spec names: a ScanKernel built along columns has these two kernels.

* Columns apart (axis_stride > 1), one single-pass launch
  (templates/kernels/scan_columns.cuh.j2): a tile is a warp's width of consecutive columns
  by ScanSpec.column_tile_rows consecutive rows, so each row of a tile a warp reads is
  consecutive elements; tiles go in ticket order, chunk of rows by chunk of rows, and each
  column's carry crosses chunks through a status entry per (chunk, column), one look-back
  per column. About 2n of traffic plus n / (section / warp) status entries.
* Lines of consecutive elements (axis_stride 1: rows, the last axis), one single-pass
  launch (templates/kernels/scan_rows.cuh.j2): each row cut into tiles of a section, tiles
  in ticket order, each looking back to its row's first tile only. About 2n of traffic, the
  values alone combined (a segmented scan of rows pairs each with a head).

Segments of any lengths (Hooks.segment_tiles: SegmentedScan by offsets) take a kernel of
their own, scan_segments (templates/kernels/scan_segments.cuh.j2), the rows launch with
each segment's first tile and start read from the hooks' arguments: a segment is cut into
tiles of a section, each looking back to its segment's first tile only. The grid is the
most tiles n elements in that many segments can take (a section's worth of tiles, and one
more for every segment that ends inside a tile); a block whose ticket finds no tile left
returns at once.
"""
from __future__ import annotations

import dataclasses
import operator

from ..arith import WARP_SIZE, ceil_div
from ..families import SCAN_COLUMNS, SCAN_ROWS, SCAN_SEGMENTS, Kernel
from .base import USER_ARGS, PlanBuilder
from .tile_state import TileState


def check_columns(n: int, columns) -> tuple[int, int]:
    """``columns`` as ``(axis_length, axis_stride)`` ints that lay out ``n`` indices (n a
    multiple of their product, both at least 1); raises ValueError naming what is wrong."""
    try:
        length, stride = (int(part) for part in columns)
    except (TypeError, ValueError):
        raise ValueError(f"columns must be (axis_length, axis_stride), not {columns!r}") \
            from None
    if length < 1 or stride < 1 or n % (length * stride):
        raise ValueError(f"columns=({length}, {stride}) do not lay out n={n} indices as "
                         f"(outer, axis_length, axis_stride)")
    return length, stride


class Columns:
    """The scan along columns: its kernels and its plan (what a strategy owns; not one a
    spec names, since it scans a shape, not n indices)."""

    name = "columns"

    def kernels(self) -> tuple[Kernel, ...]:
        return (Kernel(SCAN_COLUMNS, "user"), Kernel(SCAN_ROWS, "user"))

    def check(self, n: int, layout) -> tuple[int, int]:
        """``layout``, ``(axis_length, axis_stride)``, checked (check_columns)."""
        return check_columns(n, layout)

    def plan_name(self, layout) -> str:
        """What a plan of ``layout`` calls its strategy: rows where the stride is 1."""
        return "rows" if layout[1] == 1 else self.name

    def build(self, builder: PlanBuilder, n: int, layout: tuple[int, int]) -> None:
        """The one launch that scans ``n`` indices along columns of ``length`` rows,
        consecutive rows ``stride`` indices apart (1: along rows): ``layout`` is
        ``(length, stride)``."""
        length, stride = layout
        if stride == 1:
            return self._build_rows(builder, n, length)
        spec, warp = builder.spec, WARP_SIZE
        columns = n // length
        chunks = ceil_div(length, spec.column_tile_rows)
        tiles = chunks * ceil_div(columns, warp)
        entries = chunks * columns
        state = TileState.of(spec)
        # Status capacity: one entry per chunk and column (the tickets a call takes are the
        # launch's grid, one per tile).
        status = builder.tile_status(entries, ", one per (chunk of rows, column)")
        builder.launch(Kernel(SCAN_COLUMNS, "user"), tiles, USER_ARGS,
                       (*status, length, stride, n), reads=n, writes=n, level=0,
                       why=f"{columns} columns of {length} rows, {stride} apart: {tiles} tiles "
                           f"of {warp} columns x {spec.column_tile_rows} rows in one pass, each "
                           f"column's carry by look-back over {chunks} chunk(s) of rows; "
                           f"status {state.status_bytes(entries)} B")
        # Its shared memory is its own few arrays, not the spec's sections.
        builder.launches[-1] = dataclasses.replace(builder.launches[-1], shared_bytes=None)

    def _build_rows(self, builder: PlanBuilder, n: int, length: int) -> None:
        """The rows launch: ``n // length`` rows of ``length``, each in tiles of its own."""
        section = builder.spec.section_size
        row_tiles = ceil_div(length, section)
        tiles = n // length * row_tiles
        builder.launch(Kernel(SCAN_ROWS, "user"), tiles, USER_ARGS,
                       (*builder.tile_status(tiles), length, n),
                       reads=n, writes=n, level=0,
                       why=f"{n // length} rows of {length}: "
                           + ("one tile a row, no look-back" if row_tiles == 1 else
                              f"{row_tiles} tiles a row, each looking back to its row's "
                              "first")
                           + f", {tiles} in one pass; "
                           f"status {TileState.of(builder.spec).status_bytes(tiles)} B")


def segment_tiles_bound(n: int, segments: int, section: int) -> int:
    """The most tiles ``n`` elements in ``segments`` segments take, each segment cut into
    tiles of ``section``: every segment's last tile may be partial, so one more than the
    section's worth for each (and no more tiles than elements)."""
    return min(ceil_div(n, section) + segments, n)


class Segments:
    """The scan of segments of any lengths, each in tiles of its own: its kernel and its
    plan (the layout is the number of segments; the hooks' SegmentTiles arguments say
    where each starts and which tile is its first)."""

    name = "segment tiles"

    def kernels(self) -> tuple[Kernel, ...]:
        return (Kernel(SCAN_SEGMENTS, "user"),)

    def check(self, n: int, segments) -> int:
        """``segments`` as an int that may segment the ``n`` indices (at least 1; numpy
        integers too); raises ValueError naming what is wrong."""
        try:
            count = None if isinstance(segments, bool) else operator.index(segments)
        except TypeError:
            count = None
        if count is None or count < 1:
            raise ValueError(f"a kernel of segment tiles plans with its number of segments "
                             f"(an int of at least 1), not {segments!r}")
        return count

    def plan_name(self, segments) -> str:
        return self.name

    def build(self, builder: PlanBuilder, n: int, segments: int) -> None:
        """The one launch that scans ``n`` indices as ``segments`` segments."""
        section = builder.spec.section_size
        grid = segment_tiles_bound(n, segments, section)
        builder.launch(Kernel(SCAN_SEGMENTS, "user"), grid, USER_ARGS,
                       (*builder.tile_status(grid), n), reads=n, writes=n, level=0,
                       why=f"{segments} segment(s), each in tiles of {section}, each tile "
                           f"looking back to its segment's first: at most {grid} tiles "
                           f"in one pass (a block past the last returns at once); "
                           f"status {TileState.of(builder.spec).status_bytes(grid)} B")


COLUMNS = Columns()
SEGMENTS = Segments()
