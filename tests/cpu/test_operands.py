"""Scans of several operands without a GPU: how operands become struct fields, the
composition a linear recurrence scans (forward and reverse) checked on host values, and
every kernel compiled by nvcc for real, complex and half types, and 16-bit floats
recurring in float32."""
import numpy as np
import pytest

import scangen
from scangen.one_shot import options_key
from scangen.operands import (_fields, _gradient_kernels, _operand_kernels, _recurrence_kernels,
                              _recurrence_operator, recurrence_state_dtype)
from scangen.types import as_dtype, element_type

from tests.support import (AFFINE_PAIRS, BFLOAT16, FakeDeviceArray, needs_nvcc,
                           record_launches, simulate_device)

#: The 16-bit floats (bfloat16 where ml_dtypes is installed).
NARROW = ("float16",) + (("bfloat16",) if BFLOAT16 is not None else ())


def test_operands_become_fields():
    a, b = np.zeros(3), np.zeros(3)
    assert _fields((a, b)) == (("f0", "f1"), (a, b))
    assert _fields({"m": a, "c": b}) == (("m", "c"), (a, b))
    with pytest.raises(ValueError, match="C identifiers"):
        _fields({"not a name": a})
    with pytest.raises(ValueError, match="operands is empty"):
        _fields(())
    with pytest.raises(TypeError, match="tuple \\(or dict\\) of arrays"):
        _fields(a)
    assert options_key({"section_size": 64, "algorithm": "warp_shuffle"}) == \
        (("algorithm", "warp_shuffle"), ("section_size", 64))
    with pytest.raises(TypeError, match="must be hashable"):
        options_key({"tuning": []})



@pytest.mark.parametrize("reverse", [False, True])
def test_recurrence_operator_composes_maps_in_order(reverse):
    """The operator's C, read back as Python over two maps (m, c): a then b forward; b
    then a in reverse (the later map applies first)."""
    op = _recurrence_operator(np.dtype(np.float64), reverse)
    body = op.c_expression(scangen.types.element_type(
        np.dtype([("m", np.float64), ("c", np.float64)], align=True)))
    fields = body[len("scan_t{"):-1]
    a, b = {"m": 3.0, "c": 5.0}, {"m": 7.0, "c": 11.0}

    class Map:
        def __init__(self, d):
            self.m, self.c = d["m"], d["c"]
    m, c = eval(f"({fields})", {}, {"a": Map(a), "b": Map(b)})
    first, then = (b, a) if reverse else (a, b)
    # h -> then.m * (first.m * h + first.c) + then.c
    assert (m, c) == (then["m"] * first["m"], then["m"] * first["c"] + then["c"])


@needs_nvcc
def test_every_operand_kernel_compiles(nvcc):
    pair_sums = scangen.Operator("scan_t{a.f0 + b.f0, a.f1 + b.f1}", (0.0, 0), name="sums")
    kernels = [_operand_kernels(AFFINE_PAIRS, ("m", "c"), (np.dtype(np.float64),) * 2,
                                "exclusive", True, False, ()),
               _operand_kernels(pair_sums, ("f0", "f1"),
                                (np.dtype(np.float16), np.dtype(np.int32)), "inclusive",
                                False, False, ())]
    kernels += [make(as_dtype(d), reverse, h0, ())
                for make in (_recurrence_kernels, _gradient_kernels)
                for d in NARROW + ("float32", "complex64", "complex128")
                for reverse, h0 in ((False, "number"), (True, "lines"))]
    kernels += [_gradient_kernels(np.dtype(np.float64), True, False, ())]
    modules = [k.scan_module for lines in kernels
               for k in (lines.kernel, lines.rows_kernel, lines.columns_kernel)]
    scangen.compile.check_all_with_nvcc(modules)


@pytest.mark.parametrize("dtype", NARROW)
def test_sixteen_bit_floats_recur_in_float32(dtype):
    """float16 and bfloat16 arrays are read into float32 maps and only h is rounded back:
    their own products and sums would round at every step of the tree."""
    dtype = as_dtype(dtype)
    assert recurrence_state_dtype(dtype) == np.float32
    lines = _recurrence_kernels(dtype, False, "number", ())
    spec, hooks = lines.kernel.spec, lines.kernel.scan_module.hooks
    assert [spec.etype.dtype[name] for name in ("m", "c")] == [np.dtype(np.float32)] * 2
    c_name = element_type(dtype).c_name
    assert hooks.input_expr == "scan_t{(float)(a[i]), (float)(b[i])}"
    assert hooks.output_statement == f"h[i] = ({c_name})(float)(item.c);"
    assert [a.c_type for a in hooks.arguments[:3]] == [c_name] * 3
    for wide in ("float32", "float64", "complex64"):
        assert recurrence_state_dtype(np.dtype(wide)) == np.dtype(wide)


