"""Reduce each section, scan the totals (recursively), scan each section seeded with its
prefix. About 3n of traffic; each pass streams at high bandwidth."""
from __future__ import annotations

from ..kernels import IOS, REDUCE_SECTIONS, SCAN_SEEDED, Kernel
from .base import PlanBuilder, Strategy, ceil_div, io_of
from .one_section import ONE_SECTION_STRATEGY


class ReduceThenScan(Strategy):
    name = "reduce_then_scan"
    summary = "reduce sections, scan the totals, scan sections seeded with their prefix (~3n)"

    def kernels(self):
        return ONE_SECTION_STRATEGY.kernels() + tuple(
            Kernel(family, io) for io in IOS for family in (REDUCE_SECTIONS, SCAN_SEEDED))

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        section = builder.spec.section_size
        if n <= section:
            return ONE_SECTION_STRATEGY.build(builder, n, io_arg, level)
        io = io_of(io_arg)
        sections = ceil_div(n, section)
        # One entry more than there are sections: scanned exclusively, it ends in the total.
        totals = builder.temporary(f"totals{level}", sections + 1,
                                   f"{sections} section totals, then the grand total")
        builder.launch(Kernel(REDUCE_SECTIONS, io), sections, io_arg, (totals, n),
                       reads=n, writes=sections + 1, level=level,
                       why=f"reduce {sections} sections to {totals.name}")
        self.build(builder, sections + 1, totals, level + 1)
        builder.launch(Kernel(SCAN_SEEDED, io), sections, io_arg, (totals, n),
                       reads=n + sections + 1, writes=n, level=level,
                       why=f"scan each section seeded with its prefix from {totals.name}; emit")


REDUCE_THEN_SCAN = ReduceThenScan()
