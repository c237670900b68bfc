"""ScanKernel: the one generic scan every other piece is built from.

A ScanKernel scans values computed by ``input_expr`` at each index ``i`` with an associative
operator, and runs ``output_statement`` for each ``i`` with the inclusive prefix ``item``,
the exclusive prefix ``prev_item`` and the total ``last_item``. ``Scan`` is one client
(``out[i] = item``); a compaction is another (``if (item != prev_item) out[prev_item] = x[i];``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .args import (C_SCALARS, INITIAL_ARGUMENT, Argument, ArgumentError, convert_scalar,
                   parse_arguments)
from . import compile as compiler
from .heads import HeadBits, HeadFlags, HeadRows, SegmentHeads
from .interop import convert_arguments
from .lines import LineKernels
from .families import FAMILIES, SCAN_TILES, SCAN_TILES_PERSISTENT
from . import tuning as tuning_table
from .ops import resolve_operator
from .plan import make_plan
from .render import render
from .runtime.launcher import Runtime
from .spec import WARP_SIZE, ScanSpec, as_flag, make_spec
from .types import UNSIGNED_C_TYPES, ElementType, StructType, element_type, prerequisites
from .strategies import Strategy, strategy_for
from .strategies.columns import COLUMNS, SEGMENTS
from .strategies.base import PlanOptions
from .usercode import UserCodeError, check_code, identifiers, strip_literals_and_comments

#: The names an output statement may read that cost something where it does (the others it
#: sees, item and prev_item, always exist): ``last_item``, the total, which only some
#: strategies know before their output pass; ``last_counted`` and ``prev_last_counted``,
#: for which a counting scan tracks the last counted index. Hooks.library_names_used says
#: which of them an output statement names (scangen.usercode.identifiers: as C tokens, not
#: in comments or literals, not as members).
LIBRARY_OUTPUT_NAMES = frozenset({"last_item", "last_counted", "prev_last_counted"})

#: The names an output statement may read that say where i is among the lines of a scan
#: (LinePlaces), and what each means.
LINE_PLACE_NAMES = {"step": "i's place in its line's scan", "line": "the index of i's line"}


def counting_condition(test: str, keep: bool = True) -> str:
    """A counting ScanKernel's ``input_expr``: 1 where the C condition ``test`` holds
    (``keep``), or where it does not, else 0."""
    return f"({test if keep else f'!({test})'}) ? 1 : 0"


@dataclass(frozen=True)
class MaskInput:
    """The input of a counting scan that counts the nonzero elements of an integer or bool
    array argument (``keep``), or its zero ones: what a primitive passes a ScanKernel as
    ``_input=`` instead of an ``input_expr`` (Select's flags). The expression comes from
    here, so the module may count the mask by other means (reduce_then_scan's first pass
    loads it 16 bytes a lane: ScanModule.counted_mask) without reading the expression."""

    #: The name of the pointer argument that holds the mask.
    argument: str
    keep: bool = True

    @property
    def input_expr(self) -> str:
        return counting_condition(f"{self.argument}[i] != 0", self.keep)


@dataclass(frozen=True)
class HeldElement:
    """The element a counting scan's hooks read at each index, ``argument[i]`` of a pointer
    argument: what a primitive passes a ScanKernel as ``_element=`` (the x of Select's
    and Partition's predicates). input_expr and output_statement name it ``element``.
    Where the module counts by ballots and a thread's elements fit its registers
    (ScanModule.holds_elements), each is loaded once and held from its ballot to its
    output statement; elsewhere the hooks read it where they run, as ``argument[i]``."""

    #: The name of the pointer argument whose elements the hooks read.
    argument: str
    #: Its elements' dtype (an element type of scangen.types): their size decides whether
    #: a thread holds them.
    dtype: np.dtype

    @property
    def itemsize(self) -> int:
        return element_type(self.dtype).dtype.itemsize


#: The name HeldElement gives the element in the hooks.
ELEMENT_NAME = "element"


@dataclass(frozen=True)
class PlainArrays:
    """Hooks that read ``input[i]`` (as the scan type, or converted to it by
    ``input_expr``) and write ``output[i] = item`` (or ``prev_item``, exclusive): what Scan
    passes as ``_plain_arrays=``, so the single pass may move whole 16-byte words of both
    arrays (ScanModule.vector_runs) instead of running the hooks one element at a time."""

    #: The names of the pointer arguments read and written.
    input: str
    output: str
    exclusive: bool
    #: The input expression: ``input[i]``, or its conversion to the scan type.
    input_expr: str = ""
    #: The C type and size of the input's elements, where they are not the scan type's.
    input_c: str = "scan_t"
    input_itemsize: int = 0

    def __post_init__(self):
        if not self.input_expr:
            object.__setattr__(self, "input_expr", f"{self.input}[i]")

    @property
    def output_statement(self) -> str:
        return f"{self.output}[i] = {'prev_item' if self.exclusive else 'item'};"


@dataclass(frozen=True)
class SegmentTiles:
    """Segments of any lengths, each scanned in tiles of its own (the scan_segments kernel,
    scangen.strategies.columns), with no heads travelling with the values: what
    SegmentedScan's offsets form passes a ScanKernel as ``_segment_tiles=``. It names the
    hooks' three arguments that lay the segments out, in scan order (reversed for a
    reverse scan): ``tiles``, a ``const long long *`` of segments + 1 entries, each
    segment's first tile and then the tiles of all (an exclusive scan of each segment's
    tile count); ``starts``, a ``const long long *`` of segments + 1 entries, each
    segment's first position and then n; ``segments``, a ``long long``, their number."""

    tiles: str = "segment_tiles"
    starts: str = "segment_starts"
    segments: str = "segments"

    @property
    def arguments(self) -> str:
        """The three arguments' declarations, in this order (for a client's
        ``arguments``)."""
        return (f"const long long *{self.tiles}, const long long *{self.starts}, "
                f"long long {self.segments}")

    def check(self, arguments) -> None:
        """Raise unless ``arguments`` declare the three as ``arguments`` says."""
        declared = {a.name: a for a in arguments}
        for name, pointer in ((self.tiles, True), (self.starts, True),
                              (self.segments, False)):
            found = declared.get(name)
            if found is None or found.c_type != "long long" or found.pointer != pointer:
                raise ValueError(f"_segment_tiles needs the arguments {self.arguments}; "
                                 f"{name!r} is missing or of another type")


