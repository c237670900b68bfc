"""The kernels that scan an N-D array's lines along one axis, from one set of ScanKernel
hooks (Scan's, or a scan of several operands'). Three shapes of work:

* the axis holds every element: the 1-D kernel;
* the last axis, rows of a tile or longer: the columns kernel's rows launch
  (scangen.strategies.columns), each row in tiles of its own;
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

from .kernel import HeadRows, ScanKernel


def line_shape(shape: tuple, axis) -> tuple[int, int, int]:
    """(outer, length, inner) of a C-contiguous array of ``shape`` scanned along ``axis``:
    the sizes before the axis, of the axis, and after it. Raises for a bad axis."""
    ndim = len(shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, not {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimension(s) "
                         f"(shape {shape})")
    axis = int(axis) % ndim
    # math.prod of Python ints: exact, and a small call's host path cannot spare numpy's
    # reductions (microseconds each)
    return math.prod(shape[:axis]), int(shape[axis]), math.prod(shape[axis + 1:])


class LineKernels:
    """The ScanKernels of one set of hooks that scan an array's lines along any axis: the
    1-D kernel (built at once, so that its source and nvcc check need no shape), the rows
    kernel and the columns kernel (each built on first use). ``options`` are ScanKernel's
    keywords; ``title`` names the scan in plans and module headers."""

    def __init__(self, dtype, operator, *, title: str, **options):
        self._dtype, self._operator, self._title, self._options = \
            dtype, operator, title, options
        self.kernel = ScanKernel(dtype, operator, title=title, **options)
        self._rows_kernel = None
        self._columns_kernel = None

    @property
    def rows_kernel(self) -> ScanKernel:
        """The kernel along the last axis: each row a segment, the row length its last
        argument. Every row starts from the initial value, as every segment does."""
        if self._rows_kernel is None:
            options = dict(self._options,
                           arguments=self._options["arguments"] + ", long long row_length")
            self._rows_kernel = ScanKernel(self._dtype, self._operator,
                                           _segment_heads=HeadRows("row_length"),
                                           title=f"{self._title} of rows", **options)
        return self._rows_kernel

    @property
    def columns_kernel(self) -> ScanKernel:
        """The kernel along any other axis: the array as (outer, axis length, inner), each
        of its columns on its own."""
        if self._columns_kernel is None:
            self._columns_kernel = ScanKernel(self._dtype, self._operator, _columns=True,
                                              title=f"{self._title} along an axis",
                                              **self._options)
        return self._columns_kernel

    def pick(self, shape: tuple, axis):
        """(kernel, lines) for an array of ``shape`` along ``axis``: the 1-D kernel (lines
        None); the segmented rows kernel (lines: the row length); the columns kernel (lines:
        (axis length, inner size), inner 1 for rows of a tile or longer)."""
        return self._pick(*line_shape(shape, axis))

    def _pick(self, outer: int, length: int, inner: int):
        if inner == 1 and outer == 1:
            return self.kernel, None
        if inner == 1 and length < self.columns_kernel.spec.section_size:
            return self.rows_kernel, length
        return self.columns_kernel, (length, inner)

    def plan(self, shape: tuple, axis):
        """The launches that scan an array of ``shape`` along ``axis`` (no GPU needed)."""
        kernel, lines = self.pick(shape, axis)
        size = math.prod(shape)
        return kernel.plan(size, lines) if kernel is self._columns_kernel else kernel.plan(size)

    def launch(self, pointers: tuple, shape: tuple, axis, stream, initial=None) -> None:
        """Scan an array of ``shape`` along ``axis``, the hooks' arguments already converted
        (``pointers``: every argument of the hooks but the row length and the initial
        value), on a stream resolved by scangen.interop."""
        outer, length, inner = line_shape(shape, axis)
        n = outer * length * inner
        if n == 0:
            return
        kernel, lines = self._pick(outer, length, inner)
        if kernel is self._columns_kernel:
            kernel.launch_converted(pointers, n, stream, initial, lines)
        elif lines is not None:  # the row length, a plain int as the launch packs it
            kernel.launch_converted(pointers + (lines,), n, stream, initial)
        else:
            kernel.launch_converted(pointers, n, stream, initial)
