"""SegmentedScan: scans that restart at every segment head, given as flags, CSR offsets or
runs of equal keys. The flags and keys forms are each one ScanKernel with an
is_segment_start_expr (so every strategy and algorithm serves them, and operand order is
kept). The offsets form takes one of two routes, by the segments' number:

* segments in tiles of their own, where there are at most a section's worth of tiles of
  them (no more than one segment a section of elements, on average): a ScanKernel of
  int64 adds lays the segments out from the offsets (each one's first tile and start), and
  the scan_segments kernel scans each segment in tiles of its own, combining the values
  alone (scangen.strategies.columns);
* head bits otherwise: a kernel of its own (SegmentHeadsModule,
  templates/segment_heads.cu.j2) sets a bit for each segment's head in n / 8 bytes of
  scratch, and a kernel like the flags form's scans with them (a lane takes its run's
  heads from one word).

Either way the heads kernel checks the offsets first (with no heads to write on the first
route): a segment test that searched the offsets for every element cost several times the
scan, and checking the offsets on the host cost a copy of them and a wait for every call.
The kernels are built on first use of each form and index dtype."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import compile as compiler
from .arith import ceil_div
from .args import Argument, c_parameters
from .heads import HeadBits, HeadFlags, HeadKeys
from .kernel import ScanKernel, SegmentTiles, WholeWarpsError, options_repr
from .interop import Call, check_array
from .lines import normalized_axis
from .modules import Module, ModulePlan, ModulePlanBuilder
from .plan import as_count
from .runtime.contexts import release_at_exit
from .runtime.mapped import ThreadWords
from .runtime.modules import ModuleRuntime
from .scan import _OUTPUT
from .spec import check_mode
from .strategies.base import MAX_GRID, NULL, BufferArg, RuntimeArg
from .strategies.columns import SEGMENTS
from .tuning import SEGMENT_HEADS
from .types import MASK_C_TYPES, element_type

#: The dtypes CSR offsets may have.
_OFFSET_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

#: The rows kernels' argument: the length of the last axis (SegmentedScan.rows_kernel).
_ROW_LENGTH = "row_length"
_ROWS_OF_OFFSETS = ("offsets= are CSR offsets of a 1-D array; along the rows of an N-D array "
                    "give flags= or keys= of x's shape")

#: The forms a segmentation may take, each with the index dtypes it may have.
_INDEX_TYPES = {
    "flags": tuple(MASK_C_TYPES),
    "offsets": _OFFSET_TYPES,
    "keys": tuple(d for d in MASK_C_TYPES if d != np.bool_),
}
#: The index dtype of each form where none is named (plan, check_compile, kernel).
_DEFAULT_INDEX = {"flags": np.dtype(np.bool_), "offsets": np.dtype(np.int64),
                  "keys": np.dtype(np.int64)}

#: The heads kernel's threads a block and blocks per multiprocessor (scangen.tuning).
_HEADS_BLOCK_SIZE = SEGMENT_HEADS.value("block_size")
_HEADS_BLOCKS_PER_SM = SEGMENT_HEADS.value("blocks_per_sm")
#: Offsets-form plans a SegmentedScan keeps (by index dtype and n), so that a repeated
#: call plans nothing.
_PLANS_KEPT = 64
#: The offsets plan's checkpoint after the heads kernel: the call waits for it alone.
_OFFSETS_CHECKED = "offsets checked"
#: The arguments of the offsets form's kernel of segment tiles that lay the segments out.
_LAYOUT = SegmentTiles()
#: The arguments of the offsets form's scan in segment tiles: x, out and the layout.
_TILES_ARGUMENTS = f"const scan_t *x, scan_t *out, {_LAYOUT.arguments}"


@dataclass(frozen=True)
class SegmentHeadsModule(Module):
    """``segment_heads`` (templates/segment_heads.cu.j2): the head bits (32-bit words,
    zeroed first; none where ``heads`` is NULL) of n elements from CSR offsets of
    ``offset_dtype``, a thread an offset; where ``verdict`` is not NULL it also checks the
    offsets and sets ``*verdict`` to 1 if any is bad."""

    template: ClassVar[str] = "segment_heads.cu.j2"
    block_size: ClassVar[int] = _HEADS_BLOCK_SIZE
    offset_dtype: np.dtype

    @property
    def parameters(self) -> tuple[Argument, ...]:
        return (Argument("offsets", MASK_C_TYPES[self.offset_dtype], pointer=True, const=True,
                         restrict=True),
                Argument("heads", "unsigned", pointer=True, restrict=True),
                Argument("verdict", "long long", pointer=True),
                Argument("offset_count", "long long"), Argument("n", "long long"))

    def entry_points(self):
        return (("segment_heads", self.parameters),)

    @property
    def description(self) -> str:
        return f"segment heads from {self.offset_dtype} offsets"

    def context(self) -> dict:
        return dict(offset_c=MASK_C_TYPES[self.offset_dtype], block_size=self.block_size,
                    parameters=c_parameters(self.parameters))


def takes_segment_tiles(n: int, segments: int, section: int) -> bool:
    """Whether the offsets form scans ``n`` elements in ``segments`` segments in tiles of
    their own (of ``section``): where the segments are no more than the sections. More,
    shorter segments ran slower that way than by head bits at every section tried
    (benchmarks/segment_tiles_sections.py; docs/design/decisions.md)."""
    return segments <= ceil_div(n, section)


def head_bytes(n: int) -> int:
    """The bytes of n elements' head bits: a 32-bit word for every 32 elements."""
    return 4 * ceil_div(n, 32)


