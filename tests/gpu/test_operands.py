"""Scans of several operands on the GPU: associative_scan (structure of arrays, any axis,
non-commutative operators, mixed dtypes, exclusive and reverse, out= in place) against
tests.support.axis_reference over the operands packed as structs, and linear_recurrence
against a sequential loop (real and complex, forward and reverse, with h0), and its
gradients (linear_recurrence_gradients) against the adjoint loop."""
import itertools

import numpy as np
import pytest

import scangen
from scangen.operands import _gradient_kernels, _operand_kernels, _recurrence_kernels

from scangen.types import as_dtype

from tests.support import (AFFINE_PAIR, AFFINE_PAIRS, BFLOAT16, axis_reference,
                           exact_affine_pairs, precompile)

#: (shape, axis): every kernel (columns, short rows, row tiles, 1-D), column tiles cut
#: short, several chunks of rows, rows of several tiles, rows one to a smaller tile.
SHAPES = [((4, 300, 33), 1), ((4, 300, 33), 0), ((4, 300, 33), 2), ((3000,), 0),
          ((700, 40), 0), ((5, 1, 70), 1), ((3, 2, 9000), 2), ((6, 1500), 1)]
RECURRENCE_TYPES = ["float32", "float64", "complex64", "complex128"]
#: 16-bit floats (bfloat16 where ml_dtypes is installed), recurring in float32.
NARROW = ["float16"] + (["bfloat16"] if BFLOAT16 is not None else [])
#: Sums of a float32 field and an int32 field at once (tuple form: fields f0 and f1).
PAIR_SUMS = scangen.Operator("scan_t{a.f0 + b.f0, a.f1 + b.f1}", (0.0, 0), name="pair_sums")
PAIR_SUM_DTYPES = (np.dtype(np.float32), np.dtype(np.int32))


@pytest.fixture(scope="module", autouse=True)
def _compile_in_parallel():
    kernels = []
    for mode, reverse in itertools.product(scangen.MODES, (False, True)):
        kernels.append(_operand_kernels(AFFINE_PAIRS, ("m", "c"), (np.dtype(np.float64),) * 2,
                                        mode, reverse, False, ()))
    kernels.append(_operand_kernels(PAIR_SUMS, ("f0", "f1"), PAIR_SUM_DTYPES, "inclusive",
                                    False, False, ()))
    for dtype, reverse, h0 in itertools.product(RECURRENCE_TYPES, (False, True),
                                                (False, "number", "lines")):
        kernels.append(_recurrence_kernels(np.dtype(dtype), reverse, h0, ()))
        kernels.append(_gradient_kernels(np.dtype(dtype), reverse, h0, ()))
    kernels += [make(as_dtype(dtype), False, "number", ()) for dtype in NARROW
                for make in (_recurrence_kernels, _gradient_kernels)]
    precompile([k for lines in kernels
                for k in (lines.kernel, lines.rows_kernel, lines.columns_kernel,
                          lines.row_tiles_kernel(1500))])


