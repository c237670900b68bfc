"""Scan: the plain scan ``out[i] = x0 op ... op xi``, a thin client of ScanKernel."""
from __future__ import annotations

import numpy as np

from .compile import ScanCompileError
from .kernel import PlainArrays, ScanKernel, options_repr
from .interop import Call, overlaps
from .runtime.gpu import GPUUnavailableError
from .spec import check_mode
from .types import conversion, element_type

__all__ = ["Scan", "PreparedScan", "GPUUnavailableError", "ScanCompileError"]

#: What Scan's output statement writes, per mode (PlainArrays("x", "out", ...) says so).
_OUTPUT = {"inclusive": "out[i] = item;", "exclusive": "out[i] = prev_item;"}


class Scan:
    """A reusable scan of device arrays: 1-D, or N-D along any one axis.

    Parameters
    ----------
    dtype:
        Element type of the input (int8 .. uint64, float16, float32, float64, complex64,
        complex128, ml_dtypes' bfloat16, or a numpy structured dtype of those).
    operator:
        A built-in name (add, mul, min, max, bit_and, bit_or, bit_xor) or a scangen.Operator.
        Must be associative; it need not be commutative (operand order is kept).
    mode:
        "inclusive" (y[i] = x0 op ... op xi) or "exclusive" (y[i] = identity op x0 op ...
        op x(i-1)).
    result_dtype:
        The type scanned and written, as numpy's accumulate ``dtype=``: each input is
        converted first (``Scan(np.uint8, "add", result_dtype=np.int64)``). It must hold
        every input value (numpy's "safe" casting): integers to wider integers or floats,
        float16/bfloat16 to float32/float64, real to complex, complex64 to complex128.
        Struct types convert to no other type. Default: dtype.
    reverse:
        A suffix scan: y[i] = x[i] op x[i+1] op ... op x[n-1] (exclusive leaves x[i] out),
        operands in array order.
    initial:
        A value combined first: inclusive ``initial op x0 op ...``; exclusive ``y[0] =
        initial``; with N-D input, every line along the axis starts from it. A call may pass
        another (``scan(x, initial=carry)``). For a struct type, a tuple of field values (or
        an np.void); for complex, a complex number.
    algorithm:
        How one block scans its section: naive, kogge_stone, kogge_stone_double_buffered,
        brent_kung, coarsened or warp_shuffle (the default, the fast one).
    section_size:
        Elements per block, a power of two. Default: tuned per element size for
        warp_shuffle (scangen.tuning), 1024 for the other algorithms, halved (with the
        items per thread first, where you named none) until the algorithm's shared memory
        for this value type fits 48 KiB.
    items_per_thread:
        Coarsening factor of ``coarsened`` and ``warp_shuffle`` (the others fix their own).
    strategy:
        How sections are stitched together over the whole array: "hierarchical",
        "reduce_then_scan", "chained", "decoupled_lookback", or "auto" (the default: one
        launch when n fits a section, then decoupled look-back, and reduce_then_scan from
        ``tuning.auto_reduce_then_scan_min_bytes`` bytes of input on, by default as measured
        per value size: scangen.tuning.scan_table(), the table ``python -m scangen tune``
        measured for this GPU, else scangen.tuning.SCAN).
    tuning:
        A scangen.tuning.Tuning (default: the measured scangen.tuning.DEFAULT_TUNING); part
        of the compile cache key.

    Notes
    -----
    Scan is ScanKernel with input ``x[i]`` and output ``out[i] = item`` (inclusive) or
    ``out[i] = prev_item`` (exclusive); ``scan.kernel`` is that ScanKernel. An N-D
    C-contiguous array is scanned along one axis (``scan(x, axis=k)``; the last by
    default), every line along it on its own, with no transposing copy: along any axis but
    the last by ``scan.columns_kernel``, which reads a warp's width of neighbouring lines at
    once and walks them down the axis; along the last by the same kernel's row tiles where
    a row fills a section (each row's tiles looking back to its first only), by a columns
    kernel of a smaller section for rows of scangen.lines.SHORT_ROW_TILES_MIN or more (one
    tile a row), else by ``scan.rows_kernel``, a ScanKernel whose segments are the rows
    (the plan of a 1-D scan). ``scan.plan(shape, axis=k)`` shows which.

    Floating-point results depend on evaluation order and so differ in the last bits between
    algorithms and section sizes; they are not bit-reproducible against a sequential sum.

    Examples
    --------
    Building a scan, reading its CUDA and its launches needs no GPU:

    >>> scan = scangen.Scan(np.int32, "max", mode="exclusive")
    >>> "__global__" in scan.source
    True
    >>> print(scan.plan(1000))  # doctest: +ELLIPSIS
    plan: exclusive scan with max over n=1000 int32
      strategy one_section (auto), algorithm warp_shuffle, ...
      1 launch(es), 1 level(s)
    ...

    On a GPU, ``scan(x)`` scans a device array (CuPy, torch, PyCUDA) into a new one of its
    kind, and ``scan(x, out=y)`` into ``y``.
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", result_dtype=None,
                 reverse=False, initial=None, algorithm=None, section_size=None,
                 items_per_thread=None, strategy="auto", tuning=None):
        self.mode = check_mode(mode)
        self.input_dtype = element_type(dtype).dtype
        result = self.input_dtype if result_dtype is None else \
            element_type(result_dtype, "result_dtype").dtype
        source, target = element_type(self.input_dtype), element_type(result)
        # Safe casting, not numpy's same_kind: a result type that cannot hold every input
        # value would change the values before they are scanned.
        if source != target and not (source.is_struct or target.is_struct) and \
                not np.can_cast(self.input_dtype, result, "safe"):
            raise TypeError(f"result_dtype {result} cannot hold every {self.input_dtype} value; "
                            f"choose a wider one (numpy's safe casting)")
        in_c = "scan_t" if result == self.input_dtype else source.c_name
        input_expr = conversion(source, target, "x[i]")  # refuses struct pairs
        # x[i] read (and converted) and out[i] written: the single pass may move whole words
        plain = None if reverse or initial is not None else PlainArrays(
            "x", "out", self.mode == "exclusive", input_expr, in_c,
            0 if in_c == "scan_t" else self.input_dtype.itemsize)
        options = dict(
            arguments=f"const {in_c} *x, scan_t *out", _plain_arrays=plain,
            input_expr=input_expr,
            # the input type's headers and declarations (the module has the result type's)
            types=() if source == target else (source,),
            output_statement=_OUTPUT[mode], reverse=reverse, initial=initial,
            algorithm=algorithm, section_size=section_size, items_per_thread=items_per_thread,
            strategy=strategy, tuning=tuning)
        #: The kernels along any axis (scangen.lines): 1-D, rows and columns.
        self.kernel = ScanKernel(result, operator, title=f"{mode} scan", **options)
        self.lines = self.kernel.lines
        self.spec = self.kernel.spec

    def __repr__(self):
        result = f", result_dtype={self.dtype.name!r}" if self.dtype != self.input_dtype else ""
        # element_type's name: numpy's, or a struct's fields (numpy says "void96")
        return (f"Scan({element_type(self.input_dtype).name}, {self.spec.operator.name!r}, "
                f"mode={self.mode!r}{result}{options_repr(self.kernel)})")

    @property
    def dtype(self) -> np.dtype:
        """The scanned (result) type."""
        return self.spec.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA source of every kernel this scan may launch (no GPU needed)."""
        return self.kernel.source

    def plan(self, n, axis=-1):
        """The launches that scan ``n`` elements, or an array of shape ``n`` (a tuple)
        along ``axis`` (no GPU needed); ``print()`` it to read it."""
        return self.lines.plan(n, axis) if isinstance(n, tuple) else self.kernel.plan(n)

    def modules_to_compile(self) -> list:
        """What check_compile compiles: the 1-D kernel's ScanModule (N-D scans compile
        ``rows_kernel`` or ``columns_kernel`` on first use)."""
        return self.kernel.modules_to_compile()

    def check_compile(self) -> None:
        """Compile with the nvcc on PATH, without a GPU; a C error in the operator raises
        ScanCompileError with the numbered source around it."""
        self.kernel.check_compile()

    @property
    def columns_kernel(self) -> ScanKernel:
        """The ScanKernel along an axis other than the last, and along the last for rows of
        a section or longer (built on first use)."""
        return self.lines.columns_kernel

    @property
    def rows_kernel(self) -> ScanKernel:
        """The ScanKernel along the last axis of an N-D array whose rows are too short for
        tiles of their own (scangen.lines.LineKernels): each row a segment (built on first
        use)."""
        return self.lines.rows_kernel

    def __call__(self, x, out=None, *, axis=-1, stream=None, initial=None):
        """Scan ``x`` along ``axis`` into ``out`` (new if None; of the result dtype; may be
        ``x`` when the dtypes agree) and return ``out``.

        ``x`` is a C-contiguous device array of any dimension: a pycuda GPUArray, a CuPy
        array, a torch tensor, or any object with ``__cuda_array_interface__`` or
        ``__dlpack__``; ``out`` is of the same kind and shape, and a new ``out`` is allocated
        by that library (see scangen.interop). ``axis`` (default: the last) is the axis
        scanned, every line along it on its own. ``stream`` (a pycuda, CuPy or torch stream,
        or a raw handle) defaults to the array library's current stream."""
        call, out, pointers, shape = self._arrays(x, out, stream, initial)
        self.lines.launch(pointers, shape, axis, call.stream, initial)
        return call.returned(out)

    def prepare(self, x, out=None, *, axis=-1, stream=None, initial=None) -> PreparedScan:
        """This call bound once, for a scan run again and again on the same arrays: checks
        ``x`` and ``out`` (allocating ``out`` now where None), resolves the stream (the
        arrays' current stream now, where none is given) and binds the plan. Returns a
        PreparedScan whose every call ``run()`` scans ``x``'s contents at that time into
        ``out`` and returns ``out``, doing nothing else on the host (see __call__ for the
        arguments). A new ``out`` for arrays of a producer scangen knows by a protocol only
        (JAX's) is a pycuda GPUArray: an array of its library handed over once (a JAX
        array) would not see the later runs."""
        call, out, pointers, shape = self._arrays(x, out, stream, initial)
        launch = self.lines.prepare(pointers, shape, axis, call.stream, initial, keep=(x, out))
        return PreparedScan(launch, out)

    def _arrays(self, x, out, stream, initial):
        """(call, out, pointers, shape) of a call: the arrays checked, ``out`` made where
        None, the stream resolved (scangen.interop.Call), a bad ``initial`` refused before
        any work."""
        call = Call(stream, {"x": x, "out": out}, writes=("out",))
        x_view, out_view = call.views["x"], call.views["out"]
        self._check_arrays(x_view, out_view, out is x)
        if initial is not None:
            self.kernel.initial_argument(initial)
        if out is None:
            out, out_view = call.empty(x_view.shape, self.dtype)
        # ints: the launch packs them as pointers
        return call, out, (x_view.ptr, out_view.ptr), tuple(x_view.shape)

    def _check_arrays(self, x, out, in_place):
        """Check the views (scangen.interop) of the input and of out (None: a new one) against
        this scan's dtypes, each other's shape, and overlap; raise a clear error."""
        if x.dtype != self.input_dtype:
            raise TypeError(f"x has dtype {x.dtype}, but this scan was built for "
                            f"{self.input_dtype}: build Scan({x.dtype.name!r}, ...) or convert "
                            f"with .astype()")
        if len(x.shape) == 0:
            raise ValueError("x must have at least one dimension, got a 0-d array")
        if out is None:
            return
        if out.dtype != self.dtype:
            raise TypeError(f"out has dtype {out.dtype}, but this scan writes {self.dtype}: "
                            f"pass an out of dtype {self.dtype} (or none, and get a new array)")
        if not in_place:
            if out.shape != x.shape:
                raise ValueError(f"out has shape {out.shape}, but x has shape {x.shape}")
            if overlaps(x, out):
                raise ValueError("out overlaps x without being x; pass out=x to scan in place")


class PreparedScan:
    """One Scan call bound once (Scan.prepare): calling it scans the input's contents at
    that time into ``out`` again, on the stream bound, and returns ``out``; the host does
    nothing but the launch (a single pass also takes its tickets)."""

    __slots__ = ("_launch", "out")

    def __init__(self, launch, out):
        self._launch, self.out = launch, out

    def __call__(self):
        self._launch()
        return self.out
