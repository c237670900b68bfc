"""flatnonzero without a GPU: the kernel each dtype family renders, its plans run on the
plan emulator against numpy.flatnonzero, refusals, and nvcc compiling every family (where
nvcc is on PATH). tests/gpu/test_primitives.py runs it against numpy on the GPU."""
import concurrent.futures
import os

import numpy as np
import pytest

import scangen
from scangen.primitives import nonzero
from tests.support import (BFLOAT16, FakeDeviceArray, needs_nvcc, poison_values,
                           simulate_device, zeros_and_others)
from tests.support.plan_machine import PlanMachine

#: One dtype of each family flatnonzero reads its own way: a mask (bool, the integers),
#: the floats, the 16-bit floats (through float), complex (part by part).
FAMILIES = ["bool", "int8", "uint64", "float32", "float64", "float16", "complex64",
            "complex128"] + (["bfloat16"] if BFLOAT16 is not None else [])


def as_dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


class NonzeroHooks:
    """FlatNonzero's hooks in numpy, for the plan emulator: count ``x[i] != 0`` (numpy's
    nonzero: NaN is, -0.0 is not, complex where either part is), write i to out at its
    count."""

    def __init__(self, x):
        self.x = x

    def memory(self, rng):
        return {"x": self.x.copy(), "out": poison_values(rng, np.int64, self.x.size),
                "count": np.full(1, -7, np.int64)}

    def input(self, ctx, idx, blocks):
        return (ctx.read("x", idx, blocks) != 0).astype(np.int64)

    def output(self, ctx, idx, blocks, item, prev_item, last_item):
        kept = item != prev_item
        ctx.write("out", prev_item[kept], idx[kept], blocks if np.ndim(blocks) == 0
                  else np.broadcast_to(blocks, idx.shape)[kept])
        last = idx == self.x.size - 1
        if last.any():
            ctx.write("count", np.zeros(1, np.int64), item[last], blocks if np.ndim(blocks) == 0
                      else np.broadcast_to(blocks, idx.shape)[last])

    def result(self, memory):
        return memory["out"][:memory["count"][0]]


@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_counts_numpys_nonzero(name):
    nz = scangen.FlatNonzero(as_dtype(name))
    text = nz.source
    assert "out[prev_item] = i;" in text and "*count = item;" in text
    assert nz.kernel.spec.etype.dtype == np.int64 and nz.kernel.scan_module.counts_by_ballots
    condition = {"bool": "(x[i] != 0) ? 1 : 0", "int8": "(x[i] != 0) ? 1 : 0",
                 "uint64": "(x[i] != 0) ? 1 : 0", "float32": "(x[i] != 0) ? 1 : 0",
                 "float64": "(x[i] != 0) ? 1 : 0", "float16": "((float)x[i] != 0.0f) ? 1 : 0",
                 "bfloat16": "((float)x[i] != 0.0f) ? 1 : 0",
                 "complex64": "(x[i].re != 0 || x[i].im != 0) ? 1 : 0",
                 "complex128": "(x[i].re != 0 || x[i].im != 0) ? 1 : 0"}[name]
    assert condition in text
    c_type = {"bool": "bool", "int8": "signed char", "uint64": "unsigned long long",
              "float32": "float", "float64": "double", "float16": "__half",
              "bfloat16": "__nv_bfloat16", "complex64": "scangen_complex64",
              "complex128": "scangen_complex128"}[name]
    assert f"const {c_type} *__restrict__ x, long long *__restrict__ out, long long *count" \
        in text
    # a mask (bool, integers) is counted as Select's flags: 16 bytes a lane in the first pass
    # of reduce_then_scan, which auto takes at large n; any other condition reads the
    # values, and takes one pass at every size
    mask = np.dtype(as_dtype(name)).kind in "biu"
    assert (nz.kernel.scan_module.counted_mask is not None) == mask
    assert nz.plan(1 << 26).strategy == ("reduce_then_scan" if mask else "decoupled_lookback")
    assert nz.plan(1000).strategy == "one_section"
    assert nz.dtype == as_dtype(name)
    assert repr(nz).startswith(f"FlatNonzero({name}, algorithm=")


