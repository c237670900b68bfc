"""Compaction primitives: each is one ScanKernel that counts what it keeps (an int64 add
scan of 1s and 0s) and scatters kept elements to their exclusive count.

Every class builds its kernel once (validated and rendered at construction, compiled on
first use) and keeps a one-element count buffer per instance and calling thread; the
one-shot functions cache their objects, so a second call with the same dtypes and predicate
compiles nothing.
Arrays are 1-D C-contiguous device arrays of one kind (pycuda GPUArray, CuPy, torch, ...:
see scangen.interop) and results come back in that kind; counts and indices are 64-bit.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..compile import release_at_exit
from ..interop import ONE_SHOT_ARRAYS, Call, dtype_of, host_round_trip
from ..kernel import ScanKernel
from ..runtime.launcher import _gpuarray, check_array, overlaps
from ..runtime.streams import copy_to_host, memset_d8_async
from ..types import MASK_C_TYPES, element_type
from ..usercode import check_code

#: What a kept element does: take the next place in out; the last element writes the count.
_SCATTER_KEPT = ("if (item != prev_item) out[prev_item] = x[i];"
                 " if (i == n - 1) *count = item;")



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


def _predicate_preamble(c_type: str, predicate: str) -> str:
    """The predicate as a device function of the element ``x`` and its index ``i``."""
    check_code(predicate, "predicate", expression=True)
    return (f"// Is element x (at index i) kept?\n"
            f"static __device__ __forceinline__ bool scangen_keep(const {c_type} x, long long i)\n"
            f"{{\n    return (\n// user predicate {{\n{predicate.strip()}\n// }} user predicate\n"
            f"    );\n}}")


def _counting_scan(**options) -> ScanKernel:
    """A ScanKernel that counts what it keeps: an int64 add of 0s and 1s (counts=True)."""
    return ScanKernel(np.int64, "add", counts=True, **options)


class _Compaction:
    """What the compaction classes share: one counting scan (``kernel``, made by
    _counting_scan), argument checks, the count."""

    def __init__(self, dtype, kernel: ScanKernel):
        self.etype = element_type(dtype)
        self.kernel = kernel
        # thread ident -> (one-element int64 GPUArray, its host copy): a call that reads its
        # count on the host writes and reads them before it returns, so one thread's calls
        # take turns with them; a call from another thread (the one-shot functions share
        # their objects) has its own.
        self._counts = {}
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._counts.clear()

    @property
    def dtype(self) -> np.dtype:
        return self.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA of the kernel (no GPU needed)."""
        return self.kernel.source

    def check_compile(self) -> None:
        """Compile with the nvcc on PATH (no GPU needed); errors name the piece."""
        self.kernel.check_compile()

    def _output(self, call, given, n, name="out"):
        """``(native, view)`` of the output ``name``: ``given``, checked, or a new one."""
        out = call.views[name]
        if out is None:
            return call.empty((n,), self.dtype)
        check_array(name, out, self.dtype)
        if out.size < n:
            raise ValueError(f"{name} has {out.size} elements; it needs room for {n}")
        for source in ("x", "flags"):
            view = call.views.get(source)
            # Kept elements move to earlier places that other blocks may still read; and
            # the kernel declares its arrays __restrict__.
            if view is not None and view.size and out.size and overlaps(view, out):
                raise ValueError(f"{name} overlaps {source}; compaction cannot work in place")
        return given, out

    def _thread_counts(self):
        """The calling thread's count buffers: (device, host)."""
        thread = threading.get_ident()
        counts = self._counts.get(thread)
        if counts is None:
            counts = self._counts[thread] = (_gpuarray().zeros(1, np.int64),
                                             np.zeros(1, np.int64))
        return counts

    def _launch(self, call, arrays, n, count_on_device, kernel=None):
        """Run ``kernel`` (default: this one's) over n elements of ``arrays`` (views of its
        array arguments before the count) on the call's stream. Returns the count and its
        view: a new one-element int64 array of the call's kind with ``count_on_device``,
        else the calling thread's buffer, to be read with ``_read``. When n is 0 nothing is
        launched (an empty GPUArray has no address) and the count is set to 0."""
        if count_on_device:
            count, count_view = call.empty((1,), np.int64)
        else:
            count = count_view = self._thread_counts()[0]
        if n == 0:
            memset_d8_async(count_view.ptr, 0, count_view.nbytes, call.stream)
        else:
            (kernel or self.kernel).launch_converted(
                tuple(a.ptr for a in (*arrays, count_view)), n, call.stream)
        return count, count_view

    def _read(self, count, stream) -> int:
        """The count, after the work queued on ``stream``; pycuda's ``.get()`` costs
        several microseconds more than a copy into an array kept for it."""
        host = self._thread_counts()[1]
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
            return out, count
        kept = self._read(count, call.stream)
        return _leading(out, kept) if trimmed else (out, kept)