def _check_offsets_launch(builder: ModulePlanBuilder, module: SegmentHeadsModule, n: int,
                          offsets: int, heads) -> None:
    """The heads kernel's launch over at most ``offsets`` offsets (writing ``heads``, or
    only checking where NULL), then the checkpoint the call waits for to read its
    verdict."""
    builder.launch(
        module, "segment_heads", min(ceil_div(offsets, module.block_size), MAX_GRID),
        module.block_size,
        dict(offsets=BufferArg("offsets"), heads=heads, verdict=BufferArg("verdict"),
             offset_count=RuntimeArg("offset_count"), n=n),
        reads=offsets * module.offset_dtype.itemsize,
        writes=0 if heads is NULL else head_bytes(n),
        blocks_per_sm=_HEADS_BLOCKS_PER_SM,
        why=("bit offsets[k] of heads set where offsets[k] < n, a thread an offset of the "
             "call's <offset_count>, each offset checked against the next where the "
             "call binds a verdict (reads and writes at most, for n + 1 offsets)"
             if heads is not NULL else
             "no heads: each offset of the call's <offset_count> checked against the "
             "next where the call binds a verdict, a thread an offset"))
    builder.checkpoint(_OFFSETS_CHECKED, "a call that checks its offsets waits for the "
                                         "heads kernel's verdict here, while the scan runs")


def _segment_tiles_plan(module: SegmentHeadsModule, layout: ScanKernel, kernel: ScanKernel,
                        n: int, segments: int, title: str) -> ModulePlan:
    """The offsets form over n elements in ``segments`` segments, each in tiles of its own:
    the offsets checked (where the call binds a verdict), ``layout`` (an exclusive scan of
    each segment's tile count) writing each segment's first tile and start, then
    ``kernel`` over them."""
    builder = ModulePlanBuilder()
    if n:
        entries = 8 * (segments + 1)
        tiles = builder.temporary("segment_tiles", entries, "each segment's first tile, in "
                                  "scan order, then the tiles of all")
        starts = builder.temporary("segment_starts", entries, "each segment's first "
                                   "position, in scan order, then n")
        _check_offsets_launch(builder, module, n, segments + 1, NULL)
        builder.scan(layout, segments + 1,
                     dict(offsets=BufferArg("offsets"), elements=n, segment_tiles=tiles,
                          segment_starts=starts),
                     "each segment's first tile (an exclusive scan of its tile count) and "
                     "start")
        initial = RuntimeArg("initial") if kernel.scan_module.hooks.initial else None
        builder.scan(kernel, n, dict(x=BufferArg("x"), out=BufferArg("out"),
                                     segment_tiles=tiles, segment_starts=starts,
                                     segments=segments),
                     "each segment in tiles of its own", initial=initial, layout=segments)
    return builder.build(title, n, [f"{module.description}: {module.block_size} threads a "
                                    f"block, an offset a thread (checking only)"])