@dataclass(frozen=True)
class LinePlaces:
    """Where the output statement's ``step`` and ``line`` come from. ``step``: i's place
    in its line's scan, 0 where the line's scan starts (its first element; its last for a
    reverse scan); ``line``: which line i is on, i's index with the scanned axis taken out
    (the lines in the array's order). ``step`` and ``line``: C expressions of ``position``
    (i's place in the scan order of the whole array) and ``n`` in UserIO that give them
    where a kernel does not say them (a 1-D scan's one line is the array; the rows kernel
    divides by the row length); None: every kernel of the module says them (a column's
    thread knows its column and counts its steps, a line's tile knows its line)."""

    step: str | None = None
    line: str | None = None


class WholeWarpsError(ValueError):
    """A kernel of lines (along columns, rows or segment tiles) asked of a spec whose
    blocks are not whole warps: what a client with another way to scan catches."""


@dataclass(frozen=True)
class Counting:
    """What a counting scan (``counts=True``: ``input_expr`` is 0 or 1, the scan adds
    integers) needs besides its counts."""

    #: The output statement reads ``last_counted`` or ``prev_last_counted``: the module then
    #: combines (count, last counted index + 1) pairs packed in 64 bits, not counts.
    last_counted: bool = False
    #: The input is a mask's elements (MaskInput); None: ``input_expr`` is the user's.
    mask: MaskInput | None = None
    #: The hooks read one element per index (HeldElement); None: they read what they name.
    element: HeldElement | None = None


@dataclass(frozen=True)
class Hooks:
    """What is scanned and what becomes of the results."""

    arguments: tuple[Argument, ...]
    input_expr: str
    output_statement: str
    preamble: str = ""
    #: Shown in the module header and in plans.
    title: str = "ScanKernel"
    #: A C bool expression: a new segment starts at i (None: one segment, the whole array).
    is_segment_start_expr: str | None = None
    #: Scan from the last element to the first (a suffix scan), operands in array order.
    reverse: bool = False
    #: The last argument is ``scangen_initial``, combined first (in scan order) into every
    #: item, prev_item and last_item.
    initial: bool = False
    #: A counting scan (``counts=True``) and what it needs; None: the scan combines values.
    counting: Counting | None = None
    #: Element types (scangen.types) other than the scan type that the arguments or the
    #: code name: the module includes their headers and declares them first.
    types: tuple = ()
    #: C that a library client of ScanKernel writes around user code (a primitive's
    #: predicate as a function): emitted before the user's preamble, outside its markers,
    #: so an error there is not blamed on the user; user code inside it carries markers of
    #: its own.
    helpers: str = ""
    #: Which of LIBRARY_OUTPUT_NAMES the output statement names, found once, when the
    #: hooks are made (make_hooks).
    library_names_used: frozenset = frozenset()
    #: The segment heads are a flags argument's nonzero elements (HeadFlags), where a
    #: keys argument changes (HeadKeys), every row length (HeadRows) or a words argument's
    #: set bits (HeadBits); is_segment_start_expr is then its expression.
    #: None: the expression is the user's.
    segment_heads: SegmentHeads | None = None
    #: The indices are an (outer, axis_length, axis_stride) C-contiguous array scanned along
    #: its middle axis, each column (a fixed outer and inner position) on its own: a
    #: scan along any axis but the last of an N-D array (scangen.strategies.columns). The
    #: hooks still see ``i``, the element's index in the array.
    columns: bool = False
    #: The input is a plain array read and the output a plain array write (PlainArrays), as
    #: input_expr and output_statement say; None: the hooks are the user's.
    plain_arrays: PlainArrays | None = None
    #: The indices are segments of any lengths laid out by three of the arguments
    #: (SegmentTiles), each scanned on its own in tiles of its own (scangen.strategies.
    #: columns); None: not so.
    segment_tiles: SegmentTiles | None = None

    @property
    def counts(self) -> bool:
        return self.counting is not None

    @property
    def uses_last_item(self) -> bool:
        return "last_item" in self.library_names_used

    @property
    def line_places(self) -> LinePlaces | None:
        """Where the output statement's ``step`` and ``line`` come from; None: it has
        neither (the segments of the user's heads, whose starts the scan does not track)."""
        if self.columns or self.segment_tiles is not None:
            return LinePlaces()
        if isinstance(self.segment_heads, HeadRows):
            row_length = self.segment_heads.argument
            return LinePlaces(f"position % {row_length}",
                              f"index_at(position, n) / {row_length}")
        if self.is_segment_start_expr is not None:
            return None
        return LinePlaces("position", "0")


_NO_INITIAL = "this kernel was built without initial=; build it with one (any value) to " \
              "pass one per call"

#: The parameter names of the kernel families (scangen.families), which sit beside the user's
#: arguments in every user-io entry point.
ENTRY_POINT_NAMES = frozenset(p.name for family in FAMILIES for p in family.parameters)