class Select(_Compaction):
    """Keep the elements of x for which ``predicate`` holds, in order (stream compaction).

    Parameters
    ----------
    dtype:
        The element type of x.
    predicate:
        A C expression in ``x`` (the element, of the element's C type) and ``i`` (its
        64-bit index), e.g. ``"x > 0.5f"``. Leave it out and give ``flags`` instead.
    flags:
        The dtype of a mask (bool, or any integer type): ``select(x, mask)`` keeps x[i]
        where mask[i] is nonzero.
    keep:
        False keeps the elements the predicate (or mask) rejects (``remove_if``).
    **scan_options:
        algorithm, section_size, items_per_thread, strategy, tuning as for Scan.

    Call ``sel(x)`` (or ``sel(x, mask)``) -> the kept elements, a new array of x's kind of
    length count (a view of ``out`` when given). ``count_on_device=True`` returns ``(out,
    count)`` with the count in a new one-element int64 array of x's kind and no host
    synchronisation. ``stream`` defaults to the array library's current stream.
    """

    def __init__(self, dtype, predicate=None, *, flags=None, keep=True, **scan_options):
        etype = element_type(dtype)
        if (predicate is None) == (flags is None):
            raise ValueError("give a predicate or the dtype of a flags mask (flags=), not both")
        c = etype.c_name
        preamble = ""
        if predicate is not None:
            preamble = _predicate_preamble(c, predicate)
            test, mask_argument = "scangen_keep(x[i], i)", ""
            self.flags_dtype = None
        else:
            self.flags_dtype = np.dtype(flags)
            if self.flags_dtype not in MASK_C_TYPES:
                raise TypeError(f"flags must be bool or an integer dtype, not {self.flags_dtype}")
            test = "flags[i] != 0"
            mask_argument = f"const {MASK_C_TYPES[self.flags_dtype]} *__restrict__ flags, "
        if not keep:
            test = f"!({test})"
        self.predicate = predicate
        super().__init__(dtype, _counting_scan(
            arguments=f"const {c} *__restrict__ x, {mask_argument}{c} *__restrict__ out, "
                      "long long *count",
            input_expr=f"({test}) ? 1 : 0", output_statement=_SCATTER_KEPT,
            preamble=preamble, title="select" if keep else "remove_if", **scan_options))

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
            return out, count
        return _leading(out, self._read(count, call.stream))


class Partition(_Compaction):
    """Stable partition: the elements for which ``predicate`` holds, in order, then the
    others, in order. Call ``part(x)`` -> ``(out, n_true)``. The falses are placed with
    ``last_item`` (the number of trues), so the strategy is reduce_then_scan or
    hierarchical ("auto" picks the former)."""

    def __init__(self, dtype, predicate, **scan_options):
        etype = element_type(dtype)
        c = etype.c_name
        self.predicate = predicate
        super().__init__(dtype, _counting_scan(
            arguments=f"const {c} *__restrict__ x, {c} *__restrict__ out, long long *count",
            input_expr="scangen_keep(x[i], i) ? 1 : 0",
            output_statement="if (item != prev_item) out[prev_item] = x[i];"
                             " else out[last_item + (i - prev_item)] = x[i];"
                             " if (i == n - 1) *count = item;",
            preamble=_predicate_preamble(c, predicate), title="partition", **scan_options))

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        return self._compact(x, out, stream, count_on_device, trimmed=False)


#: x[i] starts a run: the first element, or one that differs from its predecessor.
_RUN_HEAD = "(i == 0 || x[i] != x[i - 1])"


class Unique(_Compaction):
    """Drop consecutive duplicates (std::unique): on sorted data, the distinct values.
    Elements compare with C's ``!=``, so every NaN is distinct (as in std::unique and
    torch.unique_consecutive). Call ``u(x)`` -> the kept elements."""

    def __init__(self, dtype, **scan_options):
        c = element_type(dtype).c_name
        super().__init__(dtype, _counting_scan(
            arguments=f"const {c} *__restrict__ x, {c} *__restrict__ out, long long *count",
            input_expr=f"{_RUN_HEAD} ? 1 : 0", output_statement=_SCATTER_KEPT,
            title="unique", **scan_options))

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        return self._compact(x, out, stream, count_on_device, trimmed=True)


#: Run starts are int32 (half the bytes of int64 to write, then read again) for inputs of
#: fewer elements than this, int64 from it.
_INT32_STARTS_BELOW = 2 ** 31


