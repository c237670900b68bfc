"""Integer arithmetic on sizes, shared by plans, kernels and primitives."""
from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (for a >= 0, b > 0): tiles or blocks covering a elements."""
    return -(-a // b)