@pytest.mark.parametrize("name", ["bool", "int16", "float32", "float16", "complex128"])
@pytest.mark.parametrize("strategy", scangen.STRATEGIES)
def test_plans_find_numpys_indices_on_the_emulator(rng, name, strategy):
    """Every strategy's plan, run by the plan emulator with the kernel's hooks modelled, at
    sizes on both sides of a section and of a section of sections."""
    nz = scangen.FlatNonzero(as_dtype(name), strategy=strategy, section_size=64,
                             items_per_thread=2)
    machine = PlanMachine(rng)
    for n in (1, 2, 63, 64, 65, 64 * 64 - 1, 64 * 64, 64 * 64 + 1, int(rng.integers(2, 20_000))):
        x = zeros_and_others(rng, as_dtype(name), n)
        got = machine.run(nz.plan(n), NonzeroHooks(x))
        np.testing.assert_array_equal(got, np.flatnonzero(x), err_msg=f"n={n}")


@pytest.mark.parametrize("dtype,error,message", [
    (np.dtype([("a", np.int32), ("b", np.float32)]), TypeError,
     r"flatnonzero takes bool, int8 .. uint64.*not a structured dtype .* has no one zero; "
     r"select by its fields"),
    (np.dtype("datetime64[ns]"), TypeError, r"flatnonzero takes bool, .* not datetime64\[ns\]"),
    (np.dtype(object), TypeError, "flatnonzero takes bool, .* not object"),
    (np.dtype(">f4"), TypeError, "not in the machine's byte order; use float32"),
    ("nonsense", TypeError, "dtype is not a numpy dtype: 'nonsense'"),
])
def test_dtypes_without_a_zero_are_refused(dtype, error, message):
    with pytest.raises(error, match=message):
        scangen.FlatNonzero(dtype)


def test_scan_options_are_checked_as_scans_check_them():
    with pytest.raises(ValueError, match="unknown strategy 'fast'"):
        scangen.FlatNonzero(np.int32, strategy="fast")
    assert scangen.FlatNonzero(np.int32, section_size=512).kernel.spec.section_size == 512


def test_the_one_shot_function_caches_the_class():
    assert nonzero._flatnonzero(np.dtype(np.float32)) is nonzero._flatnonzero(np.dtype(np.float32))
    assert nonzero._flatnonzero(np.dtype(np.bool_)).kernel.scan_module == \
        scangen.FlatNonzero(np.bool_).kernel.scan_module


@pytest.mark.parametrize("call,message", [
    (lambda nz: nz(FakeDeviceArray(10, np.float64)), "x has dtype float64; expected float32"),
    (lambda nz: nz(FakeDeviceArray((2, 5), np.float32)), "x must be a 1-D array"),
    (lambda nz: nz(FakeDeviceArray(10, np.float32), out=FakeDeviceArray(10, np.int32, 0x90000)),
     "out has dtype int32; expected int64"),
    (lambda nz: nz(FakeDeviceArray(10, np.float32), out=FakeDeviceArray(9, np.int64, 0x90000)),
     "out has 9 elements; it needs room for 10"),
    (lambda nz: nz(FakeDeviceArray(10, np.float32), out=FakeDeviceArray(10, np.int64, 0x10010)),
     "out overlaps x; compaction cannot work in place"),
    (lambda nz: nz(FakeDeviceArray(10, np.float32), FakeDeviceArray(10, np.int64, 0x90000)),
     "takes 2 positional arguments"),
])
def test_bad_arrays_are_refused_before_any_work(monkeypatch, call, message):
    """x's and out's dtype, shape, room and overlap are checked before anything is
    allocated or launched (arrays known by their interface alone: no GPU needed)."""
    simulate_device(monkeypatch)
    with pytest.raises((TypeError, ValueError), match=message):
        call(scangen.FlatNonzero(np.float32))


@needs_nvcc
def test_every_family_compiles():
    kernels = [scangen.FlatNonzero(as_dtype(name)) for name in FAMILIES]
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda k: k.check_compile(), kernels))
