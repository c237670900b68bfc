"""How sections are stitched into a whole-array scan: one object per strategy, owning its
kernels and its plan. ``strategy_for`` is the one map from a spec's strategy name to them."""
from __future__ import annotations

from .auto import Auto
from .base import Strategy
from .hierarchical import Hierarchical
from .one_section import ONE_SECTION_STRATEGY
from .reduce_then_scan import REDUCE_THEN_SCAN
from .single_pass import CHAINED, DECOUPLED_LOOKBACK

_FIXED = {s.name: s for s in (Hierarchical(), REDUCE_THEN_SCAN, CHAINED, DECOUPLED_LOOKBACK)}


def strategy_for(name: str, needs_last_item: bool) -> Strategy:
    """The strategy object for a spec's strategy name."""
    if name == "auto":
        return Auto(needs_last_item)
    strategy = _FIXED[name]
    if needs_last_item and not strategy.provides_last_item:
        raise ValueError(
            f"the output statement uses last_item (the total), which strategy {name!r} does "
            f"not know before it writes; use 'reduce_then_scan', 'hierarchical' or 'auto'")
    return strategy


def resolve(name: str, needs_last_item: bool, spec, n: int) -> Strategy:
    """The strategy that scans n elements: one section when n fits one, auto's choice."""
    strategy = strategy_for(name, needs_last_item)
    if n <= spec.section_size:
        return ONE_SECTION_STRATEGY
    if isinstance(strategy, Auto):
        return strategy.choose(spec, n)
    return strategy


__all__ = ["Strategy", "resolve", "strategy_for"]