def _offsets_plan(module: SegmentHeadsModule, kernel: ScanKernel, n: int,
                  title: str) -> ModulePlan:
    """The offsets form over n elements: the head bits zeroed, the heads kernel (checking
    the offsets where the call binds a verdict), a checkpoint the call waits for to read
    the verdict, then ``kernel`` (SegmentedScan.bits_kernel) over x with those heads."""
    builder = ModulePlanBuilder()
    if n:
        heads = builder.temporary("heads", head_bytes(n), "a head bit an element, from the "
                                                          "offsets")
        builder.zero("heads", head_bytes(n))
        _check_offsets_launch(builder, module, n, n + 1, heads)
        initial = RuntimeArg("initial") if kernel.scan_module.hooks.initial else None
        builder.scan(kernel, n, dict(x=BufferArg("x"), heads=heads, out=BufferArg("out")),
                     "the scan by head bits, segments starting where a bit is set",
                     initial=initial)
    return builder.build(title, n, [f"{module.description}: {module.block_size} threads a "
                                    f"block, an offset a thread"])


class SegmentedScan:
    """A scan that restarts at each segment's first element.

    Call it with exactly one of:

    * ``flags=heads``: a bool or integer array of len(x); nonzero marks a segment's first
      element;
    * ``offsets=starts``: CSR offsets, int32 or int64, of length segments + 1,
      non-decreasing, from 0 to len(x) (empty segments allowed). A kernel first checks the
      offsets. Where the segments are no more than the sections of len(x) (and the
      strategy is auto), each segment is then scanned in tiles of its own: a scan of their
      tile counts lays them out (scratch of 16 bytes a segment), and one kernel scans
      them, combining the values alone. Otherwise the checking kernel also sets each
      segment's head bit in n / 8 bytes of scratch, and a kernel like the flags form's
      scans with them. (Scratch is kept per thread and stream, as the primitives keep theirs.) The
      call queues every step, then waits for the check's verdict alone (the scan runs
      meanwhile, so the GPU does not idle between calls) and raises ValueError naming the
      first bad offset. ``check_offsets=False`` skips the check and the wait: the call
      then returns at once, and bad offsets give a wrong result (they never write outside
      the arrays);
    * ``keys=k``: an integer array of len(x); a segment is a run of equal consecutive keys
      (CUB's scan-by-key).

    ``x`` may also be N-D, scanned along its last axis with flags or keys of its shape:
    each row is scanned on its own, its first element a head (``seg.rows_kernel(form)`` is
    that kernel).

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
    ``"keys"``, and ``index_dtype=`` (default: bool flags, int64 offsets and keys), and
    for offsets ``segments=`` (default 1), which decides the route;
    ``check_compile()`` with no form compiles every module of the three. The offsets
    form's plan is a ModulePlan: the ``segment_heads`` launch, then either the layout's
    scan and the segment tiles' scan, or (the head bits zeroed first) the scan by head
    bits. ``seg.kernel(form, index_dtype)`` is the ScanKernel a form scans with
    (``.source`` of another form: ``seg.kernel("keys", np.int32).source``); for offsets
    that is the segment tiles' kernel, ``seg.segment_tiles_kernel`` (None where the
    options rule it out), whose layout comes from ``seg.layout_kernel(index_dtype)``, or
    with head bits ``seg.bits_kernel``; the heads kernel is
    ``seg.heads_module(index_dtype)`` (``.source``, ``.check_compile()``).
    """

    def __init__(self, dtype, operator="add", *, mode="inclusive", **scan_options):
        check_mode(mode)
        self.etype = element_type(dtype)
        self.mode, self.operator, self.scan_options = mode, operator, scan_options
        self._kernels = {}
        self._plans = {}  # (offsets dtype, n, segments) -> the offsets form's ModulePlan
        self._runtime = ModuleRuntime()
        #: The heads kernel's verdicts on the offsets, in mapped host memory.
        self._verdicts = ThreadWords()
        release_at_exit(self)
        self.kernel("flags")  # validates the operator and options now

    def release_device_memory(self) -> None:
        self._verdicts.clear()

    def __repr__(self):
        return (f"SegmentedScan({self.etype.name}, {self.kernel('flags').spec.operator.name!r}, "
                f"mode={self.mode!r}{options_repr(self.kernel('flags'))})")

    @property
    def dtype(self) -> np.dtype:
        return self.etype.dtype

    @property
    def source(self) -> str:
        """The CUDA of the flags form with bool flags (no GPU needed); another form's is
        ``kernel(form, index_dtype).source``, the offsets' heads kernel's
        ``heads_module(index_dtype).source``."""
        return self.kernel("flags").source

    def plan(self, n, form="flags", index_dtype=None, segments=None):
        """The launches that scan ``n`` elements segmented by ``form`` (no GPU needed): the
        kernel's Plan for flags and keys, a ModulePlan for offsets in ``segments``
        segments (default 1): the heads kernel, then the segment tiles' steps or the scan
        by head bits."""
        index_dtype = _index_dtype(form, index_dtype)
        if form == "offsets":
            n = as_count(n)
            return self._offsets_plan(n, index_dtype,
                                      1 if segments is None else SEGMENTS.check(n, segments))
        if segments is not None:
            raise TypeError("segments= is the offsets form's; give form='offsets' too")
        return self.kernel(form, index_dtype).plan(n)

    def check_compile(self, form=None, index_dtype=None) -> None:
        """Compile ``form`` (default: every form, each with its default index dtype) with the
        nvcc on PATH, without a GPU; a C error in the operator raises ScanCompileError with
        the numbered source around it. The offsets form compiles its heads kernel, the
        scan by head bits and, where the options allow them, the segment tiles' kernels."""
        compiler.check_all_with_nvcc(self.modules_to_compile(form, index_dtype))

    def modules_to_compile(self, form=None, index_dtype=None) -> list:
        """What check_compile compiles, once each: for each form (default: every form,
        each with its default index dtype) its kernel's ScanModule, and for offsets the
        heads module first."""
        if form is None and index_dtype is not None:
            raise TypeError("index_dtype= names the dtype of one form's index: give form= too")
        modules = []
        for each in _INDEX_TYPES if form is None else (form,):
            if each == "offsets":
                found = [self.heads_module(index_dtype), self.bits_kernel.scan_module]
                if self.segment_tiles_kernel is not None:
                    found += [self.layout_kernel(index_dtype).scan_module,
                              self.segment_tiles_kernel.scan_module]
            else:
                found = [self.kernel(each, index_dtype).scan_module]
            modules += [module for module in found if module not in modules]
        return modules

    def heads_module(self, index_dtype=None) -> SegmentHeadsModule:
        """The module whose kernel checks the offsets form's CSR offsets of
        ``index_dtype`` (int32 or int64; default int64) and writes their head bits."""
        return SegmentHeadsModule(_index_dtype("offsets", index_dtype))

    @property
    def segment_tiles_kernel(self) -> ScanKernel | None:
        """The offsets form's kernel that scans each segment in tiles of its own, or None
        where the options rule it out: a strategy named (the segment tiles have a single
        pass of their own), or a block that is not whole warps. Its arguments are x, out
        and the layout (scangen.kernel.SegmentTiles) that layout_kernel writes."""
        if "tiles" not in self._kernels:
            kernel = None
            if self.scan_options.get("strategy", "auto") == "auto":
                options = {k: v for k, v in self.scan_options.items() if k != "strategy"}
                try:
                    kernel = ScanKernel(
                        self.dtype, self.operator, arguments=_TILES_ARGUMENTS,
                        input_expr="x[i]", output_statement=_OUTPUT[self.mode],
                        title=f"segmented {self.mode} scan by offsets, each segment in "
                              f"tiles of its own", _segment_tiles=_LAYOUT, **options)
                except WholeWarpsError:
                    pass  # the head bits' route takes any block
            self._kernels["tiles"] = kernel
        return self._kernels["tiles"]

    def layout_kernel(self, index_dtype=None) -> ScanKernel:
        """The exclusive scan of int64 adds over segments + 1 indices that lays segments
        out from CSR offsets of ``index_dtype`` (int32 or int64; default int64) for
        segment_tiles_kernel, in its scan order: ``segment_tiles[i]``, the tiles of the
        segments before segment i (each takes its length over the section, rounded up; an
        empty one none), and ``segment_starts[i]``, segment i's first position."""
        index_dtype = _index_dtype("offsets", index_dtype)
        key = ("layout", index_dtype)
        if key not in self._kernels:
            section = self.segment_tiles_kernel.spec.section_size
            reverse = self.scan_options.get("reverse", False)
            # Segment i in scan order, its length clamped to [0, elements] (bad offsets in a
            # call that does not check them take no more tiles than there are elements).
            first, end = ("n - 2 - i", "n - 1 - i") if reverse else ("i", "i + 1")
            length = f"max(0LL, min((long long)offsets[{end}] - (long long)offsets[{first}], " \
                     f"elements))"
            start = "elements - (long long)offsets[n - 1 - i]" if reverse else \
                "(long long)offsets[i]"
            self._kernels[key] = ScanKernel(
                np.int64, "add",
                arguments=f"const {MASK_C_TYPES[index_dtype]} *offsets, long long elements, "
                          f"long long *{_LAYOUT.tiles}, long long *{_LAYOUT.starts}",
                input_expr=f"i + 1 < n ? ({length} + {section} - 1) / {section} : 0",
                output_statement=f"{_LAYOUT.tiles}[i] = prev_item; "
                                 f"{_LAYOUT.starts}[i] = {start};",
                title=f"segment tiles of {section} from {index_dtype} offsets")
        return self._kernels[key]

    def kernel(self, form: str, index_dtype=None) -> ScanKernel:
        """The ScanKernel of one form ("flags", "offsets", "keys") and index dtype (default:
        bool flags, int64 offsets and keys). The offsets form scans in segment tiles
        (segment_tiles_kernel) where the options allow it, else with bits_kernel over the
        head bits its heads kernel writes (heads_module): for any offsets dtype this is
        one of those two."""
        index_dtype = _index_dtype(form, index_dtype)
        if form == "offsets":
            return self.segment_tiles_kernel or self.bits_kernel
        return self._index_kernel(form, index_dtype, rows=False)

    def rows_kernel(self, form: str, index_dtype=None) -> ScanKernel:
        """The ScanKernel of the flags or keys form (``index_dtype`` as for kernel) along
        the last axis of an N-D array: every row's first element is a head too, so each
        row's segments are scanned on their own. It takes one more argument after ``out``,
        ``long long row_length``; its heads come with each item (an expression of both),
        not a run at a time as the 1-D form's."""
        index_dtype = _index_dtype(form, index_dtype)
        if form == "offsets":
            raise ValueError(_ROWS_OF_OFFSETS)
        return self._index_kernel(form, index_dtype, rows=True)

    def _index_kernel(self, form: str, index_dtype: np.dtype, rows: bool) -> ScanKernel:
        """The flags or keys form's kernel, of rows (see rows_kernel) or of one array."""
        key = (form, index_dtype, rows)
        if key not in self._kernels:
            heads = (HeadFlags if form == "flags" else HeadKeys)(form)
            arguments = f"const scan_t *x, const {MASK_C_TYPES[index_dtype]} *{form}, " \
                        "scan_t *out"
            if rows:
                arguments += f", long long {_ROW_LENGTH}"
                given = dict(is_segment_start_expr=f"i % {_ROW_LENGTH} == 0 || "
                                                   f"{heads.expression}")
                title = f"segmented {self.mode} scan of rows by {form}"
            else:
                given = dict(_segment_heads=heads)
                title = f"segmented {self.mode} scan by {form}"
            self._kernels[key] = ScanKernel(
                self.dtype, self.operator, arguments=arguments, input_expr="x[i]",
                output_statement=_OUTPUT[self.mode], title=title, **given,
                **self.scan_options)
        return self._kernels[key]

    @property
    def bits_kernel(self) -> ScanKernel:
        """The offsets form's scan where its segments do not take tiles of their own: as
        the flags form's, its heads the bits (scangen.kernel.HeadBits) of ``heads``, 32-bit
        words that heads_module's kernel sets from the offsets."""
        if "bits" not in self._kernels:
            self._kernels["bits"] = ScanKernel(
                self.dtype, self.operator,
                arguments="const scan_t *x, const unsigned *heads, scan_t *out",
                input_expr="x[i]", output_statement=_OUTPUT[self.mode],
                title=f"segmented {self.mode} scan by head bits",
                _segment_heads=HeadBits("heads"), **self.scan_options)
        return self._kernels["bits"]

    def _offsets_plan(self, n: int, index_dtype: np.dtype, segments: int) -> ModulePlan:
        tiles = self.segment_tiles_kernel
        if tiles is not None and not takes_segment_tiles(n, segments, tiles.spec.section_size):
            tiles = None
        key = (index_dtype, n, segments if tiles else None)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            title = f"segmented {self.mode} scan by {index_dtype} offsets"
            if tiles is None:
                plan = _offsets_plan(self.heads_module(index_dtype), self.bits_kernel, n,
                                     title + " through head bits")
            else:
                plan = _segment_tiles_plan(self.heads_module(index_dtype),
                                           self.layout_kernel(index_dtype), tiles, n,
                                           segments, title + " in segment tiles")
            self._plans[key] = plan
        return plan

    def __call__(self, x, out=None, *, flags=None, offsets=None, keys=None, stream=None,
                 initial=None, check_offsets=True, axis=-1):
        """Scan ``x`` segment by segment into ``out`` (new if None) and return ``out``.
        Arrays are device arrays of one kind (pycuda GPUArray, CuPy, torch, ...; see Scan),
        C-contiguous; ``stream`` defaults to the array library's current stream;
        ``initial`` replaces the constructor's initial value (every segment starts from it)
        for this call. ``check_offsets=False``: see the class docstring.

        An N-D ``x`` is scanned along its last axis (``axis=-1``, the one it takes), each
        row on its own: a row's first element starts a segment, and ``flags`` or ``keys``
        (of x's shape) start the others; offsets are a 1-D array's only."""
        given = {name: value for name, value in
                 (("flags", flags), ("offsets", offsets), ("keys", keys)) if value is not None}
        if len(given) != 1:
            raise TypeError("give exactly one of flags=, offsets= or keys=")
        (form, index), = given.items()
        call = Call(stream, {"x": x, "out": out, form: index}, writes=("out",))
        return call.returned(self._scan(call, form, out, axis, initial, check_offsets))

    def _scan(self, call, form, out, axis, initial, check_offsets):
        """__call__'s work on its Call: returns ``out``, made where None."""
        x_view, index = call.views["x"], call.views[form]
        if len(x_view.shape) == 0:
            raise ValueError("x must have at least one dimension, got a 0-d array")
        if len(x_view.shape) != 1:
            return self._scan_rows(call, form, x_view, index, out, axis, initial)
        normalized_axis(x_view.shape, axis)  # a bad axis is refused for 1-D x too
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
        if form == "offsets":
            check_array(form, index, index.dtype)
            if index.size <= 1 or not n:  # nothing to launch: the host checks them
                _check_offsets(call.to_host(form), n)
                return out
            self._scan_by_offsets(call, x_view, index, out_view, initial, check_offsets)
            return out
        check_array(form, index, index.dtype, length=n)
        if n:
            kernel.launch_converted((x_view.ptr, index.ptr, out_view.ptr), n, call.stream,
                                    initial)
        return out

    def _scan_rows(self, call, form, x, index, out, axis, initial):
        """Scan the rows of an N-D ``x`` (views, as __call__ has them) along the last
        axis, each row's segments on their own; return ``out``."""
        shape = tuple(x.shape)
        if normalized_axis(shape, axis) != len(shape) - 1:
            raise ValueError(f"SegmentedScan scans an N-D array along its last axis only "
                             f"(axis -1), not axis {axis}: make the axis the last one "
                             f"(a contiguous copy of x.swapaxes({axis}, -1)) first")
        if form == "offsets":
            raise ValueError(_ROWS_OF_OFFSETS)
        _check_shaped("x", x, shape, self.dtype)
        _check_shaped(form, index, shape)
        kernel = self.rows_kernel(form, index.dtype)  # refuses an index dtype of another form
        if initial is not None:  # a bad one is refused before any work
            kernel.initial_argument(initial)
        if out is None:
            out, out_view = call.empty(shape, self.dtype)
        else:
            out_view = call.views["out"]
            _check_shaped("out", out_view, shape, self.dtype)
        n, row_length = x.size, shape[-1]
        if n == 0:
            return out
        if n == row_length:  # one row: the 1-D form, which reads its heads a run at a time
            kernel = self.kernel(form, index.dtype)
            kernel.launch_converted((x.ptr, index.ptr, out_view.ptr), n, call.stream, initial)
        else:
            kernel.launch_converted((x.ptr, index.ptr, out_view.ptr, row_length), n,
                                    call.stream, initial)
        return out

    def _scan_by_offsets(self, call, x, offsets, out, initial, check_offsets) -> None:
        """Queue the offsets plan; with ``check_offsets``, wait for the heads kernel's
        verdict and raise if the offsets are bad."""
        n = x.size
        verdict = self._verdicts.get() if check_offsets else None
        if verdict is not None:
            verdict.value = 0  # this thread's last call read it before returning
        events = self._runtime.run(
            self._offsets_plan(n, offsets.dtype, offsets.size - 1),
            {"x": x, "offsets": offsets, "out": out, "verdict": verdict}, call.stream,
            dict(offset_count=offsets.size, initial=initial))
        if verdict is None:
            return
        events[_OFFSETS_CHECKED].synchronize()
        if verdict.value:
            # The rare path: find which offset is bad, for the message.
            _check_offsets(call.to_host("offsets"), n)
            raise ValueError("offsets are not CSR offsets of len(x) elements (the device "
                             "found a bad one, which was gone when the host looked: were "
                             "they being written meanwhile?)")


