"""The kernels that scan an N-D array's lines along one axis, from one set of ScanKernel
hooks (Scan's, or a scan of several operands'). Three shapes of work:

* the axis holds every element: the 1-D kernel;
* the last axis, rows of a section or longer: the columns kernel's rows launch
  (scangen.strategies.columns), each row in tiles of its own;
* the last axis, rows of SHORT_ROW_TILES_MIN or more but shorter than a section: the same
  launch of a columns kernel of a smaller section, the power of two that holds a row (one
  tile a row), where the options leave the tile's shape to the tuning;
* the last axis, shorter rows: each row a segment of a kernel whose hooks take one more
  argument, ``long long row_length`` (HeadRows: a lane finds its run's row heads from one
  remainder), so a tile holds several rows;
* any other axis: the columns kernel, the array seen as (outer, axis length, inner), with
  no transposing copy.

The hooks see ``i``, the element's index in the C-contiguous array, whichever kernel runs.
"""
from __future__ import annotations

import math

import numpy as np

from .heads import HeadRows

#: The shortest rows that take tiles of their own, one a row, where they are shorter than
#: a section (a columns kernel of a section of the power of two that holds them); shorter
#: rows are segments of the rows kernel, several to a tile. Measured on an H200 (float32
#: adds of 8 x 768 rows): rows of 1,024 in tiles 34 us against 52 as segments, rows of 512
#: 43 us against 28 (docs/design/decisions.md).
SHORT_ROW_TILES_MIN = 1024


def normalized_axis(shape: tuple, axis) -> int:
    """``axis`` of an array of ``shape`` counted from 0 (numpy's rules: -1 is the last).
    Raises TypeError for a non-int, ValueError for an axis out of range."""
    ndim = len(shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, not {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimension(s) "
                         f"(shape {shape})")
    return int(axis) % ndim


def line_shape(shape: tuple, axis) -> tuple[int, int, int]:
    """(outer, length, inner) of a C-contiguous array of ``shape`` scanned along ``axis``:
    the sizes before the axis, of the axis, and after it. Raises for a bad axis."""
    axis = normalized_axis(shape, axis)
    # math.prod of Python ints: exact, and a small call's host path cannot spare numpy's
    # reductions (microseconds each)
    return math.prod(shape[:axis]), int(shape[axis]), math.prod(shape[axis + 1:])


class LineKernels:
    """The ScanKernels of one set of hooks that scan an array's lines along any axis: the
    1-D ``kernel`` given, and the rows kernel and the columns kernels, variants of it
    (ScanKernel.variant) each built on first use. Plans and module headers name them by
    the kernel's title."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._rows_kernel = None
        #: section size (None: the kernel's options') -> the columns kernel of that section
        self._columns_kernels = {}

    @property
    def rows_kernel(self):
        """The kernel along the last axis: each row a segment, the row length its last
        argument. Every row starts from the initial value, as every segment does."""
        if self._rows_kernel is None:
            made = self.kernel.made_with
            self._rows_kernel = self.kernel.variant(
                arguments=made["arguments"] + ", long long row_length",
                _segment_heads=HeadRows("row_length"), title=f"{made['title']} of rows")
        return self._rows_kernel

    @property
    def columns_kernel(self):
        """The kernel along any other axis: the array as (outer, axis length, inner), each
        of its columns on its own; and along the last for rows of its section or longer."""
        return self._columns_kernel_of(None)

    def _columns_kernel_of(self, section):
        """The columns kernel of the options' tile (``section`` None) or of ``section``."""
        if section not in self._columns_kernels:
            title = f"{self.kernel.made_with['title']} along an axis"
            changes = {}
            if section is not None:
                changes["section_size"] = section
                title += f" (rows of up to {section})"
            self._columns_kernels[section] = self.kernel.variant(_columns=True, title=title,
                                                                 **changes)
        return self._columns_kernels[section]

    def row_tiles_kernel(self, length: int):
        """The columns kernel whose row tiles scan rows of ``length``, or None (they are
        segments of the rows kernel): the columns kernel where a row fills its section;
        for shorter rows of SHORT_ROW_TILES_MIN or more, where the options leave the tile's
        shape to the tuning, one whose section is the power of two that holds a row."""
        kernel = self.columns_kernel
        holds_a_row = 1 << (length - 1).bit_length()
        if holds_a_row >= kernel.spec.section_size:
            return kernel
        made = self.kernel.made_with
        if length < SHORT_ROW_TILES_MIN or made["section_size"] or made["items_per_thread"]:
            return None
        return self._columns_kernel_of(holds_a_row)

    def pick(self, shape: tuple, axis):
        """(kernel, lines) for an array of ``shape`` along ``axis``: the 1-D kernel (lines
        None); the segmented rows kernel (lines: the row length); a columns kernel (lines:
        (axis length, inner size), inner 1 for rows in tiles of their own)."""
        return self._pick(*line_shape(shape, axis))

    def _pick(self, outer: int, length: int, inner: int):
        if inner == 1 and outer == 1:
            return self.kernel, None
        if inner != 1:
            return self.columns_kernel, (length, inner)
        row_tiles = self.row_tiles_kernel(length)
        return (self.rows_kernel, length) if row_tiles is None else (row_tiles, (length, 1))

    def plan(self, shape: tuple, axis):
        """The launches that scan an array of ``shape`` along ``axis`` (no GPU needed)."""
        kernel, lines = self.pick(shape, axis)
        size = math.prod(shape)
        return kernel.plan(size, lines) if isinstance(lines, tuple) else kernel.plan(size)

    def launch(self, pointers: tuple, shape: tuple, axis, stream, initial=None) -> None:
        """Scan an array of ``shape`` along ``axis``, the hooks' arguments already converted
        (``pointers``: every argument of the hooks but the row length and the initial
        value), on a stream resolved by scangen.interop."""
        kernel, values, n, layout = self._launch_of(pointers, shape, axis)
        if n:
            kernel.launch_converted(values, n, stream, initial, layout)

    def prepare(self, pointers: tuple, shape: tuple, axis, stream, initial=None, keep=()):
        """The launch ``launch`` makes, bound once (scangen.runtime.launcher.PreparedLaunch):
        each call of what it returns launches it again. ``keep``: the arrays to hold."""
        kernel, values, n, layout = self._launch_of(pointers, shape, axis)
        return kernel.prepare_converted(values, n, stream, initial, layout, keep)

    def _launch_of(self, pointers: tuple, shape: tuple, axis):
        """(kernel, values, n, layout) that scan an array of ``shape`` along ``axis``."""
        outer, length, inner = line_shape(shape, axis)
        n = outer * length * inner
        if n == 0:  # nothing to launch (whose launch does nothing)
            return self.kernel, pointers, 0, None
        kernel, lines = self._pick(outer, length, inner)
        if isinstance(lines, tuple):  # a columns kernel: along columns, or rows in tiles
            return kernel, pointers, n, lines
        if lines is not None:  # the row length, a plain int as the launch packs it
            return kernel, pointers + (lines,), n, None
        return kernel, pointers, n, None
