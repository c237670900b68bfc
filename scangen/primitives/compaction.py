"""Compaction primitives: each is one ScanKernel that counts what it keeps (an int64 add
scan of 1s and 0s) and scatters kept elements to their exclusive count.

Every class builds its kernel once (validated and rendered at construction, compiled on
first use) and keeps a one-element count buffer per instance; the one-shot functions cache
their objects, so a second call with the same dtypes and predicate compiles nothing.
Arrays are 1-D contiguous pycuda GPUArrays; counts and indices are 64-bit.
"""
from __future__ import annotations

import functools

import numpy as np

from ..kernel import ScanKernel
from ..runtime.launcher import _gpuarray, check_array, overlaps
from ..types import MASK_C_TYPES, element_type
from ..usercode import check_code

#: What a kept element does: take the next place in out; the last element writes the count.
_SCATTER_KEPT = ("if (item != prev_item) out[prev_item] = x[i];"
                 " if (i == n - 1) *count = item;")



def _leading(array, count):
    """The first count elements of a GPUArray (pycuda cannot slice an empty one)."""
    return array if count == array.size else array[:count]


def _predicate_preamble(c_type: str, predicate: str) -> str:
    """The predicate as a device function of the element ``x`` and its index ``i``."""
    check_code(predicate, "predicate", expression=True)
    return (f"// Is element x (at index i) kept?\n"
            f"static __device__ __forceinline__ bool scangen_keep(const {c_type} x, long long i)\n"
            f"{{\n    return (\n// user predicate {{\n{predicate.strip()}\n// }} user predicate\n"
            f"    );\n}}")


class _Compaction:
    """What the compaction classes share: one ScanKernel, argument checks, the count."""

    def __init__(self, dtype, *, arguments, input_expr, output_statement, preamble="",
                 title, **scan_options):
        self.etype = element_type(dtype)
        self.kernel = ScanKernel(np.int64, "add", arguments=arguments, input_expr=input_expr,
                                 output_statement=output_statement, preamble=preamble,
                                 title=title, **scan_options)
        self._count = None

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

    def _output(self, out, n, x=None, name="out"):
        if out is None:
            return _gpuarray().empty(n, self.dtype)
        check_array(name, out, self.dtype)
        if out.size < n:
            raise ValueError(f"{name} has {out.size} elements; it needs room for {n}")
        if x is not None and x.size and out.size and overlaps(x, out):
            # Kept elements move to earlier places that other blocks may still read.
            raise ValueError(f"{name} overlaps x; compaction cannot work in place")
        return out

    def _count_buffer(self):
        if self._count is None:
            self._count = _gpuarray().zeros(1, np.int64)
        return self._count

    def _launch(self, arrays, n, stream):
        """Run over n elements of ``arrays`` (the kernel's array arguments before the count);
        the count buffer holds the number kept (0 when n is 0, and nothing is launched: an
        empty GPUArray has no address)."""
        count = self._count_buffer()
        if n == 0:
            count.fill(0, stream=stream)
        else:
            self.kernel.launch_converted(tuple(np.uintp(a.ptr) for a in (*arrays, count)),
                                         n, stream)
        return count

    @staticmethod
    def _read(count, stream) -> int:
        if stream is not None:
            stream.synchronize()
        return int(count.get()[0])

    def _compact(self, x, out, stream, count_on_device, *, trimmed):
        """The kernel over x into out: ``(out, count on the device)``, or on the host
        ``out[:count]`` (trimmed) or ``(out, count)``."""
        check_array("x", x, self.dtype)
        out = self._output(out, x.size, x)
        count = self._launch([x, out], x.size, stream)
        if count_on_device:
            return out, count
        kept = self._read(count, stream)
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

    Call ``sel(x)`` (or ``sel(x, mask)``) -> the kept elements, a new GPUArray of length
    count (a view of ``out`` when given). ``count_on_device=True`` returns ``(out,
    count)`` with the count in a one-element int64 GPUArray and no host synchronisation.
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
            mask_argument = f"const {MASK_C_TYPES[self.flags_dtype]} *flags, "
        if not keep:
            test = f"!({test})"
        self.predicate = predicate
        super().__init__(dtype, arguments=f"const {c} *x, {mask_argument}{c} *out, "
                                          f"long long *count",
                         input_expr=f"({test}) ? 1 : 0", output_statement=_SCATTER_KEPT,
                         preamble=preamble, title="select" if keep else "remove_if",
                         **scan_options)

    def __call__(self, x, flags=None, *, out=None, stream=None, count_on_device=False):
        check_array("x", x, self.dtype)
        n = x.size
        arrays = [x]
        if self.flags_dtype is not None:
            if flags is None:
                raise TypeError("this Select keeps elements by a mask: call it as sel(x, flags)")
            check_array("flags", flags, self.flags_dtype, length=n)
            arrays.append(flags)
        elif flags is not None:
            raise TypeError("this Select keeps elements by its predicate; it takes no flags")
        out = self._output(out, n, x)
        count = self._launch(arrays + [out], n, stream)
        if count_on_device:
            return out, count
        return _leading(out, self._read(count, stream))


