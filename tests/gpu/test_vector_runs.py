"""Vector runs (Tuning.tile_vector_runs) on the GPU against the in-order reference: plain
scans whose single pass moves each lane's run in 16-byte words. 1- to 16-byte values, both
modes, the persistent and the ticketed kernel of both single-pass protocols, non-commutative
operators, sizes on both sides of a tile and past 2^24, in place, an epoch wrap-around, and
arrays off a 16-byte boundary (which take the element-at-a-time path), poisoned around."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.spec import MODES

from tests.support import (assert_scan_equal, check_scan, check_single_pass, expected,
                           operator, precompile, random_input)

PROTOCOLS = ["decoupled_lookback", "chained"]
#: (dtype, operator): 1-, 2-, 4-, 8- and 16-byte values, commutative or not.
CASES = [("uint8", "add"), ("int8", "max"), ("int16", "add"), ("float16", "add"),
         ("float32", "add"), ("int32", "last_nonzero"), ("int64", "last_nonzero"),
         ("uint64", "affine_then"), ("float64", "add"), ("complex128", "add")]
#: The persistent kernel at every size, or the ticketed one at every size.
KERNELS = {"persistent": 0, "ticketed": 1 << 60}


def vector_scans(protocol, kernel, case):
    """Both modes on the smallest tiles a run of one 16-byte word makes (32 threads, 16 /
    itemsize items), then the default tile."""
    dtype, op_name = case
    tuning = scangen.Tuning(tile_vector_runs=True, tile_persistent_min_bytes=KERNELS[kernel])
    items = 16 // np.dtype(dtype).itemsize
    tiny = [scangen.Scan(dtype, operator(op_name), mode=mode, strategy=protocol,
                         algorithm="warp_shuffle", section_size=32 * items,
                         items_per_thread=items, tuning=tuning) for mode in MODES]
    return tiny + [scangen.Scan(dtype, operator(op_name), strategy=protocol, tuning=tuning)]


ALL = list(itertools.product(PROTOCOLS, KERNELS, CASES))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    precompile([scan for case in ALL for scan in vector_scans(*case)])


@pytest.mark.parametrize("protocol, kernel, case", ALL, ids=str)
def test_vector_runs(gpu, rng, protocol, kernel, case):
    *tiny, big = vector_scans(protocol, kernel, case)
    for scan in tiny + [big]:
        assert scan.kernel.scan_module.vector_runs is not None
        launched = {launch.kernel.name for launch in scan.kernel.plan(1 << 22).launches}
        assert launched == {"scan_tiles_persistent_user" if kernel == "persistent"
                            else "scan_tiles_user"}
    check_single_pass(gpu, rng, tiny, big, case[1])
    for scan in tiny:  # on both sides of its own tiles
        tile = scan.spec.section_size
        for n in (tile - 1, tile, tile + 1, 7 * tile + 1):
            check_scan(gpu, rng, scan, n, case[1], in_place=n % 2 == 0)


@pytest.mark.parametrize("case", [("uint8", "add"), ("float32", "add"),
                                  ("uint64", "affine_then")], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_arrays_off_a_word_boundary(gpu, rng, case, mode):
    """Views one element into an allocation: x and out not aligned to 16 bytes, so every
    section goes element by element; the elements either side of out stay poisoned."""
    dtype, op_name = case
    scan = scangen.Scan(dtype, operator(op_name), mode=mode,
                        tuning=scangen.Tuning(tile_vector_runs=True))
    for n in (1, scan.spec.section_size + 1, 100_003):
        x = random_input(rng, dtype, op_name, n + 1)
        poison = random_input(rng, dtype, op_name, n + 2)
        whole = gpu.to_gpu(poison)
        scan(gpu.to_gpu(x)[1:], out=whole[1:n + 1])
        got = whole.get()
        np.testing.assert_array_equal(got[[0, n + 1]].view(np.uint8),
                                      poison[[0, n + 1]].view(np.uint8))
        assert_scan_equal(got[1:n + 1], expected(x[1:], operator(op_name), mode),
                          np.dtype(dtype), n, op=op_name)


@pytest.mark.parametrize("source, result", [("uint8", "int32"), ("uint8", "uint64"),
                                            ("int16", "int64"), ("float16", "float32")])
@pytest.mark.parametrize("mode", MODES)
def test_inputs_converted_as_they_load(gpu, rng, source, result, mode):
    """A result wider than the input (numpy's cumsum of uint8 is one): each lane loads its
    input run in words (16 bytes, or 8 or 4 where the run is smaller) and converts every
    element; the default tile and the smallest one, around tiles and past many."""
    # the smallest run that fills a 16-byte word of results and a 4-byte word of inputs
    items = max(16 // np.dtype(result).itemsize, 4 // np.dtype(source).itemsize)
    vector = scangen.Tuning(tile_vector_runs=True)
    scans = [scangen.Scan(source, "add", mode=mode, result_dtype=result, tuning=vector),
             scangen.Scan(source, "add", mode=mode, result_dtype=result, tuning=vector,
                          algorithm="warp_shuffle", section_size=32 * items,
                          items_per_thread=items)]
    for scan in scans:
        assert scan.kernel.scan_module.vector_runs is not None
        tile = scan.spec.section_size
        for n in (1, tile - 1, tile, tile + 1, 33 * tile + 5, (1 << 21) + 3):
            x = random_input(rng, source, "add", n)
            out = gpu.to_gpu(np.full(n + 4, 9, result))
            scan(gpu.to_gpu(x), out=out[:n])
            got = out.get()
            assert (got[n:] == 9).all()  # nothing past n
            assert_scan_equal(got[:n], expected(x.astype(result), operator("add"), mode),
                              np.dtype(result), n, op="add")


#: 1- and 2-byte integers under every operator with a packed form (Operator.packed).
PACKED = list(itertools.product(("uint8", "int8", "uint16", "int16"),
                                ("add", "min", "max", "bit_and", "bit_or", "bit_xor")))


def packed_scans(case, kernel):
    """Both modes on the smallest tile (one 16-byte word a lane) and the default one."""
    dtype, op_name = case
    tuning = scangen.Tuning(tile_vector_runs=True, tile_persistent_min_bytes=KERNELS[kernel])
    items = 16 // np.dtype(dtype).itemsize
    return [scangen.Scan(dtype, op_name, mode=mode, tuning=tuning, **tile)
            for mode in MODES
            for tile in (dict(algorithm="warp_shuffle", section_size=32 * items,
                              items_per_thread=items), {})]


PACKED_RUNS = [(case, "persistent") for case in PACKED] + \
    [(case, "ticketed") for case in (("uint8", "add"), ("int8", "max"), ("int16", "min"))]


@pytest.fixture(scope="module")
def _packed_compiled():
    precompile([scan for case, kernel in PACKED_RUNS for scan in packed_scans(case, kernel)])


@pytest.mark.parametrize("case, kernel", PACKED_RUNS, ids=str)
def test_packed_runs(gpu, rng, _packed_compiled, case, kernel):
    """Values scanned four or two to a 32-bit word (ScanModule.packed_combine), signed and
    unsigned, against the reference that applies the operator one value at a time: around
    tiles and past many, in place at even n, poisoned around."""
    for scan in packed_scans(case, kernel):
        assert scan.kernel.scan_module.packed_combine is not None
        tile = scan.spec.section_size
        for n in (1, tile - 1, tile, tile + 1, 7 * tile + 1, (1 << 20) + 3):
            check_scan(gpu, rng, scan, n, case[1], in_place=n % 2 == 0)


@pytest.mark.parametrize("mode", MODES)
def test_packed_runs_off_a_word_boundary(gpu, rng, mode):
    """Packed runs of arrays one element into their allocations: value by value, poison
    either side untouched."""
    scan = scangen.Scan(np.int8, "max", mode=mode, tuning=scangen.Tuning(tile_vector_runs=True))
    assert scan.kernel.scan_module.packed_combine is not None
    for n in (1, scan.spec.section_size + 1, 100_003):
        x = random_input(rng, np.int8, "max", n + 1)
        poison = random_input(rng, np.int8, "max", n + 2)
        whole = gpu.to_gpu(poison)
        scan(gpu.to_gpu(x)[1:], out=whole[1:n + 1])
        got = whole.get()
        np.testing.assert_array_equal(got[[0, n + 1]], poison[[0, n + 1]])
        assert_scan_equal(got[1:n + 1], expected(x[1:], operator("max"), mode),
                          np.dtype(np.int8), n, op="max")
