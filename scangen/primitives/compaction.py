"""Compaction primitives: each is one ScanKernel that counts what it keeps (an int64 add
scan of 1s and 0s) and scatters kept elements to their exclusive count.

Every class builds its kernel once (validated and rendered at construction, compiled on
first use) and keeps a one-element count buffer per instance and calling thread; the
one-shot functions cache their objects, so a second call with the same dtypes and predicate
compiles nothing.
Arrays are 1-D C-contiguous device arrays of one kind (pycuda GPUArray, CuPy, torch, ...:
see scangen.interop) and results come back in that kind; counts and indices are 64-bit.
Elements may be of every scangen element type: int8 .. uint64, float16, float32, float64,
complex64, complex128, ml_dtypes' bfloat16, and numpy structured dtypes of those.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..arith import ceil_div
from ..args import Argument, c_parameters
from ..compile import check_all_with_nvcc
from ..interop import (ONE_SHOT_ARRAYS, Call, check_array, dtype_of, host_round_trip, kind_of,
                       overlaps)
from ..kernel import HeldElement, MaskInput, ScanKernel, counting_condition, options_repr
from ..modules import Module, ModulePlanBuilder
from ..plan import as_count
from ..runtime.contexts import release_at_exit
from ..runtime.gpu import gpuarray as _gpuarray
from ..runtime.mapped import MappedWord, ThreadWords
from ..runtime.modules import ModuleRuntime
from ..runtime.streams import copy_to_host, memset_d8_async, synchronize
from ..spec import LAST_COUNTED_MAX_N, as_flag
from ..strategies.base import BufferArg
from ..tuning import COUNTING_VALUES, COUNTING_VALUES_TUNING, RUN_LENGTHS
from ..render import render_template
from ..types import MASK_C_TYPES, as_dtype, c_equal, element_type
from ..usercode import check_code
from .registry import command_line

__all__ = ["Select", "Partition", "Unique", "RunLengthEncode", "select", "remove_if",
           "partition", "unique", "run_length_encode"]

def _scatter_kept(value: str) -> str:
    """What a kept element (``value``: ``x[i]``, or the held ``element``) does: take the
    next place in out; the last element writes the count."""
    return f"if (item != prev_item) out[prev_item] = {value}; if (i == n - 1) *count = item;"



def _leading(array, count):
    """The first count elements of a result (a native array of any kind). A GPUArray's is
    made directly: pycuda's slicing cannot slice an empty one, and costs several times as
    much (two numpy as_strided calls to find the offset)."""
    if count == array.size:
        return array
    gpuarray = _gpuarray()
    if isinstance(array, gpuarray.GPUArray):
        return gpuarray.GPUArray((count,), array.dtype, gpudata=array.gpudata, base=array)
    return array[:count]


def _helpers(etype, *, predicate=None, run_heads=False) -> str:
    """The device functions a compaction's scan calls (templates/compaction.cuh.j2): the
    predicate as ``scangen_keep(x, i)``, and with ``run_heads`` the elements' equality as
    ``scangen_equal(a, b)`` (scangen.types.c_equal)."""
    if predicate is not None:
        predicate = check_code(predicate, "predicate", expression=True).strip()
    return render_template("compaction.cuh.j2", dict(
        c_type=etype.c_name, keep_type=_keep_type(etype), predicate=predicate,
        equal=c_equal(etype, "a", "b") if run_heads else None, is_struct=etype.is_struct),
        f"a compaction of {etype.name}")


def _keep_type(etype) -> str:
    """The C type of the predicate's ``x``: the element's own, but float for CUDA's 16-bit
    floats (which hold no comparison with a float literal; a float holds them exactly)."""
    return "float" if etype.is_half else etype.c_name


def _mask_dtype(flags) -> np.dtype:
    """The dtype Select's ``flags=`` names (bool or an integer type), or a TypeError: the
    class takes the mask's dtype, each call takes the mask."""
    if isinstance(flags, np.ndarray) or kind_of(flags) is not None:
        raise TypeError(f"Select(dtype, flags=...) takes the dtype of the mask, not the mask "
                        f"(an array of {dtype_of(flags, 'flags')}): build it with "
                        f"flags=mask.dtype and pass the mask to each call, sel(x, mask); or "
                        f"call scangen.select(x, flags=mask) once")
    try:
        dtype = np.dtype(flags)
    except TypeError:
        raise TypeError(f"flags= takes the dtype of the mask (bool or an integer dtype, e.g. "
                        f"np.bool_), not {flags!r}") from None
    if dtype not in MASK_C_TYPES:
        raise TypeError(f"flags must be bool or an integer dtype, not {dtype}")
    return dtype