class Partition(_Compaction):
    """Stable partition: the elements for which ``predicate`` holds, in order, then the
    others, in order. Call ``part(x)`` -> ``(out, n_true)``. The falses are placed with
    ``last_item`` (the number of trues), so the strategy is reduce_then_scan or
    hierarchical ("auto" picks the former)."""

    def __init__(self, dtype, predicate, **scan_options):
        etype = element_type(dtype)
        c = etype.c_name
        self.predicate = predicate
        super().__init__(
            dtype, arguments=f"const {c} *x, {c} *out, long long *count",
            input_expr="scangen_keep(x[i], i) ? 1 : 0",
            output_statement="if (item != prev_item) out[prev_item] = x[i];"
                             " else out[last_item + (i - prev_item)] = x[i];"
                             " if (i == n - 1) *count = item;",
            preamble=_predicate_preamble(c, predicate), title="partition", **scan_options)

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
        super().__init__(dtype, arguments=f"const {c} *x, {c} *out, long long *count",
                         input_expr=f"{_RUN_HEAD} ? 1 : 0", output_statement=_SCATTER_KEPT,
                         title="unique", **scan_options)

    def __call__(self, x, *, out=None, stream=None, count_on_device=False):
        return self._compact(x, out, stream, count_on_device, trimmed=True)


class RunLengthEncode(_Compaction):
    """Runs of equal consecutive elements: call ``rle(x)`` -> ``(values, counts)``, counts
    int64. Elements compare with C's ``!=`` (every NaN is a run of its own)."""

    def __init__(self, dtype, **scan_options):
        c = element_type(dtype).c_name
        super().__init__(
            dtype, arguments=f"const {c} *x, {c} *values, long long *starts, long long *ends, "
                             f"long long *count",
            input_expr=f"{_RUN_HEAD} ? 1 : 0",
            output_statement="if (item != prev_item) { values[prev_item] = x[i];"
                             " starts[prev_item] = i; }"
                             " if (i == n - 1 || x[i + 1] != x[i]) ends[item - 1] = i + 1;"
                             " if (i == n - 1) *count = item;",
            title="run_length_encode", **scan_options)

    def __call__(self, x, *, stream=None):
        check_array("x", x, self.dtype)
        gpuarray, n = _gpuarray(), x.size
        values = gpuarray.empty(n, self.dtype)
        starts, ends = gpuarray.empty(n, np.int64), gpuarray.empty(n, np.int64)
        count = self._launch([x, values, starts, ends], n, stream)
        runs = self._read(count, stream)
        if runs == 0:  # pycuda neither slices nor subtracts empty arrays
            return values, gpuarray.empty(0, np.int64)
        return _leading(values, runs), _leading(ends, runs) - _leading(starts, runs)


# --- one-shot functions: cached objects, so a repeated call compiles nothing --------------

@functools.lru_cache(maxsize=128)
def _select(dtype, predicate, flags, keep):
    return Select(dtype, predicate, flags=flags, keep=keep)


def select(x, predicate=None, *, flags=None, stream=None):
    """The elements of x for which ``predicate`` (a C expression in x and i) holds, or where
    ``flags`` (a bool or integer GPUArray of len(x)) is nonzero, in order: a new GPUArray."""
    flags_dtype = None if flags is None else np.dtype(flags.dtype)
    return _select(np.dtype(x.dtype), predicate, flags_dtype, True)(x, flags, stream=stream)


def remove_if(x, predicate=None, *, flags=None, stream=None):
    """The complement of select: the elements for which ``predicate`` does not hold."""
    flags_dtype = None if flags is None else np.dtype(flags.dtype)
    return _select(np.dtype(x.dtype), predicate, flags_dtype, False)(x, flags, stream=stream)


@functools.lru_cache(maxsize=128)
def _partition(dtype, predicate):
    return Partition(dtype, predicate)


def partition(x, predicate, *, stream=None):
    """``(out, n_true)``: the elements for which ``predicate`` holds, then the others, each
    in their original order."""
    return _partition(np.dtype(x.dtype), predicate)(x, stream=stream)


@functools.lru_cache(maxsize=32)
def _unique(dtype):
    return Unique(dtype)


def unique(x, *, stream=None):
    """x without consecutive duplicates (on sorted x: its distinct values)."""
    return _unique(np.dtype(x.dtype))(x, stream=stream)


@functools.lru_cache(maxsize=32)
def _run_length_encode(dtype):
    return RunLengthEncode(dtype)


def run_length_encode(x, *, stream=None):
    """``(values, counts)`` of the runs of equal consecutive elements of x."""
    return _run_length_encode(np.dtype(x.dtype))(x, stream=stream)
