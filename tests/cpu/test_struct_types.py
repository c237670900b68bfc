"""Struct types from numpy structured dtypes, without a GPU: layout, literals, errors, the
CPU reference over structured arrays, and nvcc compiling struct scans on every strategy
(including the static_asserts that pin the C layout to numpy's)."""
import concurrent.futures
import os

import numpy as np
import pytest

import scangen
from scangen.types import element_type
from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, ARGMAX, RUNNING_STATS, STATS,
                           VALUE_INDEX)
from tests.support import needs_nvcc


NESTED = np.dtype([("flag", np.uint8), ("v", np.float64), ("idx", np.int32, (2,)),
                   ("inner", [("a", np.int16), ("b", np.float32)])], align=True)
GAPS = np.dtype({"names": ["a", "b"], "formats": [np.int32, np.int32], "offsets": [0, 8],
                 "itemsize": 16})


def test_layout_follows_numpy():
    t = element_type(NESTED)
    assert t.is_struct and t.itemsize == NESTED.itemsize == 32 and t.alignment == 8
    assert [(f.name, f.offset, f.shape) for f in t.fields] == [
        ("flag", 0, ()), ("v", 8, ()), ("idx", 16, (2,)), ("inner", 24, ())]
    assert "int idx[2];" in t.declarations and "scangen_struct0 inner;" in t.declarations
    assert "static_assert(sizeof(scangen_struct1) == 32" in t.declarations
    # natural C layout: no padding arrays; explicit numpy gaps: written out
    assert "_pad" not in t.declarations
    gaps = element_type(GAPS)
    assert gaps.declarations.count("unsigned char _pad") == 2


def test_literals_are_aggregate_initializers():
    assert element_type(AFFINE_PAIR).literal((1.0, 0.0)) == "scangen_struct0{1.0, 0.0}"
    assert element_type(GAPS).literal(np.array((1, 2), GAPS)[()]) == \
        "scangen_struct0{((int)1), {}, ((int)2), {}}"
    assert element_type(NESTED).literal((1, 2.5, [3, 4], (5, 6.0))) == \
        ("scangen_struct1{((unsigned char)1), 2.5, {((int)3), ((int)4)}, "
         "scangen_struct0{((short)5), 6.0f}}")


@pytest.mark.parametrize("identity,message", [
    ((1.0,), "1 values for 2 fields"), ((1.0, 0.0, 2.0), "3 values for 2 fields"),
    ((1.0, "x"), "field 'c'"), (1.0, "not a tuple of field values"),
])
def test_bad_identities(identity, message):
    with pytest.raises((ValueError, TypeError), match=message):
        scangen.Scan(AFFINE_PAIR, scangen.Operator("a", identity, name="bad"))


@pytest.mark.parametrize("dtype,message", [
    (np.dtype([("a", np.int8), ("b", np.float64)]), "offset 1, not a multiple of its "
                                                     "alignment 8: build the dtype with align"),
    (np.dtype([("x-y", np.int32)]), "field 'x-y' of .* is not a C identifier"),
    (np.dtype([("_x", np.int32)]), "field '_x' of .* starts with '_'"),
    (np.dtype([("c", np.bool_)]), "has type bool"),
    (np.dtype([]), r"structured dtype \[\] has no data .*needs at least one field"),
    (np.dtype([("a", [])]), "has no data"),
    (np.dtype([("a", np.int32), ("b", np.int32, (0,))]), "field 'b' .* is an empty sub-array"),
] + [
    (np.dtype([("ok", np.int32), (name, np.int32)]),
     f"field '{name}' of .* {reason}.*; rename the field")
    for name, reason in [("int", "is a C\\+\\+ keyword"), ("float", "is a C\\+\\+ keyword"),
                         ("class", "keyword"), ("template", "keyword"), ("and", "keyword"),
                         ("NULL", "a macro"), ("linux", "a macro"), ("__half", "starts with '_'"),
                         ("__x", "starts with '_'"), ("scangen_x", "starts with 'scangen_'")]
] + [
    (np.dtype([("outer", [("register", np.int32)])]), "field 'register'"),
])
def test_bad_struct_dtypes(dtype, message):
    with pytest.raises(TypeError, match=message):
        scangen.Scan(dtype, scangen.Operator("a", (0,), name="x"))