@pytest.mark.parametrize("mode", scangen.MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_affine_maps_as_two_arrays(gpu, rng, mode, reverse):
    """Composing affine maps (m, c), given as two float64 arrays, along every axis: the
    same results as the packed struct scan's reference, field by field."""
    for shape, axis in SHAPES:
        packed = exact_affine_pairs(rng, int(np.prod(shape))).reshape(shape)
        m, c = gpu.to_gpu(packed["m"].copy()), gpu.to_gpu(packed["c"].copy())
        got = scangen.associative_scan(AFFINE_PAIRS, {"m": m, "c": c}, axis=axis, mode=mode,
                                       reverse=reverse)
        want = axis_reference(packed, AFFINE_PAIRS, mode, axis, reverse=reverse)
        assert set(got) == {"m", "c"}
        for field in ("m", "c"):
            np.testing.assert_array_equal(got[field].get(), want[field],
                                          err_msg=f"{field} {shape} axis={axis}")


def test_mixed_dtypes_in_place(gpu, rng):
    """A float32 and an int32 operand summed at once (tuple form), written over the
    operands themselves."""
    values = rng.integers(-50, 50, (6, 500)).astype(np.float32)
    counts = rng.integers(0, 3, (6, 500)).astype(np.int32)
    for axis in (0, 1):
        x, k = gpu.to_gpu(values), gpu.to_gpu(counts)
        got = scangen.associative_scan(PAIR_SUMS, (x, k), axis=axis, out=(x, k))
        assert got[0] is x and got[1] is k
        np.testing.assert_array_equal(x.get(), np.cumsum(values, axis=axis, dtype=np.float32))
        np.testing.assert_array_equal(k.get(), np.cumsum(counts, axis=axis, dtype=np.int32))


def recurrence_reference(a, b, axis, h0=0, reverse=False):
    """h[t] = a[t] h[t-1] + b[t] along axis, one step at a time (in float64/complex128)."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    a_, b_ = (np.moveaxis(v.astype(wide), axis, -1) for v in (a, b))
    if reverse:
        a_, b_ = a_[..., ::-1], b_[..., ::-1]
    h = np.empty_like(b_)
    previous = np.full(a_.shape[:-1], h0, wide)
    for t in range(a_.shape[-1]):
        previous = a_[..., t] * previous + b_[..., t]
        h[..., t] = previous
    if reverse:
        h = h[..., ::-1]
    return np.moveaxis(h, -1, axis)


def recurrence_input(rng, dtype, shape):
    """Multipliers of magnitude 0.5 to 1 (a decaying state) and offsets in [-1, 1]."""
    def part():
        return rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    a = part() if np.dtype(dtype).kind == "f" else part() * np.exp(1j * rng.uniform(0, 6, shape))
    b = rng.uniform(-1, 1, shape) + (1j * rng.uniform(-1, 1, shape)
                                     if np.dtype(dtype).kind == "c" else 0)
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("dtype", RECURRENCE_TYPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence(gpu, rng, dtype, reverse):
    tolerance = 2e-4 if dtype in ("float32", "complex64") else 1e-11
    for (shape, axis), h0 in itertools.product(SHAPES, (None, 0.75)):
        a, b = recurrence_input(rng, dtype, shape)
        if h0 is not None and np.dtype(dtype).kind == "c":
            h0 = 0.75 - 0.5j
        got = scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b), axis=axis, h0=h0,
                                        reverse=reverse).get()
        assert got.dtype == np.dtype(dtype) and got.shape == shape
        want = recurrence_reference(a, b, axis, 0 if h0 is None else h0, reverse)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance,
                                   err_msg=f"{shape} axis={axis} h0={h0}")


@pytest.mark.parametrize("dtype", NARROW)
def test_sixteen_bit_floats_recur_in_float32(gpu, rng, dtype):
    """float16 and bfloat16 arrays: h is the recurrence of their values in float32, rounded
    once. A state of the narrow type itself would round at every step and drift by many of
    its units over hundreds of steps; this allows two."""
    dtype = as_dtype(dtype)
    eps = float(scangen.types.element_type(dtype).finfo().eps)
    for shape, axis in SHAPES:
        a, b = (v.astype(dtype) for v in recurrence_input(rng, "float32", shape))
        got = scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b), axis=axis, h0=0.75).get()
        assert got.dtype == dtype and got.shape == shape
        want = recurrence_reference(a.astype(np.float64), b.astype(np.float64), axis, 0.75)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 * eps,
                                   atol=2 * eps * np.abs(want).max(),
                                   err_msg=f"{shape} axis={axis}")


@pytest.mark.parametrize("dtype", RECURRENCE_TYPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_from_a_state_per_line(gpu, rng, dtype, reverse):
    """h0 an array of one value per line (a's shape without the axis): each line starts
    from its own state, as a chunk of a longer sequence continues the one before."""
    tolerance = 2e-4 if dtype in ("float32", "complex64") else 1e-11
    for shape, axis in SHAPES:
        a, b = recurrence_input(rng, dtype, shape)
        lines = shape[:axis] + shape[axis + 1:]
        h0 = np.asarray(recurrence_input(rng, dtype, lines)[1])
        got = scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b), axis=axis,
                                        h0=gpu.to_gpu(h0), reverse=reverse).get()
        want = recurrence_reference(a, b, axis, h0, reverse)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance,
                                   err_msg=f"{shape} axis={axis}")


def gradient_reference(a, h, grad_h, axis, h0=0, reverse=False):
    """(grad_a, grad_b) of h = linear_recurrence(a, b, axis, h0, reverse) given grad_h, one
    step at a time against the recurrence's direction: g[t] = grad_h[t] + conj(a[t+1])
    g[t+1], grad_b = g, grad_a[t] = g[t] conj(h[t-1]), h[-1] = h0 (float64/complex128)."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    a_, h_, grad_h_ = (np.moveaxis(v.astype(wide), axis, -1) for v in (a, h, grad_h))
    if reverse:
        a_, h_, grad_h_ = a_[..., ::-1], h_[..., ::-1], grad_h_[..., ::-1]
    steps = a_.shape[-1]
    g, grad_a = np.empty_like(grad_h_), np.empty_like(grad_h_)
    later = np.zeros(a_.shape[:-1], wide)
    for t in range(steps - 1, -1, -1):
        later = grad_h_[..., t] + (np.conj(a_[..., t + 1]) * later if t + 1 < steps else 0)
        g[..., t] = later
        before = h_[..., t - 1] if t else np.broadcast_to(np.asarray(h0, wide),
                                                          a_.shape[:-1])
        grad_a[..., t] = later * np.conj(before)
    if reverse:
        g, grad_a = g[..., ::-1], grad_a[..., ::-1]
    return np.moveaxis(grad_a, -1, axis), np.moveaxis(g, -1, axis)


@pytest.mark.parametrize("dtype,reverse", [
    *itertools.product(RECURRENCE_TYPES, (False, True)),
    # 16-bit floats: one direction covers their reads and rounding
    *((narrow, False) for narrow in NARROW)])
def test_linear_recurrence_gradients(gpu, rng, dtype, reverse):
    """One scan's gradients, against the adjoint loop, along every axis of every shape (the
    columns, rows and 1-D kernels), with no h0, a number (real or complex) and an array of
    one value per line, into new arrays and into poisoned ones of the caller's."""
    dtype = as_dtype(dtype)
    narrow = scangen.types.element_type(dtype).is_half
    tolerance = {"float64": 1e-11, "complex128": 1e-11}.get(dtype.name, 2e-4)
    for (shape, axis), form in itertools.product(SHAPES, ("none", "number", "lines")):
        a, grad_h = (v.astype(dtype) for v in recurrence_input(
            rng, "float32" if narrow else dtype, shape))
        h = recurrence_input(rng, "float32" if narrow else dtype, shape)[1].astype(dtype)
        lines = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
        h0 = {"none": None, "number": 0.75 - 0.5j if dtype.kind == "c" else 0.75,
              "lines": np.asarray(recurrence_input(rng, "float32" if narrow else dtype,
                                                   lines)[1]).astype(dtype)}[form]
        given = gpu.to_gpu(h0) if form == "lines" else h0
        arrays = [gpu.to_gpu(v) for v in (a, h, grad_h)]
        if form == "number":  # the caller's outputs, poisoned
            outputs = {name: gpu.to_gpu(np.full(shape, np.nan, dtype))
                       for name in ("grad_a", "grad_b")}
            got = scangen.linear_recurrence_gradients(*arrays, axis=axis, h0=given,
                                                      reverse=reverse, **outputs)
            assert got == (outputs["grad_a"], outputs["grad_b"])
        else:
            got = scangen.linear_recurrence_gradients(*arrays, axis=axis, h0=given,
                                                      reverse=reverse)
        want = gradient_reference(*(v.astype(np.float64) if narrow else v
                                    for v in (a, h, grad_h)), axis,
                                  0 if h0 is None else h0, reverse)
        for name, array, expected in zip(("grad_a", "grad_b"), got, want):
            values = array.get()
            assert values.dtype == dtype and values.shape == shape
            if narrow:
                eps = float(scangen.types.element_type(dtype).finfo().eps)
                np.testing.assert_allclose(values.astype(np.float64), expected,
                                           rtol=2 * eps, atol=2 * eps * np.abs(expected).max(),
                                           err_msg=f"{name} {shape} axis={axis} h0={form}")
            else:
                np.testing.assert_allclose(values, expected, rtol=tolerance, atol=tolerance,
                                           err_msg=f"{name} {shape} axis={axis} h0={form}")


def test_linear_recurrence_into_out_and_errors(gpu, rng):
    a, b = recurrence_input(rng, "float64", (3, 1000))
    out = gpu.to_gpu(np.full((3, 1000), np.nan))
    assert scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b), out=out) is out
    np.testing.assert_allclose(out.get(), recurrence_reference(a, b, -1), rtol=1e-11,
                               atol=1e-11)
    with pytest.raises(TypeError, match="share one float or complex dtype"):
        scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b.astype(np.float32)))
    with pytest.raises(ValueError, match="one shape"):
        scangen.linear_recurrence(gpu.to_gpu(a), gpu.to_gpu(b[:, :10].copy()))
    with pytest.raises(ValueError, match="operand c has shape"):
        scangen.associative_scan(AFFINE_PAIRS, {"m": gpu.to_gpu(a), "c": gpu.to_gpu(b[:2])})
    packed = np.zeros(4, AFFINE_PAIR)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        scangen.associative_scan(AFFINE_PAIRS, {"m": gpu.to_gpu(packed["m"].copy()),
                                                "c": gpu.to_gpu(packed["c"].copy())}, axis=2)
