"""SegmentedScan: scans that restart at every segment head, given as flags, CSR offsets or
runs of equal keys. Each form is one ScanKernel with an is_segment_start_expr (so every
strategy and algorithm serves it, and operand order is kept); the kernels are built on first
use of each form and index dtype."""
from __future__ import annotations

import numpy as np

from .kernel import ScanKernel, options_repr
from .interop import Call, check_array
from .render import render_template
from .scan import _OUTPUT
from .spec import check_mode
from .types import MASK_C_TYPES, element_type

#: The dtypes CSR offsets may have.
_OFFSET_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

#: The forms a segmentation may take, each with the index dtypes it may have.
_INDEX_TYPES = {
    "flags": tuple(MASK_C_TYPES),
    "offsets": _OFFSET_TYPES,
    "keys": tuple(d for d in MASK_C_TYPES if d != np.bool_),
}
#: The index dtype of each form where none is named (plan, check_compile, kernel).
_DEFAULT_INDEX = {"flags": np.dtype(np.bool_), "offsets": np.dtype(np.int64),
                  "keys": np.dtype(np.int64)}

def _offset_search(offset_c: str) -> str:
    """The device function the offsets form's segment test calls, ``scangen_is_offset``
    (templates/segmented.cuh.j2), for offsets of C type ``offset_c``."""
    return render_template("segmented.cuh.j2", dict(offset_c=offset_c),
                           "a segmented scan by offsets")


