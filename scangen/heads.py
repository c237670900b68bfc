"""Segment heads given typed: what a ScanKernel takes as ``_segment_heads=`` in place of
an ``is_segment_start_expr`` (scangen.kernel.make_hooks), for SegmentedScan's forms and the
rows of an N-D scan (scangen.lines). A module of its own, so scangen.lines need not import
scangen.kernel."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class SegmentHeads:
    """Segment heads given typed: what a ScanKernel takes as ``_segment_heads=`` instead of
    an ``is_segment_start_expr`` (SegmentedScan's forms, Scan's rows). The expression comes
    from here, so the module may find a lane's run of heads by other means
    (ScanModule.run_heads) without reading the expression. Each kind below says what its
    argument holds."""

    #: The name of the argument the heads come from.
    argument: str
    #: The C expression of a head at index i, ``{a}`` standing for the argument.
    expression_template: ClassVar[str] = ""

    @property
    def expression(self) -> str:
        return self.expression_template.format(a=self.argument)


@dataclass(frozen=True)
class HeadFlags(SegmentHeads):
    """Heads at the nonzero elements of an integer or bool array argument (SegmentedScan's
    flags form): one-byte flags a lane may load a run of at once."""

    expression_template: ClassVar[str] = "{a}[i] != 0"


@dataclass(frozen=True)
class HeadKeys(SegmentHeads):
    """Heads where an integer array argument's key differs from the one before it (runs of
    equal keys, and element 0: SegmentedScan's keys form): a lane may read its run's keys
    in wide loads and compare them itself."""

    expression_template: ClassVar[str] = "i == 0 || {a}[i] != {a}[i - 1]"


@dataclass(frozen=True)
class HeadRows(SegmentHeads):
    """Heads every ``argument`` indices (a ``long long`` scalar argument: the rows of a
    C-contiguous 2-D array, each its own segment: Scan's rows kernel): a lane may find its
    run's heads from one remainder instead of one 64-bit division per element."""

    expression_template: ClassVar[str] = "i % {a} == 0"


@dataclass(frozen=True)
class HeadBits(SegmentHeads):
    """Heads as the bits of an array argument of 32-bit unsigned words (a head at index i
    where bit i % 32 of word i / 32 is set): what SegmentedScan's offsets form sets from the
    offsets, an eighth of the bytes of one-byte flags; a lane may take its run's heads from
    one word."""

    expression_template: ClassVar[str] = "({a}[i >> 5] >> (i & 31) & 1u) != 0"
