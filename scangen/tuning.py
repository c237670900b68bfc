"""Tuning values, in one table, apart from the code that uses them (as CUB keeps its policies).

Measured on an H200 (sm_90) with ``python -m scangen bench``; see docs/performance.md.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    """Defaults for one element size."""

    #: Threads per block of the fast (warp_shuffle) path.
    block_size: int
    #: Items each thread scans sequentially in registers; section = block_size * items.
    items_per_thread: int


#: By element size in bytes. Sections must be powers of two.
FAST_PATH = {
    1: Tuning(block_size=256, items_per_thread=16),
    2: Tuning(block_size=256, items_per_thread=16),
    4: Tuning(block_size=256, items_per_thread=16),
    8: Tuning(block_size=256, items_per_thread=8),
}

#: The algorithm used when the user names none.
DEFAULT_ALGORITHM = "warp_shuffle"

#: Section size for algorithms other than the fast path when the user names none.
DEFAULT_SECTION_SIZE = 1024

#: Polling back-off of the single-pass strategies: __nanosleep starts here and doubles per
#: unsuccessful poll up to the maximum.
BACKOFF_MIN_NS = 8
BACKOFF_MAX_NS = 256
