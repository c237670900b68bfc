"""Sections past the 48 KiB of static shared memory a block declares, held in dynamic
shared memory (the kernels opt in to more), on the GPU: every strategy, both modes, sizes
on both sides of the section, float64 and 32- and 48-byte structs with non-commutative
operators, a segmented scan, the persistent single pass (two sections per block) and a
launch on a raw stream handle (the driver's own launch), into poisoned output with a guard
after it, against references written here."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MAX_STATIC_SHARED_BYTES, MODES, STRATEGIES

from tests.support import poison_values, precompile

GUARD = 64

# --- operators and their references ---------------------------------------------------------

#: Fields of the struct values: an affine map x -> m x + c composed in order (m = +-1 and
#: integer c keep every composition exact), the last nonzero tag, a count, a running minimum
#: and maximum. The 32-byte struct has the first four; the 48-byte one all six.
FIELDS = [("m", np.float64), ("c", np.float64), ("tag", np.int64), ("count", np.int64),
          ("low", np.float64), ("high", np.float64)]
COMBINE = {"m": "a.m * b.m", "c": "b.m * a.c + b.c", "tag": "b.tag != 0 ? b.tag : a.tag",
           "count": "a.count + b.count", "low": "fmin(a.low, b.low)",
           "high": "fmax(a.high, b.high)"}
IDENTITY = {"m": 1.0, "c": 0.0, "tag": 0, "count": 0, "low": np.inf, "high": -np.inf}
STRUCTS = {width: np.dtype(FIELDS[:width // 8]) for width in (32, 48)}


def struct_operator(dtype):
    return scangen.Operator("scan_t{" + ", ".join(COMBINE[f] for f in dtype.names) + "}",
                            tuple(IDENTITY[f] for f in dtype.names),
                            name=f"fields{dtype.itemsize}")


def _last_nonzero(values, identity=0):
    """Inclusive "last nonzero wins": each position's latest nonzero value so far."""
    latest = np.maximum.accumulate(np.where(values != 0, np.arange(values.size), -1))
    return np.where(latest >= 0, values[np.maximum(latest, 0)], identity).astype(values.dtype)


def _inclusive(x):
    """The inclusive scan of x (float64 by last nonzero, the structs field by field)."""
    if x.dtype.names is None:
        return _last_nonzero(x)
    out = np.empty_like(x)
    # (m, c) after (m', c'): m m', m c' + c. With m = +-1 the running product P is +-1, and
    # c_i = P_i * sum_{j <= i} P_j c_j (each 1 / P_j is P_j): exact integers throughout.
    product = np.cumprod(x["m"])
    out["m"] = product
    out["c"] = product * np.cumsum(product * x["c"])
    out["tag"] = _last_nonzero(x["tag"])
    out["count"] = np.cumsum(x["count"])
    if "low" in x.dtype.names:
        out["low"] = np.minimum.accumulate(x["low"])
        out["high"] = np.maximum.accumulate(x["high"])
    return out


def _identity(dtype):
    if dtype.names is None:
        return np.zeros(1, dtype)
    return np.array([tuple(IDENTITY[f] for f in dtype.names)], dtype)


def reference(x, mode, heads=None):
    """The scan of x, restarting wherever heads is nonzero (and at 0)."""
    out = np.empty_like(x)
    starts = [0] if heads is None else sorted({0, *np.flatnonzero(heads).tolist()})
    for first, end in zip(starts, starts[1:] + [x.size]):
        inclusive = _inclusive(x[first:end])
        out[first:end] = inclusive if mode == "inclusive" else \
            np.concatenate([_identity(x.dtype), inclusive[:-1]])
    return out


def random_values(rng, dtype, n):
    if dtype.names is None:
        return np.where(rng.random(n) < 0.7, 0.0, rng.normal(size=n))
    x = np.empty(n, dtype)
    x["m"] = rng.choice([-1.0, 1.0], n)
    x["c"] = rng.integers(-100, 101, n)
    x["tag"] = np.where(rng.random(n) < 0.9, 0, rng.integers(1, 2**40, n))
    x["count"] = rng.integers(0, 1000, n)
    if "low" in dtype.names:
        x["low"] = rng.normal(size=n)
        x["high"] = rng.normal(size=n)
    return x


# --- the scans ------------------------------------------------------------------------------

#: (dtype, operator, options): each needs more than 48 KiB of shared memory.
CASES = {
    "float64-coarsened": (np.dtype(np.float64), scangen.LAST_NONZERO,
                          dict(algorithm="coarsened", section_size=8192, items_per_thread=8)),
    "float64-warp_shuffle": (np.dtype(np.float64), scangen.LAST_NONZERO,
                             dict(section_size=8192)),
    "struct32-double_buffered": (STRUCTS[32], struct_operator(STRUCTS[32]),
                                 dict(algorithm="kogge_stone_double_buffered",
                                      section_size=1024)),
    "struct32-brent_kung": (STRUCTS[32], struct_operator(STRUCTS[32]),
                            dict(algorithm="brent_kung", section_size=2048)),
    "struct32-warp_shuffle": (STRUCTS[32], struct_operator(STRUCTS[32]),
                              dict(section_size=2048)),
    "struct48-kogge_stone": (STRUCTS[48], struct_operator(STRUCTS[48]),
                             dict(algorithm="kogge_stone", section_size=1024)),
}