def _counting_scan(etype, helpers="", **options) -> ScanKernel:
    """A ScanKernel that counts what it keeps: an int64 add of 0s and 1s (counts=True),
    whose arguments and ``helpers`` name the element type ``etype`` (None: they name only
    C's own types, a mask's bool or integers)."""
    return ScanKernel(np.int64, "add", counts=True, types=() if etype is None else (etype,),
                      _helpers=helpers, **options)


def _counting_elements_scan(etype, helpers="", **options) -> ScanKernel:
    """A counting scan whose hooks read x's elements as ``element``: loaded once each and
    held in registers from the condition to the output statement where they fit
    (scangen.kernel.HeldElement)."""
    return _counting_scan(etype, helpers, _element=HeldElement("x", etype.dtype), **options)


def _counting_values_scan(etype, helpers="", **options) -> ScanKernel:
    """A counting scan whose condition reads the values (a run head): on the tiles and
    tuning measured for it (scangen.tuning.COUNTING_VALUES and COUNTING_VALUES_TUNING: one
    pass at every size), where the options name none."""
    if not {"algorithm", "section_size", "items_per_thread"} & options.keys():
        options = {"section_size": COUNTING_VALUES.tile().section_size,
                   "items_per_thread": COUNTING_VALUES.tile().items_per_thread, **options}
    return _counting_scan(etype, helpers, **{"tuning": COUNTING_VALUES_TUNING, **options})


class _Compaction:
    """What the compaction classes share: one counting scan (``kernel``, made by
    _counting_scan), argument checks, the count, and the inspection without a GPU that
    Scan has (``source``, ``plan(n)``, ``check_compile()``, a repr of the options)."""

    def __init__(self, dtype, kernel: ScanKernel):
        #: The elements' dtype: an element type's (scangen.types), or a mask's (bool) where
        #: the elements are only zero or not (FlatNonzero); the subclass checked it.
        self.dtype = as_dtype(dtype)
        self.kernel = kernel
        # The counts that calls reading theirs on the host have the kernel write into mapped
        # host memory: one per calling thread and context.
        self._counts = ThreadWords()
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._counts.clear()

    def __repr__(self):
        return (f"{type(self).__name__}({self.dtype}{self._arguments_repr()}"
                f"{options_repr(self.kernel)})")

    def _arguments_repr(self) -> str:
        """The constructor's arguments after the dtype, as the repr writes them."""
        return ""

    @property
    def source(self) -> str:
        """The CUDA of the kernel (no GPU needed)."""
        return self.kernel.source

    def plan(self, n):
        """The launches that compact ``n`` elements (no GPU needed); ``print()`` it to read
        it."""
        return self.kernel.plan(n)

    def modules_to_compile(self) -> list:
        """What check_compile compiles: the counting scan's ScanModule."""
        return [self.kernel.scan_module]

    def check_compile(self) -> None:
        """Compile with the nvcc on PATH (no GPU needed); errors name the piece."""
        check_all_with_nvcc(self.modules_to_compile())

    def _output(self, call, given, n, name="out", dtype=None):
        """``(native, view)`` of the output ``name`` (of ``dtype``, default the elements'):
        ``given``, checked, or a new one."""
        dtype = self.dtype if dtype is None else dtype
        out = call.views[name]
        if out is None:
            return call.empty((n,), dtype)
        check_array(name, out, dtype)
        if out.size < n:
            raise ValueError(f"{name} has {out.size} elements; it needs room for {n}")
        for source in ("x", "flags"):
            view = call.views.get(source)
            # Kept elements move to earlier places that other blocks may still read; and
            # the kernel declares its arrays __restrict__.
            if view is not None and overlaps(view, out):
                raise ValueError(f"{name} overlaps {source}; compaction cannot work in place")
        return given, out

    def _launch(self, call, arrays, n, count_on_device, kernel=None):
        """Run ``kernel`` (default: this one's) over n elements of ``arrays`` (views of its
        array arguments before the count) on the call's stream. Returns the count and its
        view: a new one-element int64 array of the call's kind with ``count_on_device``,
        else the calling thread's MappedWord, to be read with ``_read``. When n is 0 nothing
        is launched (an empty GPUArray has no address) and the count is set to 0."""
        if count_on_device:
            count, count_view = call.empty((1,), np.int64)
        else:
            count = count_view = self._counts.get()
        if n == 0 and count_on_device:
            memset_d8_async(count_view.ptr, 0, count_view.nbytes, call.stream)
        elif n == 0:
            count.value = 0  # no work of this thread's writes it: each call read it back
        else:
            (kernel or self.kernel).launch_converted(
                tuple(a.ptr for a in (*arrays, count_view)), n, call.stream)
        return count, count_view

    @staticmethod
    def _read(count, stream) -> int:
        """The count (a MappedWord or a one-element int64 device array), after the work
        queued on ``stream``."""
        if isinstance(count, MappedWord):
            synchronize(stream)
            return count.value
        host = np.empty(1, np.int64)
        copy_to_host(host, count.ptr, stream)
        return int(host[0])

    def _compact(self, x, out, stream, count_on_device, *, trimmed):
        """The kernel over x into out: ``(out, count on the device)``, or on the host
        ``out[:count]`` (trimmed) or ``(out, count)``."""
        call = Call(stream, {"x": x, "out": out}, writes=("out",))
        check_array("x", call.views["x"], self.dtype)
        n = call.views["x"].size
        out, out_view = self._output(call, out, n)
        count, _ = self._launch(call, [call.views["x"], out_view], n, count_on_device)
        if count_on_device:
            return call.returned((out, count))
        kept = self._read(count, call.stream)
        return call.returned(_leading(out, kept) if trimmed else (out, kept))