def _run_kernels(c_type: str, start_c: str, scan_options: dict) -> tuple[ScanKernel, ScanKernel]:
    """RunLengthEncode's two kernels with starts of C type ``start_c``: the counting scan of
    run heads that writes each run's value and first index, and the lengths from the starts.
    The lengths kernel reads the number of runs from the device, so that it can be launched
    over the runs (their number read on the host first) or over all n elements (none
    read: elements past the runs write nothing). Counting nothing, the single pass is one
    launch that only reads starts and writes counts; reduce_then_scan (what auto takes for
    a large counting scan) is three."""
    heads = _counting_scan(
        arguments=f"const {c_type} *__restrict__ x, {c_type} *__restrict__ values, "
                  f"{start_c} *__restrict__ starts, long long *count",
        input_expr=f"{_RUN_HEAD} ? 1 : 0",
        output_statement=f"if (item != prev_item) {{ values[prev_item] = x[i];"
                         f" starts[prev_item] = ({start_c})i; }}"
                         " if (i == n - 1) *count = item;",
        title="run_length_encode", **scan_options)
    lengths = _counting_scan(
        arguments=f"const {start_c} *__restrict__ starts, long long *__restrict__ counts, "
                  "const long long *runs, long long end",
        input_expr="0",
        output_statement="const long long total = *runs;"
                         " if (i < total) counts[i] = (i + 1 < total ? (long long)starts[i + 1]"
                         " : end) - starts[i];",
        title="run_lengths", **{"strategy": "decoupled_lookback", **scan_options})
    return heads, lengths


class RunLengthEncode(_Compaction):
    """Runs of equal consecutive elements: call ``rle(x)`` -> ``(values, counts)``, counts
    int64. Elements compare with C's ``!=`` (every NaN is a run of its own).
    ``count_on_device=True`` returns ``(values, counts, count)`` with no host
    synchronisation: values and counts have n elements, of which the first ``count`` (a new
    one-element int64 array of x's kind) are the runs'. ``stream`` defaults to the array
    library's current stream.

    Two kernels. The first counts run heads (a counting scan, as Unique's) and writes each
    run's value to ``values[runs before it]`` and its first index to an array of starts
    (int32 below 2^31 elements, else int64); the second runs over the runs,
    ``counts[r] = starts[r + 1] - starts[r]`` (the last run ends at n): a ScanKernel that
    counts nothing, used for its output statement. It is launched over the runs once their
    number is read on the host, or with the count left on the device over all n elements
    (a longer launch, whose elements past the runs write nothing). ``kernel`` and
    ``lengths`` are the pair with int32 starts."""

    def __init__(self, dtype, **scan_options):
        c = element_type(dtype).c_name
        self._kernels = {np.dtype(np.int32): _run_kernels(c, "int", scan_options)}
        self._wide_kernels = functools.partial(_run_kernels, c, "long long", scan_options)
        super().__init__(dtype, self._kernels[np.dtype(np.int32)][0])
        self.lengths = self._kernels[np.dtype(np.int32)][1]

    def _kernels_for(self, start_dtype):
        if start_dtype not in self._kernels:
            self._kernels[start_dtype] = self._wide_kernels()
        return self._kernels[start_dtype]

    @property
    def source(self) -> str:
        """The CUDA of both kernels with int32 starts (no GPU needed)."""
        return self.kernel.source + "\n" + self.lengths.source

    def check_compile(self) -> None:
        for start_dtype in (np.dtype(np.int32), np.dtype(np.int64)):
            for kernel in self._kernels_for(start_dtype):
                kernel.check_compile()

    def __call__(self, x, *, stream=None, count_on_device=False):
        call = Call(stream, {"x": x})
        check_array("x", call.views["x"], self.dtype)
        n = call.views["x"].size
        start_dtype = np.dtype(np.int32 if n < _INT32_STARTS_BELOW else np.int64)
        heads, lengths = self._kernels_for(start_dtype)
        values, values_view = call.empty((n,), self.dtype)
        # A new array each call (pooled): with the count left on the device, a call on
        # another stream may start before this one's lengths kernel has read its starts.
        starts_array, starts = call.empty((max(n, 1),), start_dtype)
        # The count too is the call's own (the lengths kernel reads it after this returns).
        count, count_view = self._launch(call, [call.views["x"], values_view, starts], n,
                                         True, heads)
        if count_on_device:
            counts, counts_view = call.empty((n,), np.int64)
            runs = n  # at most
        else:
            runs = self._read(count_view, call.stream)
            counts, counts_view = call.empty((runs,), np.int64)
        if runs:
            lengths.launch_converted((starts.ptr, counts_view.ptr, count_view.ptr, np.int64(n)),
                                     runs, call.stream)
        if count_on_device:
            return values, counts, count
        return _leading(values, runs), counts


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
def _partition(dtype, predicate):
    return Partition(dtype, predicate)


def partition(x, predicate, *, stream=None):
    """``(out, n_true)``: the elements for which ``predicate`` holds, then the others, each
    in their original order. {arrays}"""
    part = _partition(dtype_of(x), predicate)
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