def _check_shaped(name, view, shape, dtype=None) -> None:
    """An array view of x's ``shape`` (and ``dtype``), or a clear error."""
    if dtype is not None and view.dtype != dtype:
        raise TypeError(f"{name} has dtype {view.dtype}; expected {dtype}")
    if tuple(view.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(view.shape)}; expected x's shape {shape}")


def _index_dtype(form: str, index_dtype) -> np.dtype:
    """The index dtype of ``form`` (its default where None), refused if the form takes
    no such dtype."""
    if form not in _INDEX_TYPES:
        raise ValueError(f"form={form!r}: use 'flags', 'offsets' or 'keys'")
    allowed = _INDEX_TYPES[form]
    index_dtype = _DEFAULT_INDEX[form] if index_dtype is None else np.dtype(index_dtype)
    if index_dtype not in allowed:
        raise TypeError(f"{form} has dtype {index_dtype}; use one of "
                        f"{', '.join(d.name for d in allowed)}")
    return index_dtype


def _check_offsets(offsets: np.ndarray, n: int) -> None:
    """CSR offsets: at least [0, n], non-decreasing, from 0 to n."""
    if offsets.size < 1 or offsets[0] != 0 or offsets[-1] != n:
        raise ValueError(f"offsets must run from 0 to len(x) = {n} (CSR starts plus the end), "
                         f"got {offsets[:1].tolist()} .. {offsets[-1:].tolist()}")
    if np.any(np.diff(offsets) < 0):
        where = int(np.flatnonzero(np.diff(offsets) < 0)[0])
        raise ValueError(f"offsets must be non-decreasing; offsets[{where}] = {offsets[where]} "
                         f"> offsets[{where + 1}] = {offsets[where + 1]}")