class SegmentedScan:
    """A scan that restarts at each segment's first element.

    Call it with exactly one of:

    * ``flags=heads``: a bool or integer array of len(x); nonzero marks a segment's first
      element;
    * ``offsets=starts``: CSR offsets, int32 or int64, of length segments + 1,
      non-decreasing, from 0 to len(x) (empty segments allowed); checked on the host;
    * ``keys=k``: an integer array of len(x); a segment is a run of equal consecutive keys
      (CUB's scan-by-key).

    ``dtype`` and ``operator`` are as for Scan: int8 .. uint64, float16, float32, float64,
    complex64, complex128, ml_dtypes' bfloat16, or a numpy structured dtype of those. The
    first element always starts a segment. Exclusive mode restarts from the identity at
    each head. Other keywords (reverse, initial, algorithm, section_size, items_per_thread,
    strategy, tuning) are as for Scan; with ``reverse=True`` each segment is scanned from
    its last element to its first. ``initial=`` starts every segment from that value
    (inclusive: ``initial op x[head] op ...``; exclusive: ``initial`` at each head), and a
    call may pass another (``seg(x, flags=f, initial=v)``).

    Inspection, without a GPU, as for Scan: ``seg.source`` is the CUDA of the flags form
    with bool flags (the kernel built and checked at construction); ``seg.plan(n)`` the
    launches for n elements and ``seg.check_compile()`` compiles with the nvcc on PATH.
    ``plan`` and ``check_compile`` take ``form="flags"`` (the default), ``"offsets"`` or
    ``"keys"``, and ``index_dtype=`` (default: bool flags, int64 offsets and keys);
    ``check_compile()`` with no form compiles all three. ``seg.kernel(form, index_dtype)``
    is the ScanKernel of one form (``.source`` of another form: ``seg.kernel("keys",
    np.int32).source``).
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", **scan_options):
        check_mode(mode)
        self.etype = element_type(dtype)
        self.mode, self.operator, self.scan_options = mode, operator, scan_options
        self._kernels = {}
        self.kernel("flags")  # validates the operator and options now

    def __repr__(self):
        return (f"SegmentedScan({self.dtype.name}, {self.kernel('flags').spec.operator.name!r}, "
                f"mode={self.mode!r}{options_repr(self.kernel('flags'))})")

    @property
    def dtype(self) -> np.dtype:
        return self.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA of the flags form with bool flags (no GPU needed); another form's is
        ``kernel(form, index_dtype).source``."""
        return self.kernel("flags").source

    def plan(self, n, form="flags", index_dtype=None):
        """The launches that scan ``n`` elements segmented by ``form`` (no GPU needed)."""
        return self.kernel(form, index_dtype).plan(n)

    def check_compile(self, form=None, index_dtype=None) -> None:
        """Compile ``form`` (default: every form, each with its default index dtype) with the
        nvcc on PATH, without a GPU; a C error in the operator raises ScanCompileError with
        the numbered source around it."""
        if form is None and index_dtype is not None:
            raise TypeError("index_dtype= names the dtype of one form's index: give form= too")
        for each in _INDEX_TYPES if form is None else (form,):
            self.kernel(each, index_dtype).check_compile()

    def kernel(self, form: str, index_dtype=None) -> ScanKernel:
        """The ScanKernel of one form ("flags", "offsets", "keys") and index dtype (default:
        bool flags, int64 offsets and keys)."""
        if form not in _INDEX_TYPES:
            raise ValueError(f"form={form!r}: use 'flags', 'offsets' or 'keys'")
        allowed = _INDEX_TYPES[form]
        index_dtype = _DEFAULT_INDEX[form] if index_dtype is None else np.dtype(index_dtype)
        if index_dtype not in allowed:
            raise TypeError(f"{form} has dtype {index_dtype}; use one of "
                            f"{', '.join(d.name for d in allowed)}")
        key = (form, index_dtype)
        if key not in self._kernels:
            c = MASK_C_TYPES[index_dtype]
            helpers = ""
            if form == "flags":
                arguments, head = f"const {c} *flags", "flags[i] != 0"
            elif form == "keys":
                arguments, head = f"const {c} *keys", "i == 0 || keys[i] != keys[i - 1]"
            else:
                arguments = f"const {c} *offsets, long long offset_count"
                head = "scangen_is_offset(offsets, offset_count, i)"
                helpers = _offset_search(c)
            self._kernels[key] = ScanKernel(
                self.dtype, self.operator,
                arguments=f"const scan_t *x, {arguments}, scan_t *out", input_expr="x[i]",
                output_statement=_OUTPUT[self.mode], is_segment_start_expr=head,
                _helpers=helpers, title=f"segmented {self.mode} scan by {form}",
                **self.scan_options)
        return self._kernels[key]

    def __call__(self, x, out=None, *, flags=None, offsets=None, keys=None, stream=None,
                 initial=None):
        """Scan ``x`` segment by segment into ``out`` (new if None) and return ``out``.
        Arrays are 1-D device arrays of one kind (pycuda GPUArray, CuPy, torch, ...; see
        Scan); ``stream`` defaults to the array library's current stream; ``initial``
        replaces the constructor's initial value (every segment starts from it) for this
        call."""
        given = {name: value for name, value in
                 (("flags", flags), ("offsets", offsets), ("keys", keys)) if value is not None}
        if len(given) != 1:
            raise TypeError("give exactly one of flags=, offsets= or keys=")
        (form, index), = given.items()
        call = Call(stream, {"x": x, "out": out, form: index}, writes=("out",))
        x_view, index = call.views["x"], call.views[form]
        check_array("x", x_view, self.dtype)
        if initial is not None:  # a bad one is refused before any work
            self.kernel("flags").initial_argument(initial)
        n = x_view.size
        if out is None:
            out, out_view = call.empty((n,), self.dtype)
        else:
            out_view = call.views["out"]
            check_array("out", out_view, self.dtype, length=n)
        kernel = self.kernel(form, index.dtype)  # refuses an index dtype of another form
        extra = ()
        if form == "offsets":
            check_array(form, index, index.dtype)
            _check_offsets(call.to_host(form), n)
            extra = (np.int64(index.size),)
        else:
            check_array(form, index, index.dtype, length=n)
        if n:
            kernel.launch_converted(
                (x_view.ptr, index.ptr) + extra + (out_view.ptr,),
                n, call.stream, initial)
        return out


def _check_offsets(offsets: np.ndarray, n: int) -> None:
    """CSR offsets: at least [0, n], non-decreasing, from 0 to n."""
    if offsets.size < 1 or offsets[0] != 0 or offsets[-1] != n:
        raise ValueError(f"offsets must run from 0 to len(x) = {n} (CSR starts plus the end), "
                         f"got {offsets[:1].tolist()} .. {offsets[-1:].tolist()}")
    if np.any(np.diff(offsets) < 0):
        where = int(np.flatnonzero(np.diff(offsets) < 0)[0])
        raise ValueError(f"offsets must be non-decreasing; offsets[{where}] = {offsets[where]} "
                         f"> offsets[{where + 1}] = {offsets[where + 1]}")