class Select(_Compaction):
    """Keep the elements of x for which ``predicate`` holds, in order (stream compaction).

    Parameters
    ----------
    dtype:
        The element type of x: int8 .. uint64, float16, float32, float64, complex64,
        complex128, ml_dtypes' bfloat16, or a numpy structured dtype of those (nested
        structs and sub-arrays included).
    predicate:
        A C expression in ``x`` (the element) and ``i`` (its 64-bit index), e.g.
        ``"x > 0.5f"``. ``x`` has the element's C type (``scangen.types.element_type(dtype)
        .c_name``): a struct's fields are ``x.name``, a complex number's parts ``x.re`` and
        ``x.im``; float16 and bfloat16 elements come as a ``float`` (exact), since CUDA's
        ``__half`` and ``__nv_bfloat16`` do not compare with float literals. Leave it out
        and give ``flags`` instead.
    flags:
        The dtype of a mask (bool, or any integer type), e.g. ``np.bool_`` or
        ``mask.dtype``; the mask itself goes to each call: ``sel(x, mask)`` keeps x[i]
        where mask[i] is nonzero. An array here is refused with a TypeError saying so.
    keep:
        False keeps the elements the predicate (or mask) rejects (``remove_if``).
    **scan_options:
        algorithm, section_size, items_per_thread, strategy, tuning as for Scan.

    Notes
    -----
    Call ``sel(x)`` (or ``sel(x, mask)``) -> the kept elements, a new array of x's kind of
    length count (a view of ``out`` when given). ``count_on_device=True`` returns ``(out,
    count)`` with the count in a new one-element int64 array of x's kind and no host
    synchronisation. ``stream`` defaults to the array library's current stream.
    """

    def __init__(self, dtype, predicate=None, *, flags=None, keep=True, **scan_options):
        etype = element_type(dtype)
        keep = as_flag("keep", keep)
        if (predicate is None) == (flags is None):
            given = "neither" if predicate is None else "both"
            raise ValueError(f"give a predicate or the dtype of a flags mask (flags=), one of "
                             f"them, not {given}")
        c = etype.c_name
        if predicate is not None:
            # x is read in the condition and again when kept: held in between
            make = _counting_elements_scan
            helpers = _helpers(etype, predicate=predicate)
            given = dict(input_expr=counting_condition("scangen_keep(element, i)", keep),
                         output_statement=_scatter_kept("element"))
            mask_argument = ""
            self.flags_dtype = None
        else:
            self.flags_dtype = _mask_dtype(flags)
            # a mask, not an expression: reduce_then_scan's first pass may load it 16 bytes
            # a lane (ScanModule.counted_mask)
            make, helpers = _counting_scan, ""
            given = dict(_input=MaskInput("flags", keep), output_statement=_scatter_kept("x[i]"))
            mask_argument = f"const {MASK_C_TYPES[self.flags_dtype]} *__restrict__ flags, "
        self.predicate = predicate
        super().__init__(dtype, make(
            etype, helpers,
            arguments=f"const {c} *__restrict__ x, {mask_argument}{c} *__restrict__ out, "
                      "long long *count", **given,
            title="select" if keep else "remove_if", **scan_options))
        self.keep = keep

    def _arguments_repr(self) -> str:
        kept = "" if self.keep else ", keep=False"
        if self.predicate is not None:
            return f", {self.predicate!r}{kept}"
        return f", flags={self.flags_dtype.name}{kept}"

    def __call__(self, x, flags=None, *, out=None, stream=None, count_on_device=False):
        call = Call(stream, {"x": x, "flags": flags, "out": out}, writes=("out",))
        x_view = call.views["x"]
        check_array("x", x_view, self.dtype)
        n = x_view.size
        arrays = [x_view]
        if self.flags_dtype is not None:
            if flags is None:
                raise TypeError("this Select keeps elements by a mask: call it as sel(x, flags)")
            check_array("flags", call.views["flags"], self.flags_dtype, length=n)
            arrays.append(call.views["flags"])
        elif flags is not None:
            raise TypeError("this Select keeps elements by its predicate; it takes no flags")
        out, out_view = self._output(call, out, n)
        count, _ = self._launch(call, arrays + [out_view], n, count_on_device)
        if count_on_device:
            return call.returned((out, count))
        return call.returned(_leading(out, self._read(count, call.stream)))