def make_hooks(arguments, input_expr, output_statement, preamble="", title="ScanKernel",
               is_segment_start_expr=None, reverse=False, initial_type=None, counts=False,
               types=(), helpers="", input=None, segment_heads=None, columns=False,
               plain_arrays=None, segment_tiles=None, element=None):
    """Validate the hooks. ``initial_type`` (the scan's element type) appends the
    ``scangen_initial`` argument that carries an initial value; ``types`` are dtypes (or
    element types) whose C types the code names besides the scan type; ``input`` (a
    MaskInput, for a library client) replaces ``input_expr``, ``segment_heads`` (a
    scangen.heads.SegmentHeads) ``is_segment_start_expr``; ``columns`` scans along the middle
    axis of an (outer, axis_length, axis_stride) array (Hooks.columns); ``plain_arrays`` (a
    PlainArrays) says that input_expr and output_statement are its plain read and write;
    ``segment_tiles`` (a SegmentTiles) scans segments of any lengths, each in tiles of its
    own (Hooks.segment_tiles); ``element`` (a HeldElement) names the element a counting
    scan's hooks read at each index."""
    parsed = arguments if isinstance(arguments, tuple) else parse_arguments(arguments)
    clashes = [a.name for a in parsed if a.name in ENTRY_POINT_NAMES]
    if clashes:
        raise ArgumentError(
            f"argument name(s) {', '.join(map(repr, clashes))} are reserved: scangen's kernels "
            f"take parameters of those names ({', '.join(sorted(ENTRY_POINT_NAMES))}); "
            "rename yours")
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, not {type(title).__name__}")
    title = " ".join(title.split())  # one line: it goes into a // comment
    reverse, counts = as_flag("reverse", reverse), as_flag("counts", counts)
    if input is not None:
        _check_mask(input, parsed, input_expr, counts)
        input_expr = input.input_expr
    check_code(input_expr, "input_expr", expression=True)
    check_code(output_statement, "output_statement", expression=False)
    check_code(preamble, "preamble", expression=False)
    _check_preamble_macros(preamble)
    if segment_heads is not None:
        if not isinstance(segment_heads, SegmentHeads):
            raise TypeError(f"_segment_heads must be a scangen.heads.SegmentHeads (HeadFlags, "
                            f"HeadKeys, HeadRows or HeadBits), not "
                            f"{type(segment_heads).__name__}")
        what = type(segment_heads).__name__
        if is_segment_start_expr is not None:
            raise TypeError(f"give is_segment_start_expr or _segment_heads (a {what}), "
                            f"not both")
        if isinstance(segment_heads, HeadRows):
            _check_row_length(parsed, segment_heads.argument)
        else:
            _check_integer_pointer(parsed, segment_heads.argument, what,
                                   words=isinstance(segment_heads, HeadBits))
        is_segment_start_expr = segment_heads.expression
    if is_segment_start_expr is not None:
        is_segment_start_expr = check_code(is_segment_start_expr, "is_segment_start_expr",
                                           expression=True).strip()
    if plain_arrays is not None and (
            not isinstance(plain_arrays, PlainArrays) or
            (input_expr.strip(), output_statement.strip()) !=
            (plain_arrays.input_expr, plain_arrays.output_statement)):
        raise ValueError(f"_plain_arrays={plain_arrays!r} does not describe input_expr "
                         f"{input_expr!r} and output_statement {output_statement!r}")
    names_used = identifiers(output_statement) & LIBRARY_OUTPUT_NAMES
    columns = as_flag("columns", columns)
    if columns and (counts or is_segment_start_expr is not None or names_used):
        raise ValueError("a scan along columns takes no segments, counts, last_item or "
                         "last_counted: each column is a scan of its own")
    if segment_tiles is not None:
        if not isinstance(segment_tiles, SegmentTiles):
            raise TypeError(f"_segment_tiles must be a scangen.kernel.SegmentTiles, not "
                            f"{type(segment_tiles).__name__}")
        if columns or counts or is_segment_start_expr is not None or names_used:
            raise ValueError("a scan of segment tiles takes no columns, segment heads, "
                             "counts, last_item or last_counted: each segment is a scan "
                             "of its own")
        segment_tiles.check(parsed)
    if element is not None:
        _check_element(element, parsed, counts)
    counting = None
    if counts:
        counting = Counting(
            last_counted=not names_used.isdisjoint({"last_counted", "prev_last_counted"}),
            mask=input, element=element)
    if initial_type is not None:
        # A type the struct module has no code for (struct, complex, bfloat16) goes by bytes.
        raw = None if initial_type.c_name in C_SCALARS else initial_type
        parsed += (Argument(INITIAL_ARGUMENT, initial_type.c_name, value_type=raw),)
    if isinstance(types, (str, np.dtype, type)):
        types = (types,)
    types = tuple(t if isinstance(t, (ElementType, StructType)) else element_type(t)
                  for t in types)
    hooks = Hooks(parsed, input_expr.strip(), output_statement.strip(), preamble.strip(),
                  title, is_segment_start_expr, reverse, initial_type is not None, counting,
                  types, helpers.strip(), names_used, segment_heads, columns, plain_arrays,
                  segment_tiles)
    _check_line_places(hooks)
    return hooks


def _check_line_places(hooks) -> None:
    """``step`` and ``line`` (LinePlaces) read where they mean what the docs say: in the
    output statement, of hooks whose kernels know them (Hooks.line_places), and with no
    name of the user's that they hide."""
    output_names, preamble_names = identifiers(hooks.output_statement), \
        identifiers(hooks.preamble)
    elsewhere = {piece: identifiers(code) for piece, code in (
        ("input_expr", hooks.input_expr), ("is_segment_start_expr",
                                           hooks.is_segment_start_expr)) if code is not None}
    for name, meaning in LINE_PLACE_NAMES.items():
        if name in output_names:
            if name in preamble_names:
                raise ValueError(f"the output statement reads {name}, {meaning}, but the "
                                 f"preamble names a {name} of its own, which it hides "
                                 "there; rename yours")
            if hooks.line_places is None:
                raise ValueError(f"the output statement of a segmented scan cannot read "
                                 f"{name}: the scan does not track where a segment starts "
                                 "(lines of one length have it: scan them along an axis, "
                                 "axis=)")
        for piece, names in elsewhere.items():
            if name in names and name not in preamble_names:
                raise ValueError(f"{piece} reads {name}, which only the output statement "
                                 f"sees ({meaning})")


def _check_element(element, arguments, counts) -> None:
    """A library client's HeldElement: for a counting scan, naming a pointer argument of its
    dtype, with no argument named as the element."""
    if not isinstance(element, HeldElement):
        raise TypeError(f"_element must be a scangen.kernel.HeldElement, not "
                        f"{type(element).__name__}")
    if not counts:
        raise ValueError("_element (a HeldElement) is for counting scans (counts=True)")
    if any(a.name == ELEMENT_NAME for a in arguments):
        raise ArgumentError(f"argument name {ELEMENT_NAME!r} is the held element's (_element); "
                            f"rename it")
    declared = next((a for a in arguments if a.name == element.argument), None)
    c_type = element_type(element.dtype).c_name
    if declared is None or not declared.pointer or declared.c_type != c_type:
        raise ValueError(f"_element names {element.argument!r}, which must be a pointer "
                         f"argument to {c_type}")


def _check_mask(mask, arguments, input_expr, counts) -> None:
    """A library client's MaskInput: the input of a counting scan, in place of input_expr,
    naming a pointer argument to integers or bools."""
    if not isinstance(mask, MaskInput):
        raise TypeError(f"_input must be a scangen.kernel.MaskInput, not {type(mask).__name__}")
    if input_expr is not None:
        raise TypeError("give input_expr or _input (a MaskInput), not both")
    if not counts:
        raise ValueError(f"a MaskInput ({mask.argument!r}) is an input to count: pass "
                         f"counts=True")
    _check_integer_pointer(arguments, mask.argument, "MaskInput")


