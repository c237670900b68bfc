"""The seeds' hierarchical scan: scan each section, scan the section totals (recursively,
by the same strategy), then combine each section with its prefix. About 4n of traffic."""
from __future__ import annotations

from ..families import ADD_PREFIXES, SCAN_SECTIONS
from .base import register
from .sections_then_totals import SectionsThenTotals


class Hierarchical(SectionsThenTotals):
    name = "hierarchical"
    summary = "scan sections, scan their totals, add the prefixes back (three kernels, ~4n)"
    first, second = SCAN_SECTIONS, ADD_PREFIXES

    def buffers(self, builder, n, level):
        return (builder.temporary(f"partial{level}", n,
                                  f"{n} elements scanned within their sections"),)

    def first_traffic(self, n, sections):
        return n, n + sections + 1


HIERARCHICAL = register(Hierarchical())