def large_scan(case, strategy, mode):
    dtype, op, options = CASES[case]
    return scangen.Scan(dtype, op, mode=mode, strategy=strategy, **options)


def segmented_scan(strategy, mode):
    return scangen.SegmentedScan(np.float64, scangen.LAST_NONZERO, mode=mode,
                                 strategy=strategy, section_size=4096)


PERSISTENT = scangen.Tuning(tile_persistent_min_bytes=0)


def persistent_scan(protocol, mode):
    return scangen.Scan(STRUCTS[32], struct_operator(STRUCTS[32]), mode=mode,
                        strategy=protocol, section_size=2048, tuning=PERSISTENT)


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = [large_scan(case, strategy, mode)
               for case, strategy, mode in itertools.product(CASES, STRATEGIES, MODES)]
    kernels += [segmented_scan(strategy, mode).kernel("flags", np.dtype(np.uint8))
                for strategy, mode in itertools.product(STRATEGIES, MODES)]
    kernels += [persistent_scan(protocol, mode)
                for protocol, mode in itertools.product(("chained", "decoupled_lookback"), MODES)]
    precompile(kernels)


def sizes(section, rng):
    """Both sides of one section and of two, several sections, and a random size."""
    return sorted({1, 2, section - 1, section, section + 1, 2 * section + 1, 37 * section - 3,
                   int(rng.integers(section, 20 * section))})


def run(gpu, rng, scan, x, **call):
    """Scan x into the first n elements of a poisoned buffer n + GUARD long; the guard must
    come back untouched."""
    n = x.size
    poison = poison_values(rng, x.dtype, n + GUARD)
    buffer = gpu.to_gpu(poison)
    scan(gpu.to_gpu(x), out=buffer[:n], **call)
    got = buffer.get()
    np.testing.assert_array_equal(got[n:].view(np.uint8), poison[n:].view(np.uint8),
                                  err_msg="the guard after the output was overwritten")
    return got[:n]


def assert_equal(got, want):
    """Exact: the inputs make every result exact in any order of combining."""
    if got.dtype.names is None:
        np.testing.assert_array_equal(got, want)
    else:
        for name in got.dtype.names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", list(CASES))
def test_large_sections(gpu, rng, case, strategy, mode):
    scan = large_scan(case, strategy, mode)
    spec = scan.spec
    assert spec.dynamic_shared and spec.shared_bytes > MAX_STATIC_SHARED_BYTES
    for n in sizes(spec.section_size, rng):
        x = random_values(rng, spec.etype.dtype, n)
        assert_equal(run(gpu, rng, scan, x), reference(x, mode))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_large_segmented_sections(gpu, rng, strategy, mode):
    """(value, head) pairs of 16 bytes, 4096 to a section: 72 KiB."""
    seg = segmented_scan(strategy, mode)
    kernel = seg.kernel("flags", np.dtype(np.uint8))
    assert kernel.spec.dynamic_shared
    for n in sizes(kernel.spec.section_size, rng):
        x = random_values(rng, np.dtype(np.float64), n)
        heads = (rng.random(n) < 0.002).astype(np.uint8)
        got = run(gpu, rng, seg, x, flags=gpu.to_gpu(heads))
        assert_equal(got, reference(x, mode, heads))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", ["chained", "decoupled_lookback"])
def test_persistent_blocks_hold_two_large_sections(gpu, rng, protocol, mode):
    scan = persistent_scan(protocol, mode)
    assert scan.kernel.scan_module.persistent_tiles and scan.spec.dynamic_shared
    for n in sizes(scan.spec.section_size, rng) + [300 * scan.spec.section_size + 11]:
        x = random_values(rng, scan.spec.etype.dtype, n)
        assert_equal(run(gpu, rng, scan, x), reference(x, mode))


@pytest.mark.parametrize("strategy", ["hierarchical", "decoupled_lookback"])
def test_large_sections_on_a_raw_stream_handle(gpu, rng, strategy):
    """A stream passed as a handle is launched through the driver (a second load of the
    module, which opts in to the dynamic shared memory on its own)."""
    import pycuda.driver as driver

    scan = large_scan("struct32-warp_shuffle", strategy, "exclusive")
    stream = driver.Stream()
    for n in sizes(scan.spec.section_size, rng):
        x = random_values(rng, scan.spec.etype.dtype, n)
        got = run(gpu, rng, scan, x, stream=stream.handle)
        assert_equal(got, reference(x, "exclusive"))
