"""The generated CUDA and launch plans of a fixed list of specs, for refactors that must not
change what runs: every strategy x algorithm for two dtypes, the scan options, every
segmented form and every primitive.

    python -m tests.support.generated write DIR     # one file per case
    python -m tests.support.generated hashes        # print "sha256  case" lines

``tests/cpu/test_generated.py`` compares the hashes with ``tests/cpu/generated.sha256``. A
change that means to alter generated code rewrites that file (``hashes > ...``) and its
commit says why.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

import scangen
from scangen.spec import ALGORITHMS
from scangen.strategies import NAMES

#: Sizes whose plans are recorded: one section, a few sections, many tiles.
PLAN_SIZES = (1000, 100_000, 1 << 24)


def _scan_text(obj, *plan_args) -> str:
    plans = "\n".join(str(obj.plan(n, *plan_args)) for n in PLAN_SIZES)
    return obj.source + "\n// ---- plans ----\n" + plans


def _plans(obj, *plan_args) -> str:
    return "\n".join(str(obj.plan(n, *plan_args)) for n in (0,) + PLAN_SIZES)


def _cases():
    """(name, thunk returning the text) for every case."""
    for dtype in ("float32", "int64"):
        for algorithm in ALGORITHMS:
            for strategy in NAMES:
                yield (f"scan-{dtype}-{algorithm}-{strategy}",
                       lambda d=dtype, a=algorithm, s=strategy: _scan_text(
                           scangen.Scan(d, "add", algorithm=a, strategy=s)))
    options = {
        "exclusive": dict(mode="exclusive"),
        "reverse": dict(reverse=True),
        "initial": dict(initial=5),
        "result-float64": dict(result_dtype="float64"),
        "max": dict(operator="max"),
        "last-nonzero": dict(operator=scangen.LAST_NONZERO),
    }
    for name, kwargs in options.items():
        yield f"scan-int32-{name}", lambda k=kwargs: _scan_text(scangen.Scan("int32", **k))
    yield "scan-float16", lambda: _scan_text(scangen.Scan("float16"))
    # runs in 16-byte words: 1-byte values packed four to a word (the default), and wider
    # ones a value a register
    yield "scan-uint8", lambda: _scan_text(scangen.Scan("uint8"))
    yield "scan-float32-vector-runs", lambda: _scan_text(scangen.Scan(
        "float32", mode="exclusive", tuning=scangen.Tuning(tile_vector_runs=True)))
    yield "scan-complex64", lambda: _scan_text(scangen.Scan("complex64"))
    for form in ("flags", "offsets", "keys"):
        yield (f"segmented-float32-{form}",
               lambda f=form: _scan_text(scangen.SegmentedScan("float32"), f))
    for offsets in ("int32", "int64"):  # the offsets form's own kernel
        yield (f"segment-heads-{offsets}",
               lambda o=offsets: scangen.SegmentedScan("float32").heads_module(o).source)
    for dtype in ("float32", "float16", "complex64"):
        yield (f"select-{dtype}-predicate",
               lambda d=dtype: _scan_text(scangen.Select(d, "x[i] != x[i]")))
        yield (f"select-{dtype}-flags",
               lambda d=dtype: _scan_text(scangen.Select(d, flags=np.bool_)))
        yield f"unique-{dtype}", lambda d=dtype: _scan_text(scangen.Unique(d))
        yield (f"run-length-{dtype}",
               lambda d=dtype: _scan_text(scangen.RunLengthEncode(d)))
    yield "select-uint8-flags-remove", lambda: _scan_text(
        scangen.Select("float32", flags=np.uint8, keep=False))
    yield "partition-float32", lambda: _scan_text(scangen.Partition("float32", "x[i] > 0"))
    for dtype in ("bool", "int16", "float16", "float64", "complex64"):
        yield f"flatnonzero-{dtype}", lambda d=dtype: _scan_text(scangen.FlatNonzero(d))
    for key in ("uint32", "int64", "float32"):
        yield f"radix-sort-{key}", lambda k=key: scangen.RadixSort(k).source
        yield f"radix-sort-{key}-pairs", lambda k=key: scangen.RadixSort(k, "float64").source
        yield f"histogram-{key}", lambda k=key: scangen.Histogram(k).source
    yield "argsort-float32", lambda: scangen.RadixSort(
        "float32", np.int64, _index_values=True).source
    for bits in (4, 8, 12):
        yield (f"digit-offsets-uint32-{bits}",
               lambda b=bits: scangen.RadixDigitOffsets("uint32", b).source)
    # The plans of the primitives with kernels of their own (their sources are above).
    yield "radix-sort-uint32-plans", lambda: _plans(scangen.RadixSort("uint32"))
    yield "radix-sort-int64-pairs-plans", lambda: _plans(scangen.RadixSort("int64", "float64"))
    yield "radix-sort-uint32-bits-plans", lambda: "\n".join(
        str(scangen.RadixSort("uint32").plan(n, begin_bit=3, end_bit=20, descending=True))
        for n in PLAN_SIZES)
    yield "argsort-float32-plans", lambda: _plans(
        scangen.RadixSort("float32", np.int64, _index_values=True))
    for bits in (4, 8, 12):
        yield (f"digit-offsets-uint32-{bits}-plans",
               lambda b=bits: _plans(scangen.RadixDigitOffsets("uint32", b), 5))
    yield "histogram-float32-plans", lambda: _plans(scangen.Histogram("float32"), 100)
    yield "run-length-wide-plan", lambda: str(scangen.RunLengthEncode("float32").plan(2**32 + 1))


def texts() -> dict[str, str]:
    return {name: thunk() for name, thunk in _cases()}


def hashes() -> dict[str, str]:
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts().items()}


def main(argv) -> int:
    if argv[:1] == ["hashes"]:
        for name, digest in hashes().items():
            print(f"{digest}  {name}")
        return 0
    if argv[:1] == ["write"] and len(argv) == 2:
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts().items():
            (out / f"{name}.cu").write_text(text)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