#: Where a partition puts the element at i that its predicate rejects: after the trues in
#: input order (``last_item``: the number of trues, known only once all are counted), or
#: from the end back, in reverse input order (as CUB's DevicePartition::If).
_REJECTED_AT = {False: "out[last_item + (i - prev_item)]", True: "out[n - 1 - (i - prev_item)]"}


class Partition(_Compaction):
    """Partition: the elements for which ``predicate`` holds, in order, then the others.
    Call ``part(x)`` -> ``(out, n_true)``. Element types (``dtype``) and the predicate's
    ``x`` and ``i`` as for Select: int8 .. uint64, float16, float32, float64, complex64,
    complex128, ml_dtypes' bfloat16, or a numpy structured dtype of those.

    By default the others keep their input order too (a stable partition): they are placed
    after the number of trues (``last_item``), so the strategy is reduce_then_scan or
    hierarchical ("auto" picks the former), which read x twice. ``reverse_rejected=True``
    puts them in reverse input order from the end of ``out`` back, as CUB's
    DevicePartition::If does: each element's place is then known in one pass, which the
    single-pass strategies take (x read once)."""

    def __init__(self, dtype, predicate, *, reverse_rejected=False, **scan_options):
        etype = element_type(dtype)
        c = etype.c_name
        # _helpers takes None as "no predicate"; a partition always has one
        check_code(predicate, "predicate", expression=True)
        self.predicate = predicate
        self.reverse_rejected = as_flag("reverse_rejected", reverse_rejected)
        super().__init__(dtype, _counting_elements_scan(
            etype, _helpers(etype, predicate=predicate),
            arguments=f"const {c} *__restrict__ x, {c} *__restrict__ out, long long *count",
            input_expr="scangen_keep(element, i) ? 1 : 0",
            output_statement="if (item != prev_item) out[prev_item] = element;"
                             f" else {_REJECTED_AT[self.reverse_rejected]} = element;"
                             " if (i == n - 1) *count = item;",
            title="partition", **scan_options))

    def _arguments_repr(self) -> str:
        return f", {self.predicate!r}" + (", reverse_rejected=True" if self.reverse_rejected
                                          else "")

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        return self._compact(x, out, stream, count_on_device, trimmed=False)


#: x[i] starts a run: the first element, or one that differs from its predecessor
#: (scangen_equal: _helpers with run_heads). Not a HeldElement: a thread's 32 elements of
#: this tile do not fit its registers beside its ballots, and on tiles of 16 items that
#: held them (the elements before from the lane before) Unique ran 16% and
#: RunLengthEncode 6% slower than here (H100, 2^26 int32: docs/design/decisions.md).
_RUN_HEAD = "(i == 0 || !scangen_equal(x[i], x[i - 1]))"


