"""``strategy="auto"``: the one place that chooses a strategy per n.

Decoupled look-back (one launch, ~2n) below Tuning.auto_reduce_then_scan_min_bytes of input
(by value size), reduce_then_scan (three passes, each streaming faster) from there on, as
measured on an H200 (scangen.tuning). An output statement that needs last_item always takes
reduce_then_scan, which knows the total before its output pass.
"""
from __future__ import annotations

from .base import Strategy
from .one_section import ONE_SECTION_STRATEGY
from .reduce_then_scan import REDUCE_THEN_SCAN
from .single_pass import DECOUPLED_LOOKBACK


class Auto(Strategy):
    name = "auto"
    summary = "one section, decoupled look-back, or reduce_then_scan, chosen per n"

    def __init__(self, needs_last_item: bool):
        self.needs_last_item = needs_last_item

    @property
    def protocol(self) -> str:
        return DECOUPLED_LOOKBACK.protocol

    def candidates(self) -> tuple[Strategy, ...]:
        if self.needs_last_item:
            return (REDUCE_THEN_SCAN,)
        return (DECOUPLED_LOOKBACK, REDUCE_THEN_SCAN)

    def kernels(self):
        kernels = ONE_SECTION_STRATEGY.kernels()[:1]
        for candidate in self.candidates():
            kernels += tuple(k for k in candidate.kernels() if k not in kernels)
        return kernels

    def choose(self, spec, n: int) -> Strategy:
        if n <= spec.section_size:
            return ONE_SECTION_STRATEGY
        if self.needs_last_item:
            return REDUCE_THEN_SCAN
        size = spec.etype.itemsize
        if n * size >= spec.tuning.at(size).auto_reduce_then_scan_min_bytes:
            return REDUCE_THEN_SCAN
        return DECOUPLED_LOOKBACK
