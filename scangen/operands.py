"""Scans of several arrays at once: ``associative_scan(operator, (a, b), axis=k)`` combines
tuples of elements, one from each array, and writes each result field to its own array
(structure of arrays: no packing copy), along any axis (scangen.lines); and
``linear_recurrence(a, b)``, ``h[t] = a[t] * h[t-1] + b[t]``, built on it.

Inside the kernel the operands of one index are one struct value (``scan_t``), whose fields
are named by the operands (``f0``, ``f1``, ... for a tuple; the keys of a dict), so an
operator is written as a struct operator is: ``scan_t{b.m * a.m, b.m * a.c + b.c}``, ``a``
the earlier operand and ``b`` the later one.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

from .interop import Call, overlaps
from .kernel import ScanKernel
from .lines import line_shape
from .one_shot import options_key
from .ops import Operator
from .spec import as_flag, check_mode
from .types import conversion, element_type

__all__ = ["associative_scan", "linear_recurrence", "linear_recurrence_gradients"]


def _fields(operands) -> tuple[tuple[str, ...], tuple]:
    """(field names, arrays) of a tuple or dict of operands."""
    if isinstance(operands, dict):
        names, arrays = tuple(operands), tuple(operands.values())
        for name in names:
            if not (isinstance(name, str) and name.isidentifier()):
                raise ValueError(f"operand names are C identifiers (struct fields), not "
                                 f"{name!r}")
    elif isinstance(operands, (tuple, list)):
        arrays = tuple(operands)
        names = tuple(f"f{k}" for k in range(len(arrays)))
    else:
        raise TypeError(f"operands must be a tuple (or dict) of arrays, not "
                        f"{type(operands).__name__}")
    if not arrays:
        raise ValueError("operands is empty: give at least one array")
    return names, arrays


@functools.lru_cache(maxsize=64)
def _operand_kernels(operator, names, dtypes, mode, reverse, takes_initial, options):
    """The LineKernels of a scan of operands of ``dtypes`` named ``names``: a struct of
    them is the scan type (whose declarations bring its fields' types); each operand is
    read from its own array and each result field written to its own."""
    struct = np.dtype(list(zip(names, dtypes)), align=True)
    c_types = [element_type(d).c_name for d in dtypes]
    arguments = [f"const {c} *x_{k}" for k, c in enumerate(c_types)] + \
                [f"{c} *out_{k}" for k, c in enumerate(c_types)]
    result = "item" if mode == "inclusive" else "prev_item"
    initial = np.zeros((), struct)[()] if takes_initial else None
    return ScanKernel(
        struct, operator, title=f"{mode} scan of {len(names)} operands",
        arguments=", ".join(arguments),
        input_expr="scan_t{" + ", ".join(f"x_{k}[i]" for k in range(len(names))) + "}",
        output_statement=" ".join(f"out_{k}[i] = {result}.{name};"
                                  for k, name in enumerate(names)),
        reverse=reverse, initial=initial,
        **dict(options)).lines


def _run(kernels_of, names, arrays, out, axis, stream, initial):
    """Check the operands (and ``out``: the same form), allocate what is missing, launch;
    return the results as a tuple in operand order."""
    if out is not None:
        out_names, outs = _fields(out)
        if len(outs) != len(arrays) or (isinstance(out, dict) and out_names != names):
            raise ValueError(f"out must name the same operands as operands: {names}")
    else:
        outs = (None,) * len(arrays)
    inputs = {f"x_{k}": a for k, a in enumerate(arrays)}
    results = {f"out_{k}": o for k, o in enumerate(outs)}
    call = Call(stream, {**inputs, **results}, writes=tuple(results))
    views = call.views
    shape = tuple(views["x_0"].shape)
    dtypes = tuple(views[f"x_{k}"].dtype for k in range(len(arrays)))
    if not shape:
        raise ValueError("operands must have at least one dimension, got 0-d arrays")
    for k, name in enumerate(names):  # every check before any allocation
        x, o = views[f"x_{k}"], views[f"out_{k}"]
        if tuple(x.shape) != shape:
            raise ValueError(f"operand {name} has shape {x.shape}, but {names[0]} has {shape}")
        if o is None:
            continue
        if o.dtype != x.dtype or tuple(o.shape) != shape:
            raise ValueError(f"out for {name} must have shape {shape} and dtype {x.dtype}, "
                             f"not {o.shape} {o.dtype}")
        for j in range(len(arrays)):
            if outs[k] is not arrays[j] and overlaps(views[f"x_{j}"], o):
                raise ValueError(f"out for {name} overlaps an operand without being it")
    line_shape(shape, axis)  # a bad axis raises before any allocation
    for k in range(len(arrays)):
        if views[f"out_{k}"] is None:
            results[f"out_{k}"], views[f"out_{k}"] = call.empty(shape, dtypes[k])
    kernels = kernels_of(dtypes)
    pointers = tuple(views[f"x_{k}"].ptr for k in range(len(arrays))) + \
        tuple(views[f"out_{k}"].ptr for k in range(len(arrays)))
    kernels.launch(pointers, shape, axis, call.stream, initial)
    return call.returned(tuple(results[f"out_{k}"] for k in range(len(arrays))))


def associative_scan(operator, operands, axis=-1, *, mode="inclusive", reverse=False,
                     out=None, stream=None, **options):
    """Scan several arrays of one shape at once along ``axis``, combining their elements
    as tuples, and return each result field as its own array.

    Parameters
    ----------
    operator:
        A scangen.Operator over a struct with one field per operand, named ``f0``, ``f1``,
        ... (a tuple of operands) or by the keys of a dict; ``a`` is the earlier operand:
        ``Operator("scan_t{b.m * a.m, b.m * a.c + b.c}", (1.0, 0.0))`` composes affine maps
        (m, c). Associative; it need not be commutative. Its identity is a tuple of field
        values.
    operands:
        A tuple (or dict) of C-contiguous device arrays of one shape and kind (CuPy, torch,
        pycuda, ...); their dtypes may differ. Read in place: no packing copy.
    axis:
        The axis scanned (default: the last), every line along it on its own.
    mode, reverse:
        As for scangen.Scan.
    out:
        Where to write, of the same form as ``operands`` (may be the operands themselves);
        default: new arrays of their kind.
    stream:
        As for scangen.inclusive_scan.
    **options:
        algorithm, section_size, items_per_thread, strategy, tuning, as for scangen.Scan.

    Returns
    -------
    The results, of the form of ``operands``: a tuple, or a dict by the same names.
    """
    names, arrays = _fields(operands)
    mode, reverse, key = check_mode(mode), as_flag("reverse", reverse), options_key(options)
    results = _run(lambda dtypes: _operand_kernels(operator, names, dtypes, mode, reverse,
                                                   False, key),
                   names, arrays, out, axis, stream, None)
    return dict(zip(names, results)) if isinstance(operands, dict) else results


def _recurrence_operator(dtype: np.dtype, reverse: bool) -> Operator:
    """Composition of the affine maps h -> m h + c of (m, c) pairs of ``dtype``, in array
    order (``reverse``: the later map applied first, for h[t] = m[t] h[t+1] + c[t])."""
    etype = element_type(dtype)
    if etype.is_complex:
        # numpy's complex layout has no C operators: products and sums by parts
        c = etype.c_name
        preamble = (f"static __device__ __forceinline__ {c} lr_mul({c} x, {c} y)\n"
                    f"{{ return {c}{{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re}}; }}\n"
                    f"static __device__ __forceinline__ {c} lr_add({c} x, {c} y)\n"
                    f"{{ return {c}{{x.re + y.re, x.im + y.im}}; }}")
        mul, add = "lr_mul({}, {})", "lr_add({}, {})"
    else:
        preamble, mul, add = "", "{} * {}", "{} + {}"
    first, then = ("b", "a") if reverse else ("a", "b")
    expression = (f"scan_t{{{mul.format(f'{then}.m', f'{first}.m')}, "
                  f"{add.format(mul.format(f'{then}.m', f'{first}.c'), f'{then}.c')}}}")
    return Operator(expression, (1, 0), name="linear_recurrence" + ("_reverse" * reverse),
                    preamble=preamble)


def recurrence_state_dtype(dtype) -> np.dtype:
    """The dtype a linear recurrence over arrays of ``dtype`` composes its maps in: float32
    for the 16-bit floats (float16, bfloat16: their products and sums would round at every
    step), the dtype itself otherwise."""
    return np.dtype(np.float32) if element_type(dtype).is_half else np.dtype(dtype)


@functools.lru_cache(maxsize=64)
def _recurrence_kernels(dtype, reverse, h0, options):
    """The LineKernels of a linear recurrence over arrays of ``dtype``: (a, b) pairs read
    from two arrays, composed as affine maps of recurrence_state_dtype, and only the maps'
    offsets (h) written, in ``dtype``. ``h0``: False (h[-1] = 0), "number" (one value, the
    scan's initial value (1, h0)) or "lines" (an array of one value per line, which the
    output applies to each composed map: h = m * h0[line] + c, ``line`` the output
    statement's, which the kernels know without dividing i)."""
    values, state = element_type(dtype), element_type(recurrence_state_dtype(dtype))
    c = values.c_name
    pair = np.dtype([("m", state.dtype), ("c", state.dtype)], align=True)
    read = [conversion(values, state, f"{name}[i]") for name in ("a", "b")]
    arguments, result = f"const {c} *a, const {c} *b, {c} *h", "item.c"
    if h0 == "lines":
        arguments += f", const {c} *h0"
        start = conversion(values, state, "h0[line]")
        result = f"lr_add(lr_mul(item.m, {start}), item.c)" if state.is_complex else \
            f"item.m * {start} + item.c"
    return ScanKernel(
        pair, _recurrence_operator(state.dtype, reverse),
        title=f"linear recurrence{' in reverse' if reverse else ''}",
        arguments=arguments, input_expr=f"scan_t{{{read[0]}, {read[1]}}}",
        output_statement=f"h[i] = {conversion(state, values, result)};", reverse=reverse,
        # the arrays' C type, where the maps' type does not bring its header
        types=(values.dtype,) if values != state else (),
        initial=np.ones((), pair)[()] if h0 == "number" else None, **dict(options)).lines


@functools.lru_cache(maxsize=64)
def _gradient_kernels(dtype, reverse, h0, options):
    """The LineKernels of a linear recurrence's gradients (linear_recurrence_gradients) over
    arrays of ``dtype``, the recurrence ``reverse`` or not and ``h0`` False, "number" or
    "lines" as for _recurrence_kernels. ``i`` is the index into the C-contiguous arrays,
    ``length`` and ``inner`` arguments of the kernel.

    g[t] = grad_h[t] + conj(a[t+1]) g[t+1] (t+1: the step after t in the recurrence's
    direction) would take maps (conj(a[t+1]), grad_h[t]), each reading the multiplier one
    step on, which at a line's last step must be left out. The kernel scans instead, in the
    other direction, the maps (conj(a[t]), conj(a[t]) grad_h[t]) of u[t] = conj(a[t]) g[t]
    = conj(a[t]) (grad_h[t] + u[t+1]): every element reads its own step only, and the
    exclusive prefix at t is u[t+1] (0 where a line's scan starts), so g[t] = grad_h[t] +
    prev_item.c. It writes grad_b = g and grad_a = g * conj(h[before]) (before: the step
    ahead of t; h0 at a line's first step, which is the last ``step`` of the kernel's scan
    in either direction: the kernels count it, where a test of ``i`` would take a 64-bit
    remainder per element)."""
    values, state = element_type(dtype), element_type(recurrence_state_dtype(dtype))
    c, s = values.c_name, state.c_name
    pair = np.dtype([("m", state.dtype), ("c", state.dtype)], align=True)
    # The step ahead of t in the recurrence's direction, and whether t is a line's first
    # there: the last of the scan, which runs the other way.
    before, is_first = "i + inner" if reverse else "i - inner", "step == length - 1"
    arguments = f"const {c} *a, const {c} *grad_h, const {c} *h, {c} *grad_a, {c} *grad_b, " \
                "long long length, long long inner"
    if h0 == "lines":
        arguments += f", const {c} *h0"
        start = conversion(values, state, "h0[line]")
    elif h0 == "number":
        arguments += ", double h0_re, double h0_im"
        start = f"{s}{{({state.part.c_name})h0_re, ({state.part.c_name})h0_im}}" \
            if state.is_complex else f"({s})h0_re"
    else:
        start = state.literal(0)
    if state.is_complex:
        preamble = (f"static __device__ __forceinline__ {s} lr_conj({s} x)\n"
                    f"{{ return {s}{{x.re, -x.im}}; }}")
        conj, mul = "lr_conj({})", "lr_mul({}, {})"
    else:
        preamble, conj, mul = "", "{}", "{} * {}"
    multiplier = conj.format(conversion(values, state, "a[i]"))
    add = "lr_add({}, {})" if state.is_complex else "{} + {}"
    gradient = add.format("prev_item.c", conversion(values, state, "grad_h[i]"))
    earlier = f"({is_first} ? {start} : {conversion(values, state, f'h[{before}]')})"
    grad_a = conversion(state, values, mul.format("g", conj.format(earlier)))
    return ScanKernel(
        pair, _recurrence_operator(state.dtype, not reverse),
        title=f"linear recurrence{' in reverse' if reverse else ''}: gradients",
        arguments=arguments, preamble=preamble,
        input_expr=f"scan_t{{{multiplier}, "
                   f"{mul.format(multiplier, conversion(values, state, 'grad_h[i]'))}}}",
        output_statement=f"const {s} g = {gradient}; "
                         f"grad_b[i] = {conversion(state, values, 'g')}; "
                         f"grad_a[i] = {grad_a};",
        reverse=not reverse, types=(values.dtype,) if values != state else (),
        **dict(options)).lines


def linear_recurrence(a, b, axis=-1, *, h0=None, reverse=False, out=None, stream=None,
                      **options):
    """The linear recurrence ``h[t] = a[t] * h[t-1] + b[t]`` along ``axis`` (``h[-1]`` =
    ``h0``, default 0), every line on its own, in one scan of (a, b) pairs composed as
    affine maps; ``reverse=True``: ``h[t] = a[t] * h[t+1] + b[t]`` from each line's end.

    ``a`` and ``b`` are C-contiguous device arrays of one shape, kind and dtype (float32,
    float64, complex64, complex128, or float16 and bfloat16, whose maps are composed in
    float32 and only ``h`` rounded back). ``h0`` is a number, the same for every line, or
    a C-contiguous array of their kind and dtype with one value per line: the shape of
    ``a`` without ``axis`` (the state a previous chunk of the lines ended in). Returns
    ``h`` (a new array of their kind, or ``out``, which may be ``a`` or ``b`` itself but
    shares no other memory with them or ``h0``). ``stream`` and ``**options`` as for
    scangen.associative_scan. Floating-point results differ from a sequential loop in the
    last bits: the maps are composed in a tree.
    """
    reverse, key = as_flag("reverse", reverse), options_key(options)
    call, shape, dtype, form, _ = _recurrence_call(stream, {"a": a, "b": b}, {"h": out},
                                                   axis, h0)
    views = call.views
    given = views["h"]
    for name in ("a", "b", "h0"):
        # h may be a or b themselves (each element is read before its own is written), but
        # no other memory they or h0 (read at every step of a line) hold
        view = views.get(name)
        if given is not None and view is not None and overlaps(view, given) and \
                (name == "h0" or view.ptr != given.ptr):
            raise ValueError(f"out overlaps {name}"
                             + (": every step of a line reads h0" if name == "h0" else
                                f" without being {name}: pass out={name} to write in place")
                             + ", or give out memory of its own")
    out = call.outputs({"h": out}, shape, dtype)["h"]
    pointers = (views["a"].ptr, views["b"].ptr, views["h"].ptr)
    if form == "lines":
        pointers += (views["h0"].ptr,)
    _recurrence_kernels(dtype, reverse, form, key).launch(
        pointers, shape, axis, call.stream, (1, h0) if form == "number" else None)
    return call.returned(out)


def linear_recurrence_gradients(a, h, grad_h, axis=-1, *, h0=None, reverse=False,
                                grad_a=None, grad_b=None, stream=None, **options):
    """The gradients of ``h = linear_recurrence(a, b, axis, h0=h0, reverse=reverse)``
    given ``grad_h``, the gradient of a loss at ``h``: ``(grad_a, grad_b)``, in one scan.

    With ``g[t]`` the whole gradient at ``h[t]``, ``g[t] = grad_h[t] + conj(a[t+1]) g[t+1]``
    (the recurrence in the other direction over the multipliers one step on), ``grad_b =
    g`` and ``grad_a[t] = g[t] conj(h[t-1])``, ``h[-1] = h0`` (complex arrays: the conjugate
    Wirtinger gradient, torch's convention). The gradient at an array ``h0`` (one value per
    line) is ``conj(a) * grad_b`` at each line's first step. ``a``, ``h`` and ``grad_h``:
    C-contiguous device arrays of one shape, kind and dtype, as for linear_recurrence;
    ``grad_a`` and ``grad_b``: where to write (default: new arrays of their kind). One
    launch reads a, h and grad_h and writes both, where building them from torch's
    operations moves about twice the bytes.
    """
    reverse, key = as_flag("reverse", reverse), options_key(options)
    call, shape, dtype, form, (length, inner) = _recurrence_call(
        stream, {"a": a, "h": h, "grad_h": grad_h}, {"grad_a": grad_a, "grad_b": grad_b},
        axis, h0)
    number = complex(h0) if form == "number" else None
    if number is not None and element_type(dtype).kind != "c" and number.imag:
        raise TypeError(f"h0={h0!r} is complex, but the arrays are {dtype}")
    views = call.views
    given = {"grad_a": views["grad_a"], "grad_b": views["grad_b"]}
    for name, out in given.items():  # the kernel reads neighbouring steps of its inputs
        for other in ("a", "h", "grad_h", "h0", *given):
            if other != name and views.get(other) is not None and out is not None and \
                    overlaps(views[other], out):
                raise ValueError(f"{name} overlaps {other}: the gradients are written to "
                                 "memory of their own")
    outputs = call.outputs({"grad_a": grad_a, "grad_b": grad_b}, shape, dtype)
    pointers = tuple(views[name].ptr for name in ("a", "grad_h", "h", "grad_a", "grad_b")) \
        + (length, inner)
    if form == "lines":
        pointers += (views["h0"].ptr,)
    elif form == "number":
        pointers += (number.real, number.imag)
    _gradient_kernels(dtype, reverse, form, key).launch(pointers, shape, axis, call.stream,
                                                        None)
    return call.returned((outputs["grad_a"], outputs["grad_b"]))


def _recurrence_call(stream, inputs: dict, outputs: dict, axis, h0):
    """The Call of a recurrence's arrays, checked: ``inputs`` of one shape and float or
    complex dtype, ``outputs`` (None: to be made) of theirs, ``h0`` a number or an array of
    one value per line. Returns ``(call, shape, dtype, form, (length, inner))``, ``form``
    False (no h0), "number" or "lines"; nothing is allocated."""
    per_line = h0 is not None and not isinstance(h0, numbers.Number)
    call = Call(stream, {**inputs, **outputs, **({"h0": h0} if per_line else {})},
                writes=tuple(outputs))
    views = call.views
    first, *others = inputs
    dtype, shape = views[first].dtype, tuple(views[first].shape)
    names = " and ".join(inputs)
    for name in others:
        if views[name].dtype != dtype:
            raise TypeError(f"{names} must share one float or complex dtype, not {dtype} "
                            f"and {views[name].dtype}")
        if tuple(views[name].shape) != shape:
            raise ValueError(f"{names} must have one shape of at least one dimension, not "
                             f"{shape} and {views[name].shape}")
    if element_type(dtype).kind not in "fc":
        raise TypeError(f"{names} must share one float or complex dtype, not {dtype}")
    if not shape:
        raise ValueError(f"{names} must have one shape of at least one dimension, not ()")
    _, length, inner = line_shape(shape, axis)  # a bad axis raises before any allocation
    if per_line:
        lines = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
        if views["h0"].dtype != dtype or tuple(views["h0"].shape) != lines:
            raise ValueError(f"h0 must be a number or an array of dtype {dtype} and shape "
                             f"{lines} ({first}'s shape without axis {axis}), not "
                             f"{views['h0'].dtype} {tuple(views['h0'].shape)}")
    for name in outputs:
        view = views[name]
        if view is not None and (view.dtype != dtype or tuple(view.shape) != shape):
            what = "out" if name == "h" else name
            raise ValueError(f"{what} must have shape {shape} and dtype {dtype}")
    form = "lines" if per_line else ("number" if h0 is not None else False)
    return call, shape, dtype, form, (length, inner)