class Unique(_Compaction):
    """Drop consecutive duplicates (std::unique): on sorted data, the distinct values.
    Call ``u(x)`` -> the kept elements. Element types (``dtype``): int8 .. uint64, float16,
    float32, float64, complex64, complex128, ml_dtypes' bfloat16, or a numpy structured
    dtype of those.

    Elements are equal as numpy's ``==`` says, scalar by scalar: complex numbers part by
    part, structs field by field (every element of a sub-array; padding bytes are no part
    of a value), each with C's ``==``. So every NaN is distinct (as in std::unique and
    torch.unique_consecutive), a struct or complex value holding a NaN too, and -0.0
    equals 0.0."""

    def __init__(self, dtype, **scan_options):
        etype = element_type(dtype)
        c = etype.c_name
        super().__init__(dtype, _counting_values_scan(
            etype, _helpers(etype, run_heads=True),
            arguments=f"const {c} *__restrict__ x, {c} *__restrict__ out, long long *count",
            input_expr=f"{_RUN_HEAD} ? 1 : 0", output_statement=_scatter_kept("x[i]"),
            title="unique", **scan_options))

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        return self._compact(x, out, stream, count_on_device, trimmed=True)


#: run_length_encode takes one pass over fewer elements than this (a counting scan that reads
#: last_counted, which packs positions in 32 bits), two kernels from it.
_ONE_PASS_BELOW = LAST_COUNTED_MAX_N + 1

#: The lengths kernel's tile and blocks per multiprocessor (scangen.tuning.RUN_LENGTHS).
_LENGTHS_BLOCK_SIZE = RUN_LENGTHS.value("block_size")
_LENGTHS_ITEMS_PER_THREAD = RUN_LENGTHS.value("items_per_thread")
_LENGTHS_BLOCKS_PER_SM = RUN_LENGTHS.value("blocks_per_sm")


@dataclass(frozen=True)
class RunLengthsModule(Module):
    """The second of RunLengthEncode's two kernels from 2^32 elements, ``run_lengths``
    (templates/run_lengths.cu.j2)."""

    template: ClassVar[str] = "run_lengths.cu.j2"
    parameters: ClassVar[tuple] = (
        Argument("starts", "long long", pointer=True, const=True, restrict=True),
        Argument("counts", "long long", pointer=True, restrict=True),
        Argument("runs", "long long", pointer=True, const=True, restrict=True),
        Argument("end", "long long"))

    def entry_points(self):
        return (("run_lengths", self.parameters),)

    @property
    def description(self) -> str:
        return "run lengths from run starts"

    def context(self) -> dict:
        return dict(block_size=_LENGTHS_BLOCK_SIZE, items_per_thread=_LENGTHS_ITEMS_PER_THREAD,
                    parameters=c_parameters(self.parameters))


def _run_heads_scan(etype, third: str, output_statement: str, title: str,
                    scan_options: dict) -> ScanKernel:
    """A counting scan of run heads over x, writing each run's value to ``values`` and what
    ``output_statement`` writes to the int64 array named ``third``, and the number of runs
    to ``count``."""
    c_type = etype.c_name
    return _counting_values_scan(
        etype, _helpers(etype, run_heads=True),
        arguments=f"const {c_type} *__restrict__ x, {c_type} *__restrict__ values, "
                  f"long long *__restrict__ {third}, long long *count",
        input_expr=f"{_RUN_HEAD} ? 1 : 0", output_statement=output_statement, title=title,
        **scan_options)


def _run_lengths(etype, scan_options: dict) -> ScanKernel:
    """RunLengthEncode's kernel below 2^32 elements: a counting scan of run heads that
    writes each run's value at its head, the length of the run before it there too (from
    prev_last_counted, that run's head), the last run's length at the last element, and
    the number of runs."""
    return _run_heads_scan(
        etype, "counts",
        "if (item != prev_item) { values[prev_item] = x[i];"
        " if (prev_item > 0) counts[prev_item - 1] = i - prev_last_counted; }"
        " if (i == n - 1) { counts[item - 1] = n - last_counted; *count = item; }",
        "run_length_encode", scan_options)


def _run_heads(etype, scan_options: dict) -> ScanKernel:
    """The first of RunLengthEncode's two kernels from 2^32 elements: the counting scan of
    run heads that writes each run's value and first index, and the number of runs."""
    return _run_heads_scan(
        etype, "starts",
        "if (item != prev_item) { values[prev_item] = x[i]; starts[prev_item] = i; }"
        " if (i == n - 1) *count = item;",
        "run_length_encode heads", scan_options)


