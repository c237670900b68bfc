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

#: ``strategy="auto"`` above one section: decoupled look-back (one launch) below this many
#: input bytes, reduce_then_scan (three passes, but each at higher bandwidth) from here on.
#: H200, 2026-11-21, float32/int32 add: look-back wins at 2^20 (7.7 vs 14.4 us), loses at
#: 2^22 (22.7 vs 18.0 us) and 2^28 (50% vs 61% of copy); float64 likewise between 2^20 and 2^24.
AUTO_REDUCE_THEN_SCAN_MIN_BYTES = 16 << 20

#: Section size for algorithms other than the fast path when the user names none.
DEFAULT_SECTION_SIZE = 1024

#: Polling back-off of the single-pass strategies: __nanosleep starts here and doubles per
#: unsuccessful poll up to the maximum.
BACKOFF_MIN_NS = 8
BACKOFF_MAX_NS = 256

#: The single-pass kernel asks the compiler (second __launch_bounds__ argument) to leave
#: registers for this many threads per multiprocessor. Measured on an H200, decoupled
#: look-back, 256 threads x 16 float32 (benchmarks/tune_single_pass.py): unconstrained
#: (56 registers, 1024 threads/SM) 47% of copy at 2^28, 1536 threads 50%, 2048 threads
#: 41% (spills); float64: 42%, 48%, 38%. The back-off made no measurable difference.
TILE_MIN_THREADS_PER_SM = 1536


def tile_min_blocks(block_size: int) -> int:
    """Blocks per multiprocessor for TILE_MIN_THREADS_PER_SM (CUDA allows 1 to 32)."""
    return min(32, max(1, TILE_MIN_THREADS_PER_SM // block_size))
