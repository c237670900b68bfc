"""The persistent single pass (Tuning.tile_persistent_min_bytes), on the GPU, against the
in-order reference: both protocols, both modes, non-commutative operators, 1- to 16-byte
values, tiny tiles (each block scans many), in place, call after call of other sizes (each
call takes one ticket more per block than it has tiles) through an epoch wrap-around,
segmented scans (forward and reverse) and a ScanKernel's own input and output hooks."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES

from tests.support import (AFFINE, AFFINE_MAPS, assert_scan_equal, check_single_pass, expected,
                           operator, poisoned, precompile, random_input, segmented_reference)

PROTOCOLS = ["decoupled_lookback", "chained"]
#: (dtype, operator): 1-, 4-, 8- and 16-byte values, commutative or not.
CASES = [("float32", "add"), ("int32", "last_nonzero"), ("int64", "last_nonzero"),
         ("uint64", "affine_then"), ("int8", "max"), ("complex128", "add"),
         ("float64", "add")]
#: Persistent at every size.
PERSISTENT = scangen.Tuning(tile_persistent_min_bytes=0)


def persistent_scans(protocol, case):
    """Both modes on tiny tiles (64 = 32 threads x 2), then 16 KiB tiles (two fit the static
    shared memory)."""
    dtype, op_name = case
    tiny = [scangen.Scan(dtype, operator(op_name), mode=mode, strategy=protocol,
                         algorithm="warp_shuffle", section_size=64, items_per_thread=2,
                         tuning=PERSISTENT) for mode in MODES]
    section = 16384 // np.dtype(dtype).itemsize
    return tiny + [scangen.Scan(dtype, operator(op_name), strategy=protocol,
                                section_size=section, tuning=PERSISTENT)]


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = [scan for case in itertools.product(PROTOCOLS, CASES)
               for scan in persistent_scans(*case)]
    for protocol in PROTOCOLS:
        kernels += [seg.kernel("flags", np.dtype(np.uint8))
                    for seg, *_ in segmented_scans(protocol)]
        kernels.append(affine_kernel(protocol))
    precompile(kernels)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_persistent_tiles(gpu, rng, protocol, case):
    *tiny, big = persistent_scans(protocol, case)
    assert all(scan.kernel.scan_module.persistent_tiles for scan in tiny + [big])
    check_single_pass(gpu, rng, tiny, big, case[1])


def segmented_scans(protocol):
    """(scan, operator, mode, reverse): segmented float32 last_nonzero and affine maps (8-
    and 16-byte pairs), both modes, forward and reverse, on tiny tiles."""
    return [(scangen.SegmentedScan(dtype, operator(op_name), mode=mode, reverse=reverse,
                                   strategy=protocol, section_size=64, tuning=PERSISTENT),
             op_name, mode, reverse)
            for (dtype, op_name), mode, reverse in itertools.product(
                [("float32", "last_nonzero"), ("uint64", "affine_then")], MODES, (False, True))]


def affine_kernel(protocol):
    """A ScanKernel whose input expression reads two arrays (AFFINE_MAPS)."""
    return scangen.ScanKernel("uint64", AFFINE, **AFFINE_MAPS, strategy=protocol,
                              algorithm="warp_shuffle", section_size=64, items_per_thread=2,
                              tuning=PERSISTENT)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_persistent_segmented_and_hooks(gpu, rng, protocol):
    for seg, op_name, mode, reverse in segmented_scans(protocol):
        kernel = seg.kernel("flags", np.dtype(np.uint8))
        assert kernel.scan_module.persistent_tiles
        for n in (1, 65, 64 * 40 + 3, (1 << 20) + 7):
            x = random_input(rng, seg.dtype, op_name, n)
            heads = (rng.random(n) < rng.choice([0.0, 0.01, 0.3])).astype(np.uint8)
            want = segmented_reference(x, heads, operator(op_name), mode, reverse=reverse)
            out = poisoned(gpu, rng, n, seg.dtype)
            seg(gpu.to_gpu(x), out, flags=gpu.to_gpu(heads))
            np.testing.assert_array_equal(out.get(), want,
                                          err_msg=f"{op_name} {mode} reverse={reverse} n={n}")
    kernel = affine_kernel(protocol)
    assert kernel.scan_module.persistent_tiles
    for n in (3, 64 * 40 + 1, (1 << 20) + 3):
        m = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        c = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        out = poisoned(gpu, rng, n, np.uint64)
        kernel(gpu.to_gpu(m), gpu.to_gpu(c), out)
        packed = (m.astype(np.uint64) << np.uint64(32)) | c.astype(np.uint64)
        assert_scan_equal(out.get(), expected(packed, AFFINE, "inclusive"), "uint64", n)