def test_builtins_refuse_structs_with_advice():
    with pytest.raises(TypeError, match="built-in operator 'max' takes scalar types"):
        scangen.Scan(AFFINE_PAIR, "max")


def test_a_void_identity_is_kept_hashable():
    op = scangen.Operator("a", np.array((1.0, 0.0), AFFINE_PAIR)[()], name="void_identity")
    assert op.identity == (1.0, 0.0) and hash(op)


def test_reference_scans_structs_in_order(rng):
    x = np.zeros(40, AFFINE_PAIR)
    x["m"], x["c"] = rng.uniform(0.5, 1.5, 40), rng.normal(size=40)
    got = scangen.reference_scan(x, AFFINE_PAIRS)
    m, c = 1.0, 0.0
    for i in range(40):  # apply map 0, then 1, ... in order
        m, c = x["m"][i] * m, x["m"][i] * c + x["c"][i]
        assert got["m"][i] == pytest.approx(m) and got["c"][i] == pytest.approx(c)
    exclusive = scangen.reference_scan(x, AFFINE_PAIRS, "exclusive")
    assert tuple(exclusive[0]) == (1.0, 0.0) and exclusive[1] == got[0]
    values = np.zeros(6, VALUE_INDEX)
    values["value"], values["index"] = [3, 5, 5, 1, 7, 7], np.arange(6)
    argmax = scangen.reference_scan(values, ARGMAX)
    assert argmax["index"].tolist() == [0, 1, 1, 1, 4, 4]  # ties keep the first


@needs_nvcc
def test_struct_scans_compile_on_every_strategy():
    kernels = []
    for strategy in scangen.STRATEGIES:
        for dtype, op in ((AFFINE_PAIR, AFFINE_PAIRS), (VALUE_INDEX, ARGMAX),
                          (STATS, RUNNING_STATS)):
            kernels.append(scangen.Scan(dtype, op, strategy=strategy, mode="exclusive"))
        kernels.append(scangen.SegmentedScan(AFFINE_PAIR, AFFINE_PAIRS, strategy=strategy)
                       .kernel("flags", np.dtype(np.uint8)))
    kernels.append(scangen.Scan(NESTED, scangen.Operator("b.flag ? b : a", (0, 0.0, [0, 0],
                                                                            (0, 0.0)),
                                                         name="pick")))
    kernels.append(scangen.Scan(GAPS, scangen.Operator("b.a ? b : a", (0, 0), name="pick2"),
                                strategy="decoupled_lookback"))
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda k: k.check_compile(), kernels))


def test_sub_arrays_of_structs_and_of_two_dimensions():
    points = np.dtype([("p", [("x", "f4"), ("y", "f4")], (2,)), ("q", "i4")])
    value = np.array(([(1, 2), (3, 4)], 5), points)[()]
    literal = "scangen_struct1{{scangen_struct0{1.0f, 2.0f}, scangen_struct0{3.0f, 4.0f}}, ((int)5)}"
    assert element_type(points).literal(value) == literal
    assert element_type(points).literal((((1, 2), (3, 4)), 5)) == literal
    grid = element_type(np.dtype([("v", np.float32, (2, 3))]))
    assert grid.literal(([[1, 2, 3], [4, 5, 6]],)) == \
        "scangen_struct0{{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}}"
    with pytest.raises(ValueError, match="field 'v': 6 elements where the sub-array has 2"):
        grid.literal(([1, 2, 3, 4, 5, 6],))


def test_check_operator_refuses_structs_before_any_gpu_work():
    with pytest.raises(TypeError, match="check_operator samples scalar types"):
        scangen.check_operator(AFFINE_PAIRS, AFFINE_PAIR)
