"""The shape hierarchical and reduce_then_scan share: a pass over the sections that writes
their totals, the totals scanned exclusively in place by the same strategy one level down,
and a second pass over the sections that combines each with its prefix and runs the output.

The totals get one entry more than there are sections (the first pass sets it to the
identity). Where the output uses last_item, the top level scans that entry too, so the
exclusive scan ends with the grand total. Otherwise, and at lower levels (whose output
ignores last_item), only the section totals are scanned: one entry more would cost a whole
extra level whenever the sections number exactly a section size, as 2^24 elements in 4096
sections of 4096 do. Every level is shorter than the one above, so the recursion ends."""
from __future__ import annotations

from ..arith import ceil_div
from ..families import IOS, Kernel, KernelFamily
from .base import PlanBuilder, Strategy, io_of
from .one_section import ONE_SECTION_STRATEGY


class SectionsThenTotals(Strategy):
    first: KernelFamily
    second: KernelFamily

    def kernels(self):
        return ONE_SECTION_STRATEGY.kernels() + tuple(
            Kernel(family, io) for io in IOS for family in (self.first, self.second))

    def buffers(self, builder: PlanBuilder, n: int, level: int) -> tuple:
        """Temporaries both passes take before the totals (none by default)."""
        return ()

    def first_traffic(self, n: int, sections: int) -> tuple[int, int]:
        """(elements read, elements written) by the first pass."""
        raise NotImplementedError

    def first_grid(self, builder: PlanBuilder, sections: int, io: str) -> int:
        """Blocks of the first pass: one a section by default."""
        return sections

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        if n <= builder.spec.section_size:
            return ONE_SECTION_STRATEGY.build(builder, n, io_arg, level)
        io = io_of(io_arg)
        sections = ceil_div(n, builder.spec.section_size)
        buffers = self.buffers(builder, n, level)
        # The first pass writes one entry past the section totals (the identity); it is
        # scanned, to end with the grand total, only where the output reads last_item.
        grand_total = io == "user" and builder.options.needs_last_item
        totals = builder.temporary(f"totals{level}", sections + 1,
                                   f"{sections} section totals, then the grand total"
                                   if grand_total else f"{sections} section totals")
        reads, writes = self.first_traffic(n, sections)
        blocks = self.first_grid(builder, sections, io)
        by = f" in {blocks} blocks" if blocks != sections else ""
        builder.launch(Kernel(self.first, io), blocks, io_arg, buffers + (totals, n),
                       reads=reads, writes=writes, level=level,
                       why=f"{self.first.summary.split(': ', 1)[1]} ({sections} sections{by})")
        below = sections + 1 if grand_total else sections
        self.build(builder, below, totals, level + 1)
        builder.launch(Kernel(self.second, io), sections, io_arg, buffers + (totals, n),
                       reads=n + sections + 1, writes=n, level=level,
                       why=f"{self.second.summary.split(': ', 1)[1]}; prefixes from "
                           f"{totals.name}")
