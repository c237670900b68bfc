"""Integer arithmetic on sizes, shared by plans, kernels and primitives."""
from __future__ import annotations

#: Threads of a warp (warpSize on every GPU scangen runs on): blocks of the warp-level
#: kernels are multiples of it, and the templates' WARP_SIZE is this.
WARP_SIZE = 32


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (for a >= 0, b > 0): tiles or blocks covering a elements."""
    return -(-a // b)
