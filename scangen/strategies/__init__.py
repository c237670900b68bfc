"""How sections are stitched into a whole-array scan: one object per strategy, owning its
kernels and its plan. ``strategy_for`` is the one map from a spec's strategy name to them.

Each strategy's module registers its object (base.register); every module of this package
is imported here, so a new strategy is one file."""
from __future__ import annotations

import importlib
import pkgutil

from .auto import Auto
from .base import REGISTERED, Strategy
from .one_section import ONE_SECTION_STRATEGY

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

#: The strategies a spec may name besides "auto": in the order of their modules' names, and
#: within a module as it registers them (so the order is not that of the imports).
_FIXED = {s.name: s for s in sorted(REGISTERED.values(), key=lambda s: type(s).__module__)}
#: Every strategy name a spec accepts: "auto" (chosen per n), then the fixed ones. The one
#: list of them; scangen.STRATEGIES is this.
NAMES = (Auto.name, *_FIXED)
#: The names whose strategy knows the total before its output pass, so an output statement
#: may read last_item: each strategy's provides_last_item says (auto's too: it then takes
#: reduce_then_scan).
TOTAL_NAMES = tuple(name for name in NAMES
                    if (Auto if name == Auto.name else _FIXED[name]).provides_last_item)


def strategy_for(name: str, needs_last_item: bool) -> Strategy:
    """The strategy object for a spec's strategy name."""
    if name == "auto":
        return Auto(needs_last_item)
    strategy = _FIXED[name]
    if needs_last_item and not strategy.provides_last_item:
        # Named in reverse: reduce_then_scan (what auto then takes) first, auto last.
        choices = [repr(total) for total in reversed(TOTAL_NAMES)]
        raise ValueError(
            f"the output statement uses last_item (the total), which strategy {name!r} does "
            f"not know before it writes; use {', '.join(choices[:-1])} or {choices[-1]}")
    return strategy


def resolve(name: str, needs_last_item: bool, spec, n: int) -> Strategy:
    """The strategy that scans n elements: one section when n fits one, auto's choice."""
    strategy = strategy_for(name, needs_last_item)
    if n <= spec.section_size:
        return ONE_SECTION_STRATEGY
    if isinstance(strategy, Auto):
        return strategy.choose(spec, n)
    return strategy


__all__ = ["NAMES", "TOTAL_NAMES", "Strategy", "resolve", "strategy_for"]