def test_a_per_line_h0_is_checked_before_any_work(monkeypatch):
    """An h0 array of the wrong shape or dtype is refused, naming what it must be."""
    simulate_device(monkeypatch)
    a = FakeDeviceArray((3, 5), np.float32, address=0x1000)
    b = FakeDeviceArray((3, 5), np.float32, address=0x2000)
    out = FakeDeviceArray((3, 5), np.float32, address=0x3000)
    launched = record_launches(monkeypatch)
    for h0, axis in [(FakeDeviceArray((5,), np.float32, address=0x4000), 1),
                     (FakeDeviceArray((3,), np.float64, address=0x4000), 1)]:
        with pytest.raises(ValueError, match=r"h0 must be a number or an array of dtype "
                                             r"float32 and shape \(3,\)"):
            scangen.linear_recurrence(a, b, axis=axis, h0=h0, out=out)
    assert not launched
    scangen.linear_recurrence(a, b, axis=0, h0=FakeDeviceArray((5,), np.float32,
                                                                 address=0x4000), out=out)
    (launch,) = launched
    assert launch.values[3:] == (0x4000,)  # h0: the kernels know each element's line


def test_the_recurrence_writes_in_place_or_to_memory_of_its_own(monkeypatch):
    """out may be a or b itself (each element is read before its own is written); any
    other overlap with them, or any overlap with an h0 array (read at every step of its
    line), is refused before any work."""
    simulate_device(monkeypatch)
    launched = record_launches(monkeypatch)

    def array(address, shape=(3, 5)):
        return FakeDeviceArray(shape, np.float32, address=address)
    a, b, h0 = array(0x10000), array(0x20000), array(0x30000, (5,))
    for out in (a, b, array(0x20000)):  # the last: b's memory under another view
        assert scangen.linear_recurrence(a, b, axis=0, h0=h0, out=out) is out
    assert [launch.values[2] for launch in launched] == [0x10000, 0x20000, 0x20000]
    for out, message in [(array(0x10004), "out overlaps a without being a"),
                         (array(0x1fff0), "out overlaps b without being b"),
                         (array(0x2fff0), "out overlaps h0: every step of a line reads h0")]:
        with pytest.raises(ValueError, match=message):
            scangen.linear_recurrence(a, b, axis=0, h0=h0, out=out)
    assert len(launched) == 3