def _check_integer_pointer(arguments, name: str, what: str, words: bool = False) -> None:
    """The argument a typed description (``what``) names: a pointer to integers or bools
    (``words``: to 32-bit unsigned integers)."""
    argument = next((a for a in arguments if a.name == name), None)
    if argument is None:
        raise ArgumentError(f"the {what} names {name!r}, which is none of the "
                            f"arguments ({', '.join(a.name for a in arguments)})")
    dtype = argument.scalar_dtype
    if words:
        if not argument.pointer or dtype != np.uint32:
            raise ArgumentError(f"the {what}'s {argument.described} must point to unsigned "
                                f"32-bit words")
    elif not argument.pointer or dtype is None or dtype.kind not in "biu":
        raise ArgumentError(f"the {what}'s {argument.described} must point to integers "
                            f"or bools")


def _check_row_length(arguments, name: str) -> None:
    """The argument a HeadRows names: a ``long long`` scalar."""
    argument = next((a for a in arguments if a.name == name), None)
    if argument is None or argument.pointer or argument.c_type != "long long":
        raise ArgumentError(f"the HeadRows names {name!r}, which must be a long long scalar "
                            f"argument")


def _check_preamble_macros(preamble: str) -> None:
    """Refuse a macro of the preamble that names one of LIBRARY_OUTPUT_NAMES: scangen learns
    which of them the output statement reads from the statement's own text, so a name
    reached through a macro would be missed (last_item read where no total is known)."""
    # Lines spliced and comments gone first, as the compiler does before it reads directives.
    for line in strip_literals_and_comments(preamble.replace("\\\n", "")).splitlines():
        directive = line.strip()
        if directive[:1] != "#" or directive[1:].split(None, 1)[:1] != ["define"]:
            continue
        used = sorted(identifiers(directive[1:]) & LIBRARY_OUTPUT_NAMES)
        if used:
            raise UserCodeError(
                f"preamble: a macro names {', '.join(used)}, which scangen finds only where "
                f"the output statement names it itself; write it in output_statement: "
                f"{directive!r}")


