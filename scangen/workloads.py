"""The inputs the bench times and the CLI reads, importable without the benchmark harness:
sizes written as 2^20, operators by name, random non-zero input per operator, and the named
struct scans (STRUCTS), which the tests reuse.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .ops import AFFINE_THEN, LAST_NONZERO, Operator, resolve_operator


def parse_size(text: str) -> int:
    """Accept 1048576, 2^20 or 2**20 (the size syntax of every command)."""
    try:
        compact = text.replace("**", "^").replace("_", "").strip()
        if "^" in compact:
            base, exponent = compact.split("^")
            value = int(base) ** int(exponent)
        else:
            value = int(compact)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (write e.g. 1000000, 2^20 or 2**20)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a size cannot be negative: {text!r}")
    return value


#: Operators the bench knows by name besides the built-ins: both are not commutative.
#: affine_then takes uint64 only.
NAMED_OPERATORS = {op.name: op for op in (LAST_NONZERO, AFFINE_THEN)}


def parse_tile(text: str) -> tuple[int, int]:
    """A tile shape, ``THREADSxITEMS`` (``"256x16"``): (threads, items a thread)."""
    threads, items = (int(part) for part in text.lower().split("x"))
    return threads, items


def operator_named(name: str) -> Operator:
    """A built-in operator, last_nonzero or affine_then, by name."""
    return NAMED_OPERATORS.get(name) or resolve_operator(name)


def random_input(rng, dtype, n, op_name="add"):
    """n random non-zero values of dtype for ``op_name`` (affine_then: packed odd maps)."""
    dtype = np.dtype(dtype)
    if op_name == "affine_then":  # maps x -> m x + c with odd m (none collapses the prefix)
        m = rng.integers(0, 2**32, n, dtype=np.uint64) | np.uint64(1)
        return (m << np.uint64(32)) | rng.integers(0, 2**32, n, dtype=np.uint64)
    if dtype.kind == "f":
        return rng.uniform(0.5, 1.5, n).astype(dtype)
    return rng.integers(1, 100, n).astype(dtype)


@dataclass(frozen=True)
class StructCase:
    """A struct scan the bench can time (``--struct NAME``)."""

    dtype: np.dtype
    operator: Operator
    #: (rng, n) -> n random values of dtype
    make_input: Callable
    #: How the table and the JSON name the type.
    label: str


#: x -> m*x + c as a pair of float64: 16 bytes, the two-word tile status.
AFFINE_F64X2 = np.dtype([("m", np.float64), ("c", np.float64)])


def _compose_affine(a, b):
    """numpy twin of the composition: a, then b."""
    out = np.empty_like(a)
    out["m"] = b["m"] * a["m"]
    out["c"] = b["m"] * a["c"] + b["c"]
    return out


def _affine_maps(rng, n):
    maps = np.empty(n, AFFINE_F64X2)
    maps["m"] = np.exp(rng.normal(0, 1e-4, n))  # products stay near 1 over 2^28 maps
    maps["c"] = rng.uniform(-1.0, 1.0, n)
    return maps


STRUCTS = {
    # A linear recurrence x[t] = m[t] x[t-1] + c[t]: composing affine maps, not commutative.
    "affine-f64x2": StructCase(
        AFFINE_F64X2, Operator("scan_t{b.m * a.m, b.m * a.c + b.c}", (1.0, 0.0),
                               name="affine_f64x2", reference=_compose_affine),
        _affine_maps, "struct16"),
}
