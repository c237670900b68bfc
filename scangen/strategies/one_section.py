"""Any n that fits one section: the whole scan in one block, one launch."""
from __future__ import annotations

from ..families import IOS, ONE_SECTION, Kernel
from .base import PlanBuilder, Strategy, io_of


class OneSection(Strategy):
    name = "one_section"
    summary = "one block scans everything (n fits one section)"

    def kernels(self):
        return tuple(Kernel(ONE_SECTION, io) for io in IOS)

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        builder.launch(Kernel(ONE_SECTION, io_of(io_arg)), 1, io_arg, (n,), reads=n, writes=n,
                       level=level, why=f"one section: the whole scan of {n} elements")


ONE_SECTION_STRATEGY = OneSection()