class RunLengthEncode(_Compaction):
    """Runs of equal consecutive elements: call ``rle(x)`` -> ``(values, counts)``, counts
    int64. Element types (``dtype``): int8 .. uint64, float16, float32, float64, complex64,
    complex128, ml_dtypes' bfloat16, or a numpy structured dtype of those. Elements are
    equal as for Unique (numpy's ``==``, field by field for structs): every NaN is a run of
    its own.
    ``count_on_device=True`` returns ``(values, counts, count)`` with no host
    synchronisation: values and counts have n elements, of which the first ``count`` (a new
    one-element int64 array of x's kind) are the runs'. ``values=`` and ``counts=`` (int64)
    take arrays of x's kind with room for n elements to write into (nothing past the runs
    is written); then the results are those arrays, or views of their first ``runs``
    elements. ``stream`` defaults to the array library's current stream.

    One pass (``kernel``) below 2^32 elements: a counting scan of run heads (as Unique's)
    that writes each run's value at its head and the length of the run before it there
    too (the scan's ``prev_last_counted`` is that run's head). From 2^32 elements, where that scan's
    packed positions would not fit, two kernels queued together (``wide_kernels()``): the
    counting scan writes each run's value and first index, then ``run_lengths``
    (templates/run_lengths.cu.j2) reads the number of runs on the device and writes
    ``counts[r] = starts[r + 1] - starts[r]``. Without ``count_on_device`` the number of
    runs is read once the work is done, and values and counts are views of their first
    ``runs`` elements (both arrays are allocated for n)."""

    def __init__(self, dtype, **scan_options):
        etype = element_type(dtype)
        self._wide = functools.partial(_run_heads, etype, scan_options)
        self._wide_kernels = None
        self._runtime = ModuleRuntime()
        super().__init__(dtype, _run_lengths(etype, scan_options))

    def wide_kernels(self):
        """``(heads ScanKernel, lengths module)``: the two kernels from 2^32 elements,
        built on first use."""
        if self._wide_kernels is None:
            self._wide_kernels = (self._wide(), RunLengthsModule())
        return self._wide_kernels

    def plan(self, n):
        """The launches for ``n`` elements (no GPU needed): below 2^32 the counting scan's
        plan; from 2^32 a plan of the heads scan (``wide_kernels()``) and the
        ``run_lengths`` launch after it."""
        if n < _ONE_PASS_BELOW:
            return self.kernel.plan(n)
        heads, lengths = self.wide_kernels()
        n = as_count(n)
        builder = ModulePlanBuilder()
        if n == 0:  # only where the two kernels are asked for below 2^32 (tests)
            builder.zero("count", 8)
            return builder.build(f"run_length_encode of {self.dtype} in two kernels", n,
                                 [lengths.description])
        builder.scan(heads, n, dict(x=BufferArg("x"), values=BufferArg("values"),
                                    starts=BufferArg("starts"), count=BufferArg("count")),
                     "each run's value and first index, and the number of runs")
        tile = _LENGTHS_BLOCK_SIZE * _LENGTHS_ITEMS_PER_THREAD
        builder.launch(lengths, "run_lengths", ceil_div(n, tile), _LENGTHS_BLOCK_SIZE,
                       dict(starts=BufferArg("starts"), counts=BufferArg("counts"),
                            runs=BufferArg("count"), end=n),
                       reads=n * 8, writes=n * 8, blocks_per_sm=_LENGTHS_BLOCKS_PER_SM,
                       why="counts[r] = starts[r + 1] - starts[r] for the runs the scan "
                           "counted (read on the device)")
        return builder.build(f"run_length_encode of {self.dtype} in two kernels", n,
                             [lengths.description])

    def modules_to_compile(self) -> list:
        """What check_compile compiles: the one-pass scan and the two kernels from 2^32
        elements."""
        heads, lengths = self.wide_kernels()
        return [self.kernel.scan_module, heads.scan_module, lengths]

    def __call__(self, x, *, values=None, counts=None, stream=None, count_on_device=False):
        call = Call(stream, {"x": x, "values": values, "counts": counts},
                    writes=("values", "counts"))
        check_array("x", call.views["x"], self.dtype)
        n = call.views["x"].size
        values, values_view = self._output(call, values, n, "values")
        counts, counts_view = self._output(call, counts, n, "counts", np.dtype(np.int64))
        if overlaps(values_view, counts_view):
            raise ValueError("values overlaps counts; give separate arrays")
        if n < _ONE_PASS_BELOW:
            count, count_view = self._launch(call, [call.views["x"], values_view, counts_view],
                                             n, count_on_device)
        else:
            # A new array each call (pooled): with the count left on the device, a call on
            # another stream may start before this one's lengths kernel has read its starts.
            _, starts = call.empty((n,), np.int64)
            # The count too is the call's own (the lengths kernel reads it after this returns).
            count, count_view = call.empty((1,), np.int64)
            self._runtime.run(self.plan(n), {"x": call.views["x"], "values": values_view,
                                             "starts": starts, "count": count_view,
                                             "counts": counts_view}, call.stream)
        if count_on_device:
            return call.returned((values, counts, count))
        runs = self._read(count_view, call.stream)
        return call.returned((_leading(values, runs), _leading(counts, runs)))