@pytest.mark.parametrize("reverse", [False, True])
def test_gradient_kernels_read_their_own_step_and_h_one_step_back(reverse):
    """The gradients' scan runs against the recurrence's direction over (conj(a), conj(a)
    grad_h) of each element's own step, adds grad_h to the exclusive prefix, and writes
    grad_a from h one step back (h0 at each line's first step, the last step of the
    kernel's scan, which the kernels count): its C, for real, complex and 16-bit arrays."""
    real = _gradient_kernels(np.dtype(np.float64), reverse, "number", ())
    hooks = real.kernel.scan_module.hooks
    assert real.kernel.scan_module.hooks.reverse is (not reverse)
    first = "step == length - 1"
    before = "i + inner" if reverse else "i - inner"
    assert hooks.input_expr == "scan_t{a[i], a[i] * grad_h[i]}"
    assert hooks.output_statement == (
        f"const double g = prev_item.c + grad_h[i]; grad_b[i] = g; "
        f"grad_a[i] = g * ({first} ? (double)h0_re : h[{before}]);")
    assert [a.name for a in hooks.arguments] == [
        "a", "grad_h", "h", "grad_a", "grad_b", "length", "inner", "h0_re", "h0_im"]
    complex_hooks = _gradient_kernels(np.dtype(np.complex64), reverse, "lines", ()) \
        .kernel.scan_module.hooks
    assert "lr_conj(a[i])" in complex_hooks.input_expr
    assert "lr_add(prev_item.c, grad_h[i])" in complex_hooks.output_statement
    assert "lr_mul(g, lr_conj(" in complex_hooks.output_statement
    assert "h0[line]" in complex_hooks.output_statement
    narrow = _gradient_kernels(np.dtype(np.float16), reverse, False, ()).kernel
    assert narrow.spec.etype.dtype["m"] == np.float32
    assert "grad_b[i] = (__half)(float)(g);" in narrow.scan_module.hooks.output_statement


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape, axis", [((7,), 0), ((3, 5, 4), 1), ((2, 6), 1), ((1, 3), 0)])
def test_gradient_scan_of_own_steps_gives_the_gradients(shape, axis, reverse):
    """The identity the gradients' kernel rests on, in numpy on random complex data: u[t] =
    conj(a[t]) (grad_h[t] + u[t+1]) scanned against the recurrence's direction (u past the
    line 0), then g[t] = grad_h[t] + u[t+1], equals the gradient's own recurrence g[t] =
    grad_h[t] + conj(a[t+1]) g[t+1]."""
    rng = np.random.default_rng(len(shape) * 10 + axis + reverse)
    a, grad_h = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
                 for _ in range(2))
    # lines along the last axis, walked from where the gradients' scan starts
    a, grad_h = (np.moveaxis(x, axis, -1) for x in (a, grad_h))
    if not reverse:
        a, grad_h = a[..., ::-1], grad_h[..., ::-1]
    length = a.shape[-1]
    expected, g = np.empty_like(a), np.zeros(a.shape[:-1], complex)
    for t in range(length):  # step t follows step t - 1 of the recurrence in this order
        g = grad_h[..., t] + (np.conj(a[..., t - 1]) * g if t else 0)
        expected[..., t] = g
    got, u = np.empty_like(a), np.zeros(a.shape[:-1], complex)
    for t in range(length):
        got[..., t] = grad_h[..., t] + u  # the exclusive prefix
        u = np.conj(a[..., t]) * (grad_h[..., t] + u)  # the element (conj a, conj a grad_h)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_gradients_launch_with_their_shape_and_refuse_what_they_cannot_do(monkeypatch):
    """One launch of the gradients' kernel: the three inputs, the two outputs, the axis's
    length and inner size, and h0 as (real, imaginary) or an array of one value per line;
    outputs that overlap an input, and arrays of other shapes or dtypes, are refused before
    any work."""
    simulate_device(monkeypatch)
    launched = record_launches(monkeypatch)

    def array(address, shape=(3, 5, 4), dtype=np.complex64):
        return FakeDeviceArray(shape, dtype, address=address)
    a, h, grad_h = array(0x10000), array(0x20000), array(0x30000)
    grad_a, grad_b = array(0x40000), array(0x50000)
    assert scangen.linear_recurrence_gradients(a, h, grad_h, axis=1, h0=0.5 - 2j,
                                               grad_a=grad_a, grad_b=grad_b) == (grad_a, grad_b)
    (launch,) = launched
    assert launch.values == (0x10000, 0x30000, 0x20000, 0x40000, 0x50000, 5, 4, 0.5, -2.0)
    h0 = array(0x60000, (3, 4))
    scangen.linear_recurrence_gradients(a, h, grad_h, axis=1, h0=h0, reverse=True,
                                        grad_a=grad_a, grad_b=grad_b)
    assert launched[1].values[5:] == (5, 4, 0x60000)
    for kwargs, error, message in [
            (dict(grad_a=a), ValueError, "grad_a overlaps a"),
            (dict(grad_b=grad_h), ValueError, "grad_b overlaps grad_h"),
            (dict(grad_a=grad_a, grad_b=grad_a), ValueError, "grad_a overlaps grad_b"),
            (dict(h0=h0, grad_b=array(0x60000)), ValueError, "grad_b overlaps h0"),
            (dict(grad_a=array(0x70000, (3, 5, 5))), ValueError,
             r"grad_a must have shape \(3, 5, 4\)"),
            (dict(h0=array(0x60000, (3, 5))), ValueError, r"h0 must be a number or an array"),
            (dict(axis=3), Exception, "axis")]:
        with pytest.raises(error, match=message):
            scangen.linear_recurrence_gradients(a, h, grad_h, **{"axis": 1, **kwargs})
    real = [array(k << 16, dtype=np.float32) for k in (1, 2, 3)]
    with pytest.raises(TypeError, match=r"h0=\(1\+2j\) is complex, but the arrays are"):
        scangen.linear_recurrence_gradients(*real, h0=1 + 2j)
    scangen.linear_recurrence_gradients(*real, h0=1 + 0j,
                                        grad_a=array(0x40000, dtype=np.float32),
                                        grad_b=array(0x50000, dtype=np.float32))
    assert launched[2].values[5:9] == (4, 1, 1.0, 0.0)  # along the last axis: inner 1
    with pytest.raises(TypeError, match="a and h and grad_h must share one float or complex"):
        scangen.linear_recurrence_gradients(a, array(0x20000, dtype=np.complex128), grad_h)
    with pytest.raises(TypeError, match="float or complex dtype, not int32"):
        scangen.linear_recurrence_gradients(*(array(k << 16, dtype=np.int32) for k in (1, 2, 3)))
    assert len(launched) == 3
