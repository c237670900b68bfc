"""The seeds' hierarchical scan: scan each section, scan the section totals (recursively,
by the same strategy), then combine each section with its prefix. About 4n of traffic."""
from __future__ import annotations

from ..kernels import ADD_PREFIXES, IOS, SCAN_SECTIONS, Kernel
from .base import PlanBuilder, Strategy, ceil_div, io_of
from .one_section import ONE_SECTION_STRATEGY


class Hierarchical(Strategy):
    name = "hierarchical"
    summary = "scan sections, scan their totals, add the prefixes back (three kernels, ~4n)"

    def kernels(self):
        return ONE_SECTION_STRATEGY.kernels() + tuple(
            Kernel(family, io) for io in IOS for family in (SCAN_SECTIONS, ADD_PREFIXES))

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        section = builder.spec.section_size
        if n <= section:
            return ONE_SECTION_STRATEGY.build(builder, n, io_arg, level)
        io = io_of(io_arg)
        sections = ceil_div(n, section)
        partial = builder.temporary(f"partial{level}", n,
                                    f"{n} elements scanned within their sections")
        # One entry more than there are sections: scanned exclusively, it ends in the total.
        totals = builder.temporary(f"totals{level}", sections + 1,
                                   f"{sections} section totals, then the grand total")
        builder.launch(Kernel(SCAN_SECTIONS, io), sections, io_arg, (partial, totals, n),
                       reads=n, writes=n + sections + 1, level=level,
                       why=f"scan {sections} sections into {partial.name}, totals to "
                           f"{totals.name}")
        self.build(builder, sections + 1, totals, level + 1)
        builder.launch(Kernel(ADD_PREFIXES, io), sections, io_arg, (partial, totals, n),
                       reads=n + sections + 1, writes=n, level=level,
                       why=f"combine each section with its prefix from {totals.name}; emit")