# --- one-shot functions: cached objects, so a repeated call compiles nothing --------------

@functools.lru_cache(maxsize=128)
def _select(dtype, predicate, flags, keep):
    return Select(dtype, predicate, flags=flags, keep=keep)


def select(x, predicate=None, *, flags=None, stream=None):
    """The elements of x for which ``predicate`` (a C expression in x and i) holds, or where
    ``flags`` (a bool or integer array of len(x)) is nonzero, in order: a new array.
    {arrays}"""
    return _one_shot_select(x, predicate, flags, stream, True)


def remove_if(x, predicate=None, *, flags=None, stream=None):
    """The complement of select: the elements for which ``predicate`` does not hold.
    {arrays}"""
    return _one_shot_select(x, predicate, flags, stream, False)


def _one_shot_select(x, predicate, flags, stream, keep):
    flags_dtype = None if flags is None else dtype_of(flags, "flags")
    kernel = _select(dtype_of(x), predicate, flags_dtype, keep)
    return host_round_trip(lambda x, flags: kernel(x, flags, stream=stream),
                           {"x": x, "flags": flags}, stream)


@functools.lru_cache(maxsize=128)
def _partition(dtype, predicate, reverse_rejected=False):
    return Partition(dtype, predicate, reverse_rejected=reverse_rejected)


def partition(x, predicate, *, reverse_rejected=False, stream=None):
    """``(out, n_true)``: the elements for which ``predicate`` holds, in their original
    order, then the others: in their original order too, or with ``reverse_rejected=True``
    in reverse (CUB's order, one pass over x instead of two). {arrays}"""
    part = _partition(dtype_of(x), predicate, reverse_rejected)
    return host_round_trip(lambda x: part(x, stream=stream), {"x": x}, stream)


@functools.lru_cache(maxsize=32)
def _unique(dtype):
    return Unique(dtype)


def unique(x, *, stream=None):
    """x without consecutive duplicates (on sorted x: its distinct values). {arrays}"""
    kernel = _unique(dtype_of(x))
    return host_round_trip(lambda x: kernel(x, stream=stream), {"x": x}, stream)


@functools.lru_cache(maxsize=32)
def _run_length_encode(dtype):
    return RunLengthEncode(dtype)


def run_length_encode(x, *, stream=None):
    """``(values, counts)`` of the runs of equal consecutive elements of x. {arrays}"""
    kernel = _run_length_encode(dtype_of(x))
    return host_round_trip(lambda x: kernel(x, stream=stream), {"x": x}, stream)


for _function in (select, remove_if, partition, unique, run_length_encode):
    _function.__doc__ = _function.__doc__.format(arrays=ONE_SHOT_ARRAYS)


command_line("select", lambda dtype, options, predicate: Select(dtype, predicate, **options),
             needs=["predicate"])
command_line("remove_if", lambda dtype, options, predicate: Select(dtype, predicate, keep=False,
                                                                   **options),
             needs=["predicate"])
command_line("partition", lambda dtype, options, predicate: Partition(dtype, predicate,
                                                                      **options),
             needs=["predicate"])
command_line("unique", lambda dtype, options: Unique(dtype, **options))
command_line("run_length_encode", lambda dtype, options: RunLengthEncode(dtype, **options))
