"""Reduce each section, scan the totals (recursively), scan each section seeded with its
prefix. About 3n of traffic; each pass streams at high bandwidth."""
from __future__ import annotations

from ..arith import ceil_div
from ..families import REDUCE_SECTIONS, SCAN_SEEDED
from .base import register
from .sections_then_totals import SectionsThenTotals


class ReduceThenScan(SectionsThenTotals):
    name = "reduce_then_scan"
    summary = "reduce sections, scan the totals, scan sections seeded with their prefix (~3n)"
    first, second = REDUCE_SECTIONS, SCAN_SEEDED

    def first_traffic(self, n, sections):
        return n, sections + 1

    def first_grid(self, builder, sections, io):
        """A block counts several sections of a mask (ScanModule.counted_sections_per_block);
        one level down, and otherwise, a block reduces one."""
        if io != "user":
            return sections
        return ceil_div(sections, builder.options.counted_sections_per_block)


REDUCE_THEN_SCAN = register(ReduceThenScan())