@dataclass(frozen=True)
class ScanModule:
    """Everything that changes the binary: the scan (type, operator, algorithm, section,
    strategy, tuning) and the hooks. Hashable: it keys the compile and plan caches."""

    scan: ScanSpec
    hooks: Hooks

    def __post_init__(self):
        self.strategy  # raises if the strategy cannot serve the hooks (last_item)
        self.prerequisites  # raises if two struct types would share a C name
        if self.scan.segmented != (self.hooks.is_segment_start_expr is not None):
            raise ValueError("a segmented spec needs is_segment_start_expr, and only it")
        if self.hooks.counts:
            scan = self.scan
            if scan.etype.dtype.kind not in "iu" or scan.operator != resolve_operator("add") \
                    or scan.segmented:
                raise ValueError(
                    f"counts=True counts with add over an integer type, without segments; "
                    f"this kernel scans {scan.etype.name} with {scan.operator.name!r}"
                    f"{' in segments' if scan.segmented else ''}")
        if (self.hooks.columns or self.hooks.segment_tiles) and \
                self.scan.block_size % WARP_SIZE:
            raise WholeWarpsError(
                f"a scan along columns runs blocks of whole warps; this spec's block has "
                f"{self.scan.block_size} threads (section {self.scan.section_size} of "
                f"{self.scan.algorithm}): choose a larger section or warp_shuffle")
        if self.tracks_last_counted and (scan.etype.dtype.itemsize != 8 or self.hooks.reverse):
            raise ValueError(
                "an output statement that reads (prev_)last_counted needs a counting scan of "
                "int64 or uint64 (the count and the index share one 8-byte value) in array "
                f"order (not reverse); this one scans {scan.etype.name}"
                f"{' in reverse' if self.hooks.reverse else ''}")

    @property
    def prerequisites(self) -> tuple[tuple, str]:
        """``(headers, declarations)`` of the scan type and of the hooks' other types."""
        return prerequisites((self.scan.etype, *self.hooks.types))

    @property
    def tracks_last_counted(self) -> bool:
        """Whether the module tracks the last counted index (a counting scan whose output
        statement reads ``last_counted`` or ``prev_last_counted``): its machinery then
        combines (count, last counted index + 1) pairs packed in 64 bits, not counts."""
        return self.hooks.counting is not None and self.hooks.counting.last_counted

    @property
    def counts_by_ballots(self) -> bool:
        """Whether the user-io kernels count with warp ballots (counts=True, blocks of whole
        warps); otherwise the 0s and 1s are scanned as values, with the same results."""
        return self.hooks.counts and self.scan.block_size % WARP_SIZE == 0

    @property
    def holds_elements(self) -> bool:
        """Whether the user-io kernels hold each index's element (HeldElement) in registers
        from its ballot to its output statement: a module counting by ballots whose
        thread's elements take at most tuning.HELD_ELEMENT_BYTES. Otherwise the hooks load
        the element where they run (where both read it, twice)."""
        element = self.hooks.counting.element if self.hooks.counting else None
        return element is not None and self.counts_by_ballots and \
            self.scan.items_per_thread * element.itemsize <= tuning_table.HELD_ELEMENT_BYTES

    @property
    def counted_mask(self) -> tuple[str, str, bool] | None:
        """(mask argument, unsigned C type of its elements' size, keep) where the input is
        a mask (Counting.mask: Select's flags) that a module counting by ballots, in array
        order and without last_counted, may load 16 bytes a lane: its elements pack whole
        into 16 bytes and a section into its threads' 16-byte loads. reduce_then_scan's
        first pass then counts whole, aligned sections from those loads instead of one
        element at a time. None otherwise (the mask is counted by ballots, as any input)."""
        counting = self.hooks.counting
        if counting is None or counting.mask is None or not self.counts_by_ballots or \
                counting.last_counted or self.hooks.reverse:
            return None
        mask = counting.mask
        # make_hooks checked that it names a pointer to integers or bools
        dtype = next(a for a in self.hooks.arguments if a.name == mask.argument).scalar_dtype
        if self.scan.section_size % (16 // dtype.itemsize * self.scan.block_size):
            return None
        # counted in the unsigned word of the mask's size, 16 bytes a load
        return mask.argument, UNSIGNED_C_TYPES[dtype.itemsize], mask.keep

    @property
    def run_heads(self) -> tuple[str, str, str] | None:
        """``(form, argument, C type of its elements)`` where the segment heads are given
        typed (Hooks.segment_heads: ``"flags"`` for one-byte HeadFlags, ``"keys"`` for
        HeadKeys, ``"rows"`` for HeadRows, ``"bits"`` for HeadBits) and the single pass
        moves warp runs in array order (of 4, 8 or 16 items for flags and keys, at most
        32 for bits): each lane then reads its run's flags or keys in a few wide loads (its
        bits in one), or takes one remainder by the row length, and finds the heads
        itself, instead of every item reading (or dividing for) its own,
        which cost the scan as much as its values did. None otherwise (the heads come with
        each item). A reverse scan's runs are in scan order, which the arrays of flags, keys
        and bits are not read in; its rows' heads still fall where the position in scan
        order is a multiple of the row length (the array holds whole rows)."""
        heads = self.hooks.segment_heads
        if heads is None or not self.moves_warp_runs:
            return None
        if self.hooks.reverse and not isinstance(heads, HeadRows):
            return None
        argument = next(a for a in self.hooks.arguments if a.name == heads.argument)
        if isinstance(heads, HeadRows):
            return "rows", heads.argument, argument.c_type
        if isinstance(heads, HeadBits):
            # a run (a power of two of items, starting a multiple of its length into the
            # array) lies within one word where it is at most a word's bits
            if self.scan.items_per_thread > 32:
                return None
            return "bits", heads.argument, argument.c_type
        if self.scan.items_per_thread not in (4, 8, 16):
            return None
        if isinstance(heads, HeadFlags):
            if argument.scalar_dtype.itemsize != 1:
                return None
            return "flags", heads.argument, argument.c_type
        return "keys", heads.argument, argument.c_type

    @property
    def counted_sections_per_block(self) -> int:
        """Sections each block of reduce_then_scan's first pass counts over the user's
        input: Tuning.mask_sections_per_block where the input is a mask (counted_mask),
        else one."""
        return self.scan.tuning.mask_sections_per_block if self.counted_mask else 1

    @property
    def moves_warp_runs(self) -> bool:
        """Whether the single-pass tile kernel moves values warp by warp (ScanSpec.
        uses_warp_runs); a counting module's single pass counts ballots and moves no values."""
        return self.scan.uses_warp_runs and not self.counts_by_ballots

    @property
    def vector_runs(self) -> PlainArrays | None:
        """The plain arrays the single pass moves in 16-byte words, a run of items a lane
        (Tuning.tile_vector_runs, on warp runs): where the hooks are a plain read and write
        (Hooks.plain_arrays) of a scan with no segments, counts, reverse, initial value or
        columns, whose runs fill whole 16-byte words (the input's whole 4-byte words at
        least: vector_input_word), in static shared memory. Each lane
        then loads its run, scans it in registers, keeps it in shared memory in the same
        layout and writes it back with the tile's prefix: no transposes, no shared-memory
        instruction per element. None otherwise (warp runs, or the staged block scan)."""
        hooks, scan = self.hooks, self.scan
        if not scan.tuning.at(scan.acc_itemsize).tile_vector_runs or \
                hooks.plain_arrays is None or \
                not self.moves_warp_runs or scan.segmented or hooks.reverse or \
                hooks.initial or hooks.columns or scan.dynamic_shared or \
                scan.items_per_thread * scan.acc_itemsize % 16 or \
                self._input_run_bytes(hooks.plain_arrays) % 4:
            return None
        return hooks.plain_arrays

    def _input_run_bytes(self, plain: PlainArrays) -> int:
        itemsize = plain.input_itemsize or self.scan.etype.dtype.itemsize
        return self.scan.items_per_thread * itemsize

    @property
    def packed_combine(self) -> str | None:
        """The operator's combine of packed values (Operator.packed) where vector runs move
        1- or 2-byte integers read and written as the scan's own type: a lane's run then
        stays in 32-bit words and is scanned four or two values an instruction, with no
        value unpacked (templates/tile/vector_runs.cuh.j2). None otherwise."""
        plain = self.vector_runs
        if plain is None or plain.input_c != "scan_t":
            return None
        return self.scan.operator.packed_expression(self.scan.etype)

    @property
    def vector_input_word(self) -> int:
        """The bytes of each load of a lane's input run under vector runs: 16, or 8 or 4
        where the run is smaller (a narrow input converted to a wide result)."""
        run = self._input_run_bytes(self.vector_runs)
        return next(word for word in (16, 8, 4) if run % word == 0)

    @property
    def persistent_tiles(self) -> bool:
        """Whether the module has the persistent single-pass kernel (ScanSpec.
        has_persistent_tiles, where values move warp by warp), which the single pass takes
        from Tuning.tile_persistent_min_bytes on. Not a counting module by ballots: one that
        held only its tiles' ballots was measured slower (its output statements re-read the
        values, by then out of L2: docs/design/decisions.md, "A persistent counting kernel
        (dropped)")."""
        return self.scan.has_persistent_tiles and self.moves_warp_runs

    @property
    def plan_options(self) -> PlanOptions:
        """What the strategies read while they plan (scangen.plan.make_plan): the one place
        the module's modes become the plan's."""
        return PlanOptions(spec=self.scan, needs_last_item=self.hooks.uses_last_item,
                           persistent_tiles=self.persistent_tiles,
                           counted_sections_per_block=self.counted_sections_per_block,
                           dynamic_shared=tuple(self.dynamic_shared().items()),
                           counts_by_ballots=self.counts_by_ballots)

    @property
    def strategy(self) -> Strategy:
        return strategy_for(self.scan.strategy, self.hooks.uses_last_item)

    @property
    def kernels(self):
        """Every kernel of the module, in the order the source defines them: the strategy's,
        less a single-pass kernel no n takes: the persistent one where this spec has none,
        the classic one where the persistent one takes every n (a threshold of 0 bytes)."""
        if self.hooks.columns:
            return COLUMNS.kernels()
        if self.hooks.segment_tiles:
            return SEGMENTS.kernels()
        unused = {SCAN_TILES_PERSISTENT}
        if self.persistent_tiles:
            unused = set()
            if self.scan.tuning.at(self.scan.acc_itemsize).tile_persistent_min_bytes == 0:
                unused = {SCAN_TILES}
        return tuple(k for k in self.strategy.kernels() if k.family not in unused)

    def dynamic_shared_bytes(self, kernel) -> int:
        """Dynamic shared memory a launch of ``kernel`` takes: where the spec's sections do
        not fit static shared memory (ScanSpec.dynamic_shared), the sections the kernel holds
        and the block scan's scratch; 0 for a kernel that holds none (add_prefixes, and the
        user io's kernels where they count by ballots)."""
        if not self.scan.dynamic_shared or not kernel.family.sections or \
                (kernel.io == "user" and self.counts_by_ballots):
            return 0
        return self.scan.section_shared_bytes(kernel.family.sections)

    def part(self, kernels) -> "ModulePart":
        """The module cut down to ``kernels`` (some of its own, any order): what a plan
        launches, compiled on its own (scangen.plan.Plan.part)."""
        wanted = set(kernels)
        if not wanted <= set(self.kernels):
            raise ValueError(f"{self.description} has no kernel "
                             f"{sorted(k.name for k in wanted - set(self.kernels))}")
        return ModulePart(self, tuple(k for k in self.kernels if k in wanted))

    def parts(self) -> tuple["ModulePart", ...]:
        """The parts this module's plans launch at sizes a GPU holds (each power of two up
        to 2^PARTS_MAX_LOG2N elements, and either side of each level of sections), for
        compiling them ahead of use (scangen.compile.precompile); a size outside these that
        launches another part compiles it when first called."""
        if self.hooks.columns or self.hooks.segment_tiles:  # one kernel a layout
            return tuple(self.part((kernel,)) for kernel in self.kernels)
        section = self.scan.section_size
        sizes = {1 << k for k in range(PARTS_MAX_LOG2N + 1)}
        level = section
        while level <= 1 << PARTS_MAX_LOG2N:
            sizes |= {level, level + 1}
            level *= section
        parts = {}
        for n in sorted(sizes):
            try:
                part = make_plan(self, n).part
            except ValueError:  # more sections than a grid holds, or past a count's limit
                break
            parts.setdefault(part, None)
        return tuple(parts)

    # The module protocol of scangen.compile.

    def dynamic_shared(self) -> dict:
        """{entry point: bytes} of the kernels that take dynamic shared memory."""
        return {k.name: nbytes for k in self.kernels if (nbytes := self.dynamic_shared_bytes(k))}

    def module_source(self):
        return render(self)

    def entry_points(self):
        return tuple((k.name, k.parameters(self.hooks.arguments)) for k in self.kernels)

    @property
    def description(self) -> str:
        return f"{self.hooks.title} ({self.scan.operator.name!r} on {self.scan.etype.name})"


#: ScanModule.parts plans sizes up to 2^33 elements (8 GiB of bytes, 32 GiB of float32).
PARTS_MAX_LOG2N = 33


@dataclass(frozen=True)
class ModulePart:
    """Some kernels of a ScanModule, compiled as a module of their own: the ones a plan
    launches. nvcc's time grows with the kernels it compiles, and a module holds every
    kernel its strategy may launch at any n (auto's single pass, its one-section kernel and
    reduce_then_scan's four), so a call compiles only what it launches: a first call costs
    about a third of the whole module's compile (docs/design/decisions.md). ``source`` and
    ``check_compile`` keep showing and checking the whole module."""

    scan_module: ScanModule
    kernels: tuple

    def dynamic_shared(self) -> dict:
        shared = self.scan_module.dynamic_shared()
        return {k.name: shared[k.name] for k in self.kernels if k.name in shared}

    def module_source(self):
        return render(self.scan_module, self.kernels)

    def entry_points(self):
        return tuple((k.name, k.parameters(self.scan_module.hooks.arguments))
                     for k in self.kernels)

    @property
    def description(self) -> str:
        return self.scan_module.description


def options_repr(kernel: "ScanKernel") -> str:
    """The scan options of ``kernel`` as a class's repr writes them after its own arguments:
    reverse and initial where set, then the algorithm, section, items per thread and
    strategy (what "auto" and the tuning chose included)."""
    s = kernel.spec
    extra = "".join([", reverse=True" if kernel.scan_module.hooks.reverse else "",
                     f", initial={kernel.initial!r}" if kernel.initial is not None else ""])
    return (f"{extra}, algorithm={s.algorithm!r}, section_size={s.section_size}, "
            f"items_per_thread={s.items_per_thread}, strategy={s.strategy!r}")


class ScanKernel:
    """A generic scan with input and output hooks (PyOpenCL's GenericScanKernel, for CUDA).

    Parameters
    ----------
    dtype:
        The scan (accumulator) type, ``scan_t`` in the code: int8 .. uint64, float16,
        float32, float64, complex64, complex128, ml_dtypes' bfloat16, or a numpy structured
        dtype of those (as for scangen.Scan).
    operator:
        A built-in name (add, mul, min, max, bit_and, bit_or, bit_xor) or a scangen.Operator;
        associative, not necessarily commutative (operand order is kept).
    arguments:
        The kernel's C parameters, e.g. ``"const float *x, float *out, long long *count"``.
        Pointers to any type, scalars of the C types in scangen.args.C_SCALARS.
    input_expr:
        A C expression: the value scanned at index ``i``. It sees the arguments, ``i``
        (long long) and ``n``. It may be evaluated more than once per index and must have no
        side effects.
    output_statement:
        C statements run once for each index ``i`` in ``[0, n)``. They see the arguments,
        ``i``, ``n``, ``item`` (the inclusive prefix through ``i``), ``prev_item`` (the
        exclusive prefix: the identity at ``i == 0``) and ``last_item`` (the total over all
        ``n``). Using ``last_item`` needs a strategy that knows the total before its output
        pass: ``auto`` then always takes ``reduce_then_scan``; ``chained`` and
        ``decoupled_lookback`` are refused. scangen learns whether the statement uses
        ``last_item`` (and ``last_counted``, ``prev_last_counted``) from its C tokens: a
        mention in a comment or a string, a longer name (``last_items``) or a member
        (``s.last_item``) is no use, and a macro may not hide one (a preamble macro that
        names one is refused). The statement for ``i`` runs after
        ``input_expr`` was evaluated for every index of ``i``'s section, so writing at
        ``i`` into an array ``input_expr`` reads at ``i`` only is safe (a scan in place).
        They also see ``step`` and ``line`` (long long): how many elements of ``i``'s line
        come before it in the scan, and the index of that line (``i`` with the scanned
        axis taken out): the whole array and 0 in a 1-D scan, each line on its own along
        an axis, neither in a segmented scan by ``is_segment_start_expr``. E.g. a running
        mean ``mean[i] = item / (float)(step + 1);``.
    preamble:
        C text emitted before the kernels: device helper functions, types.
    types:
        dtypes whose C types the arguments or the code use besides ``dtype`` (e.g.
        ``np.float16`` for ``const __half *x``, a structured dtype for its struct): the
        module includes their headers and declares them before the preamble. Their C names
        are in ``scangen.types.element_type(d).c_name``.
    is_segment_start_expr:
        Optional C bool expression in the arguments, ``i`` and ``n``: a new segment starts
        at ``i``, and the scan restarts there (``prev_item`` is the identity at a segment's
        start; ``last_item`` is the total of the last segment). The first element always
        starts a segment. Implemented by scanning (value, head) pairs, so every strategy and
        algorithm takes it and non-commutative operators stay in order.
    reverse:
        Scan from the last index to the first: ``item`` at i is x[i] op x[i+1] op ... op
        x[n-1] (operands in array order), ``prev_item`` leaves x[i] out (the identity at
        n - 1). With segments, the scan restarts at each segment's last element.
    initial:
        An initial value, combined first (in scan order) into every ``item``, ``prev_item``
        and ``last_item``: inclusive ``initial op x0 op ...``, and ``prev_item`` at the
        start is ``initial``. It may be given again per call (``k(..., initial=v)``), e.g.
        the carry of a chunked scan. Not yet with ``is_segment_start_expr``.
    counts:
        True when ``input_expr`` is 0 or 1 at every index and the scan adds integers: the
        scan counts where a condition holds (a compaction's places). Blocks then count with
        warp ballots instead of scanning values, which is much cheaper; a value other than
        0 or 1 counts as 1. Refused for other types, operators and segmented scans. With
        no section given, the tile is scangen.tuning.COUNTING's; with no tuning given,
        scangen.tuning.COUNTING_CONDITION_TUNING (one pass at every size: reduce_then_scan
        would evaluate input_expr in both of its passes). The output statement may then
        also read ``last_counted``, the index of the last element at or before ``i`` whose
        ``input_expr`` is not 0 (-1 before the first one), and ``prev_last_counted``, the
        same before ``i``: where the current run began, e.g. a run's length at the next
        run's head. A kernel that reads them scans int64 or uint64 in array order (not
        ``reverse``) over fewer than 2^32 indices: its machinery combines count and index
        packed in 8 bytes.
    algorithm, section_size, items_per_thread, strategy, tuning:
        As for scangen.Scan.

    Notes
    -----
    Keywords that start with ``_`` are scangen's primitives' own: ``_helpers`` (C emitted
    before the preamble), ``_input`` (a MaskInput in place of ``input_expr``) and
    ``_segment_heads`` (a scangen.heads.SegmentHeads in place of ``is_segment_start_expr``) and
    ``_columns`` (scan along the middle axis of an (outer, axis_length, axis_stride) array:
    Hooks.columns; launched through ``launch_converted(..., layout=)``) and
    ``_segment_tiles`` (a SegmentTiles: segments of any lengths, each in tiles of its own;
    Hooks.segment_tiles; launched with ``layout=`` the number of segments) and
    ``_element`` (a HeldElement: the element a counting scan's hooks read at each index).

    Call it as ``k(*arrays_and_scalars, n=None, stream=None)``: arguments in the order of
    ``arguments`` (for pointers, C-contiguous device arrays of one kind: pycuda GPUArrays,
    CuPy arrays, torch tensors, anything with ``__cuda_array_interface__`` or ``__dlpack__``
    (scangen.interop), or ``scangen.DevicePointer(address, dtype, size)`` for memory known
    only by its address, checked like an array; never a bare int; numbers for scalars);
    ``n`` defaults to the length of the first array argument; ``stream`` (a pycuda, CuPy or
    torch stream, or a raw handle) defaults to the arrays' library's current stream.
    ``k(..., axis=a)`` scans the lines of the first array argument's shape along axis
    ``a`` instead, each on its own (``k.lines``: scangen.lines.LineKernels), where the hooks
    have no segments, counts or ``last_item``; ``i`` stays the C-contiguous index.
    """

    def __init__(self, dtype, operator="add", *, arguments, input_expr=None, output_statement,
                 preamble="", is_segment_start_expr=None, reverse=False, initial=None,
                 counts=False, types=(), algorithm=None, section_size=None,
                 items_per_thread=None, strategy="auto", tuning=None, title="ScanKernel",
                 _helpers="", _input=None, _segment_heads=None, _columns=False,
                 _plain_arrays=None, _segment_tiles=None, _element=None):
        # Every argument as given (locals() holds only them yet): what variant() rebuilds.
        self._made_with = {name: value for name, value in locals().items()
                           if name != "self" and not name.startswith("__")}
        etype = element_type(dtype)
        hooks = make_hooks(arguments, input_expr, output_statement, preamble, title,
                           is_segment_start_expr, reverse, None if initial is None else etype,
                           counts, types, _helpers, _input, _segment_heads, _columns,
                           _plain_arrays, _segment_tiles, _element)
        if hooks.counts and tuning is None:
            tuning = tuning_table.COUNTING_TUNING if hooks.counting.mask is not None \
                else tuning_table.COUNTING_CONDITION_TUNING
        scan = make_spec(dtype, operator, algorithm=algorithm, section_size=section_size,
                         items_per_thread=items_per_thread, strategy=strategy, tuning=tuning,
                         segmented=hooks.is_segment_start_expr is not None,
                         counts=hooks.counts)
        self.scan_module = ScanModule(scan, hooks)
        #: The initial value used when a call gives none (None: the kernel takes none).
        self.initial = None if initial is None else self._initial_value(initial)
        self._runtime = Runtime(self.scan_module)
        self._lines = None

    @property
    def made_with(self) -> dict:
        """The constructor's arguments, every one by name, as they were given."""
        return dict(self._made_with)

    def variant(self, **changes) -> "ScanKernel":
        """A ScanKernel built as this one was, but for ``changes`` (the constructor's
        keywords): the rows and columns kernels of scangen.lines are variants."""
        return ScanKernel(**{**self._made_with, **changes})

    @property
    def lines(self) -> LineKernels:
        """The kernels that scan an N-D array's lines along any axis with these hooks
        (scangen.lines): this kernel, and its rows and columns variants."""
        if self._lines is None:
            self._lines = LineKernels(self)
        return self._lines

    def _initial_value(self, value):
        """``value`` as the scan type, checked exactly as a scalar argument is."""
        argument = self.scan_module.hooks.arguments[-1]
        converted = convert_scalar(argument, value)
        # A type passed as bytes keeps its numpy value: each call converts it again.
        return converted if argument.value_type is None else \
            argument.value_type.numpy_value(value)

    @property
    def spec(self) -> ScanSpec:
        return self.scan_module.scan

    @property
    def arguments(self) -> tuple[Argument, ...]:
        return self.scan_module.hooks.arguments

    @property
    def dtype(self) -> np.dtype:
        return self.spec.etype.dtype

    def __repr__(self):
        s, h = self.spec, self.scan_module.hooks
        return (f"ScanKernel({s.etype.name}, {s.operator.name!r}, "
                f"arguments={', '.join(a.declaration for a in h.arguments)!r}, "
                f"input_expr={h.input_expr!r}, output_statement={h.output_statement!r}, "
                f"algorithm={s.algorithm!r}, section_size={s.section_size}, "
                f"strategy={s.strategy!r})")

    @property
    def source(self) -> str:
        """The CUDA source of every kernel this scan may launch (no GPU needed)."""
        return render(self.scan_module).text

    def plan(self, n, layout=None):
        """The launches that scan ``n`` elements (no GPU needed); a kernel of lines needs
        their ``layout`` (scangen.plan.make_plan): along columns ``(axis_length,
        axis_stride)`` of the array, over segment tiles the number of segments."""
        return self._runtime.plan(n, layout)

    def modules_to_compile(self) -> list:
        """What check_compile compiles: the kernel's ScanModule."""
        return [self.scan_module]

    def check_compile(self) -> None:
        """Compile the module with nvcc from PATH (no GPU needed); raise ScanCompileError
        naming the user code an error is in, with the numbered source around it."""
        compiler.check_all_with_nvcc(self.modules_to_compile())

    def __call__(self, *args, n=None, stream=None, initial=None, axis=None):
        """Run the scan over ``n`` indices (default: the first array argument's length);
        ``initial`` replaces the constructor's initial value for this call. ``axis``: scan
        the lines of the first array argument's shape along that axis instead, each on its
        own (i is still the index into the C-contiguous arrays; see Scan)."""
        values, n, stream, shape = self._converted(args, n, stream, initial, axis)
        if axis is None:
            self._runtime.launch(values, n, stream)
        else:
            self.lines.launch(values, shape, axis, stream, initial)

    def prepare(self, *args, n=None, stream=None, initial=None, axis=None):
        """This call bound once: the arguments converted and checked, the plan bound to the
        stream (the arrays' current stream now, where none is given) and its scratch.
        Returns a scangen.runtime.launcher.PreparedLaunch whose every call ``launch()`` runs
        the same scan again with nothing else done on the host, the cheapest way to launch
        one scan many times (each call does what ``kernel(*args, ...)`` would). It holds the
        arrays given; their contents are read at each call, not now."""
        values, n, stream, shape = self._converted(args, n, stream, initial, axis)
        if axis is None:
            return self._runtime.prepare(values, n, stream, keep=args)
        return self.lines.prepare(values, shape, axis, stream, initial, keep=args)

    def _converted(self, args, n, stream, initial, axis):
        """(values, n, stream, shape) of a call: its arguments converted (scangen.interop)
        with the initial value, its stream resolved; along an axis, n is None, the shape is
        the first array argument's and the values leave out the initial value, which the
        lines' kernels append themselves."""
        if self.initial is not None:
            args = args + (self.initial if initial is None else initial,)
        elif initial is not None:
            raise TypeError(_NO_INITIAL)
        if axis is None:
            return (*convert_arguments(self.arguments, self.dtype, args, n, stream), None)
        self._check_lines(n)
        values, _, stream, shape = convert_arguments(self.arguments, self.dtype, args, None,
                                                     stream, with_shape=True)
        return (values[:-1] if self.initial is not None else values), None, stream, shape

    def _check_lines(self, n) -> None:
        """Refuse a scan along an axis that these hooks cannot give (before any work)."""
        if n is not None:
            raise TypeError("give n= or axis=, not both: along an axis the first array "
                            "argument's shape says what is scanned")
        hooks = self.scan_module.hooks
        if hooks.is_segment_start_expr is not None or hooks.counts or hooks.uses_last_item \
                or hooks.columns or hooks.segment_tiles:
            raise ValueError("axis= scans each line on its own, which a kernel with segments, "
                             "counts, last_item or last_counted cannot: scan 1-D (no axis=)")

    def initial_argument(self, initial=None) -> tuple:
        """What a launch appends for the initial value (the constructor's, or ``initial``),
        converted as a call converts it: a 1-tuple, or () for a kernel built without one.
        Raises naming ``initial``; clients call it to check a value before any work."""
        if self.initial is None:
            if initial is not None:
                raise TypeError(_NO_INITIAL)
            return ()
        return (convert_scalar(self.arguments[-1], self.initial if initial is None else initial),)

    def launch_converted(self, values: tuple, n: int, stream=None, initial=None,
                         layout=None) -> None:
        """Launch with argument values already converted (device addresses as ints or np.uintp,
        scalars as numpy scalars of their C type) on a stream already resolved by
        scangen.interop (None, a pycuda Stream or a RawStream): for clients such as Scan
        that validate their own arrays and want the per-call cost of nothing more. The
        initial value (the constructor's, or ``initial``) is converted here, as a call
        converts it. ``layout``: as for plan."""
        self._runtime.launch(values + self.initial_argument(initial), n, stream, layout)

    def prepare_converted(self, values: tuple, n: int, stream=None, initial=None, layout=None,
                          keep=()):
        """launch_converted's launch, bound once: a PreparedLaunch (see prepare). ``keep``:
        the arrays the values point into, held while it lives."""
        return self._runtime.prepare(values + self.initial_argument(initial), n, stream,
                                     layout, keep)
