"""check_operator: does an operator keep the contract (associative, a two-sided identity)
on values of a dtype? Evaluated on the GPU, by the operator's own generated code."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .kernel import ScanKernel
from .ops import resolve_operator
from .runtime import gpu
from .types import element_type

#: One ScanKernel evaluates the operator on sample triples in its output statement (its own
#: scan of a[] is not used): the same combine() every scan of this operator compiles.
_EVALUATE = ("left[i] = combine(combine(a[i], b[i]), c[i]);"
             " right[i] = combine(a[i], combine(b[i], c[i]));"
             " identity_left[i] = combine(scan_identity(), a[i]);"
             " identity_right[i] = combine(a[i], scan_identity());")


@dataclass
class OperatorReport:
    """What check_operator found. ``bool(report)`` is ``report.ok``."""

    operator: str
    dtype: str
    samples: int
    #: Failures per law: "associativity", "left identity", "right identity".
    failures: dict = field(default_factory=dict)
    #: The first failure: (law, a, b, c, one side, the other side).
    counterexample: tuple | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return (f"{self.operator} on {self.dtype}: associative with a two-sided identity "
                    f"on {self.samples} random and edge triples")
        law, a, b, c, one, other = self.counterexample
        counts = ", ".join(f"{k}: {v}" for k, v in self.failures.items())
        if law == "associativity":
            shown = (f"(a op b) op c = {one!r} but a op (b op c) = {other!r} for a={a!r}, "
                     f"b={b!r}, c={c!r}")
        else:
            shown = f"{law} fails: e op a or a op e = {one!r}, not a = {other!r} for a={a!r}"
        return (f"{self.operator} on {self.dtype} breaks the operator contract ({counts} of "
                f"{self.samples} samples): {shown}")


def sample_values(rng, dtype: np.dtype, count: int) -> np.ndarray:
    """Random values of dtype, with the edges (0, 1, the limits) mixed in."""
    kind = element_type(dtype).kind  # bfloat16 is kind "V" to numpy
    if kind == "c":
        edges = np.array([0, 1, -1, 1j, -1j, 0.5 + 0.5j], dtype)
        values = (rng.standard_normal(count) + 1j * rng.standard_normal(count)).astype(dtype)
    elif kind == "f":
        # Half precision overflows at 65504: smaller magnitudes keep products finite.
        big = 2.0 if dtype.itemsize == 2 else 1e3
        edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1 / big, big], dtype)
        values = (rng.standard_normal(count) * (1 if dtype.itemsize == 2 else 10)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        edges = np.array(sorted({0, 1, info.min, info.max, info.max // 2} |
                                ({-1} if info.min < 0 else set())), dtype)
        values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    values[: edges.size] = edges[: count]
    return values


def check_operator(operator, dtype, *, samples=100_000, seed=0, rtol=None) -> OperatorReport:
    """Evaluate ``operator`` on ``samples`` random and edge triples of ``dtype`` on the GPU:
    associativity ((a op b) op c == a op (b op c)) and the identity on both sides. Integers
    must agree exactly; floats within ``rtol`` (default 64 ulps, at most 1/16) of the larger
    magnitude involved. Returns an OperatorReport naming a counterexample when a law fails."""
    op = resolve_operator(operator)
    if np.dtype(dtype).fields is not None:
        raise TypeError("check_operator samples scalar types; for a struct type, check the "
                        "operator with reference_scan on structured arrays you choose")
    kernel = ScanKernel(dtype, op, arguments="const scan_t *a, const scan_t *b, "
                        "const scan_t *c, scan_t *left, scan_t *right, scan_t *identity_left, "
                        "scan_t *identity_right", input_expr="a[i]",
                        output_statement=_EVALUATE, title="operator check")
    dtype = kernel.dtype
    rng = np.random.default_rng(seed)
    gpuarray = gpu.gpuarray()
    a, b, c = (sample_values(rng, dtype, samples) for _ in range(3))
    b[:7], c[:7] = a[:7][::-1], a[:7]  # edge values meet each other too
    outputs = [gpuarray.empty(samples, dtype) for _ in range(4)]
    kernel(*(gpuarray.to_gpu(v) for v in (a, b, c)), *outputs)
    left, right, identity_left, identity_right = (o.get() for o in outputs)
    report = OperatorReport(op.name, dtype.name, samples)
    for law, one, other in (("associativity", left, right),
                                   ("left identity", identity_left, a),
                                   ("right identity", identity_right, a)):
        bad = ~_agree(one, other, dtype, rtol, (a, b, c))
        if bad.any():
            report.failures[law] = int(bad.sum())
            if report.counterexample is None:
                k = int(np.flatnonzero(bad)[0])
                report.counterexample = (law, a[k].item(), b[k].item(), c[k].item(),
                                         one[k].item(), other[k].item())
    return report


def _agree(one, other, dtype, rtol, operands):
    etype = element_type(dtype)
    if etype.kind not in "fc":
        return one == other
    if rtol is None:
        # 64 ulps, but no looser than float16's: 64 of bfloat16's ulps (2^-7) would be half
        # the value, and a non-associative expression would pass.
        rtol = min(64 * float(etype.finfo().eps), 1 / 16)
    wide = np.complex128 if etype.kind == "c" else np.float64
    # Relative to the largest magnitude involved: rounding scales with the operands.
    scale = np.maximum.reduce([np.abs(v.astype(wide)) for v in (one, other, *operands)])
    both_nan = np.isnan(one) & np.isnan(other)
    close = np.abs(one.astype(wide) - other.astype(wide)) <= rtol * np.maximum(scale, 1)
    return close | both_nan | (one == other)
