"""Modules with kernels of their own (radix passes, histogram, run lengths, segment heads),
described, planned and launched as scans are. Pure Python: no CUDA import.

A module is a frozen dataclass subclass of :class:`Module` that states its template, its
entry points (name and parameters, scangen.args.Argument) and its render context; the
base gives its source, its nvcc check, its description and its compiled form (cached per
module and context by scangen.compile, which takes it as it takes a ScanKernel's
ScanModule).

A primitive plans a call as a :class:`ModulePlan`: the launches of its modules' entry
points (scangen.strategies.base.Launch records whose arguments are named), the scans it
runs between them (:class:`ScanCall`), its temporaries and the buffers zeroed first. The
call runs that plan (scangen.runtime.modules.ModuleRuntime), and ``str(plan)`` prints it as
a scan's plan prints, so what you read is what runs. Arguments are given by parameter
name; :func:`named_arguments` checks each parameter is given once with a value of its
kind, and :func:`pack_arguments` puts them in the entry point's order, so a launch cannot
pass its arguments in the wrong order.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import compile as compiler
from .args import C_SCALARS, Argument
from .plan import PlanTotals, format_value, launch_lines, temporary_lines
from .render import render_module
from .strategies.base import MAX_GRID, NULL, BufferArg, Launch, RuntimeArg, Temporary


class Module:
    """The base of a module with kernels of its own: a subclass is a frozen dataclass
    (hashable: the compile cache and render cache key it) stating ``template`` (a file of
    templates/), ``entry_points()`` (``(name, parameters)`` of each ``__global__``
    function), ``context()`` (what the template is rendered with) and ``description``
    (what errors call it)."""

    template: ClassVar[str]

    def entry_points(self) -> tuple[tuple[str, tuple[Argument, ...]], ...]:
        raise NotImplementedError

    def context(self) -> dict:
        raise NotImplementedError

    @property
    def description(self) -> str:
        raise NotImplementedError

    def module_source(self):
        """The rendered ModuleSource (cached per module)."""
        return render_module(self)

    @property
    def source(self) -> str:
        """The CUDA of the module (no GPU needed)."""
        return self.module_source().text

    def check_compile(self) -> None:
        """Compile the module with the nvcc on PATH (no GPU needed)."""
        compiler.check_with_nvcc(self)

    def compiled(self):
        """The module compiled in the current context (scangen.compile's cache)."""
        return compiler.compile_module(self)

    def entry_point(self, name: str) -> "EntryPoint":
        return EntryPoint(self, name)

    def launch(self, name: str, grid: int, block: int, args: dict, *, reads: int,
               writes: int, why: str, blocks_per_sm: int = 0,
               dynamic_shared_bytes: int = 0) -> Launch:
        """A launch of entry point ``name`` with ``args`` by parameter name (checked:
        named_arguments); ``reads`` and ``writes`` in bytes. ``blocks_per_sm``: a
        grid-stride kernel, launched with at most that many blocks per multiprocessor.
        ``dynamic_shared_bytes``: the shared memory the kernel declares ``extern``."""
        entry = self.entry_point(name)
        if not 1 <= grid <= MAX_GRID:
            raise ValueError(f"{name} needs {grid} blocks; a launch has 1 to {MAX_GRID}")
        return Launch(entry, grid, block, dynamic_shared_bytes or None,
                      named_arguments(entry, args), reads, writes, 0, why,
                      blocks_per_sm=blocks_per_sm, dynamic_shared_bytes=dynamic_shared_bytes)


class ModuleOwner:
    """What a primitive whose work is one module of its own (``self.module``) shows without
    a GPU: its CUDA, what it compiles and the nvcc check."""

    module: Module

    @property
    def source(self) -> str:
        """The CUDA of the module (no GPU needed)."""
        return self.module.source

    def modules_to_compile(self) -> list:
        """What check_compile compiles: the module."""
        return [self.module]

    def check_compile(self) -> None:
        """Compile the module with the nvcc on PATH (no GPU needed)."""
        compiler.check_all_with_nvcc(self.modules_to_compile())


@dataclass(frozen=True)
class EntryPoint:
    """One ``__global__`` function of a module: what a module's Launch launches."""

    module: Module
    name: str

    def __post_init__(self):
        if self.name not in _parameters(self.module):
            raise ValueError(f"{self.module.description} has no entry point {self.name!r}")

    @property
    def parameters(self) -> tuple[Argument, ...]:
        return _parameters(self.module)[self.name]


@functools.lru_cache(maxsize=256)
def _parameters(module) -> dict:
    """{entry point: parameters} of a module (built once: launches read it every call)."""
    return dict(module.entry_points())


def named_arguments(entry, args) -> tuple:
    """``args`` (a mapping, or pairs, of parameter name -> value) as (name, value) pairs in
    the order of ``entry``'s parameters (an EntryPoint, or anything with ``name`` and
    ``parameters``). Every parameter must be given once: a pointer a buffer (BufferArg) or
    NULL, a scalar a number or a value of the call (RuntimeArg); else a TypeError naming
    the entry point and the parameter."""
    pairs = list(args.items()) if hasattr(args, "items") else list(args)
    given = {}
    for name, value in pairs:
        if name in given:
            raise TypeError(f"{entry.name}: argument {name!r} is given twice")
        given[name] = value
    names = [p.name for p in entry.parameters]
    missing = [name for name in names if name not in given]
    extra = [name for name in given if name not in names]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(repr(n) for n in missing)}")
        if extra:
            problems.append(f"no parameter {', '.join(repr(n) for n in extra)}")
        raise TypeError(f"{entry.name}: {'; '.join(problems)} (its parameters: "
                        f"{', '.join(names)})")
    for parameter in entry.parameters:
        _check_kind(entry, parameter, given[parameter.name])
    return tuple((name, given[name]) for name in names)


def _check_kind(entry, parameter: Argument, value) -> None:
    what = f"{entry.name}: argument {parameter.name!r} ({parameter.declaration})"
    if parameter.pointer:
        if not (value is NULL or isinstance(value, BufferArg)):
            raise TypeError(f"{what} is a pointer: it takes a buffer (BufferArg) or NULL, "
                            f"not {value!r}")
        return
    if value is NULL or isinstance(value, BufferArg):
        raise TypeError(f"{what} is a scalar, not a buffer: {format_value(value)}")
    if isinstance(value, RuntimeArg):
        return
    dtype = C_SCALARS.get(parameter.c_type)
    if dtype is None:
        raise TypeError(f"{what} is passed as bytes: give it as a value of the call "
                        f"(RuntimeArg)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (dtype.kind in "iu" and not isinstance(value, int)):
        kind = "an int" if dtype.kind in "iu" else "a number"
        raise TypeError(f"{what} takes {kind}, not {value!r}")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{what}: {value} does not fit {dtype}")


class ArgumentSlots:
    """A launch's arguments in ``entry``'s parameter order, from ``args`` by name (checked
    again: named_arguments), sorted once into what the plan fixes and what each call
    gives: ``values`` holds the plan's numbers (as the numpy scalars of their C types) and
    0 for NULL and for every slot a call fills; ``buffers`` says where each buffer's address
    goes ((index, parameter, buffer name, byte offset)) and ``call_values`` where each of the
    call's values (RuntimeArg) goes ((index, parameter, parameter's Argument, value name))."""

    def __init__(self, entry, args):
        self.entry = entry
        parameters = entry.parameters
        # A plan's record is checked when built and frozen: in order already, it is not
        # checked again.
        if not (isinstance(args, tuple) and len(args) == len(parameters) and
                all(p.name == pair[0] for p, pair in zip(parameters, args))):
            args = named_arguments(entry, args)
        self.values, self.buffers, self.call_values = [], [], []
        for index, (parameter, (name, value)) in enumerate(zip(parameters, args)):
            if isinstance(value, BufferArg):
                self.buffers.append((index, name, value.name, value.offset))
                value = 0
            elif value is NULL:
                value = 0
            elif isinstance(value, RuntimeArg):
                self.call_values.append((index, name, parameter, value.name))
                value = 0
            else:
                value = c_scalar(parameter, value)
            self.values.append(value)

    def fill(self, buffers: dict, runtime: dict | None, convert) -> list:
        """The values of one call: each buffer's device address from ``buffers`` (name ->
        address as an int, or an array with ``ptr`` and ``size``; an empty one, or None, is
        NULL) plus its offset, each RuntimeArg's value from ``runtime`` as
        ``convert(parameter's Argument, value)`` makes it."""
        values = list(self.values)
        for index, name, buffer, offset in self.buffers:
            if buffer not in buffers:
                raise KeyError(f"{self.entry.name}: argument {name!r} names buffer "
                               f"{buffer!r}, which the call does not bind")
            address = address_of(buffers[buffer])
            values[index] = address + offset if address else 0
        for index, name, parameter, value_name in self.call_values:
            if runtime is None or value_name not in runtime:
                raise KeyError(f"{self.entry.name}: argument {name!r} takes <{value_name}>, "
                               f"which the call does not supply")
            values[index] = convert(parameter, runtime[value_name])
        return values


def pack_arguments(entry, args, buffers: dict, runtime: dict | None = None) -> tuple:
    """The values of a launch in ``entry``'s parameter order (ArgumentSlots, filled from
    ``buffers`` and ``runtime``), every number as the numpy scalar of its C type."""
    return tuple(ArgumentSlots(entry, args).fill(buffers, runtime, c_scalar))


def address_of(bound) -> int:
    """The device address of a bound buffer: an int as it is, an array's ``ptr`` (0 for an
    empty one or None)."""
    if bound is None:
        return 0
    if isinstance(bound, int):
        return bound
    return int(bound.ptr) if bound.size else 0


def c_scalar(parameter: Argument, value):
    """A number as the numpy scalar of ``parameter``'s C type (as it is for other types)."""
    dtype = C_SCALARS.get(parameter.c_type)
    return value if dtype is None else dtype.type(value)


@dataclass(frozen=True)
class ScanCall:
    """A ScanKernel run between a primitive's launches: over ``n`` indices, its arguments
    by name (as a module launch's, in the kernel's order). A kernel built with an initial
    value takes it from the call: ``initial`` names that value (a RuntimeArg; the call may
    leave it None, and the kernel's own is used), which the kernel converts itself. A
    kernel of lines takes its ``layout`` (scangen.plan.make_plan)."""

    kernel: object
    n: int
    args: tuple
    why: str
    initial: RuntimeArg | None = None
    layout: tuple | int | None = None

    @property
    def name(self) -> str:
        return self.kernel.scan_module.hooks.title

    @property
    def parameters(self) -> tuple[Argument, ...]:
        """The kernel's arguments the plan binds: all but the initial value (its last,
        where it takes one)."""
        arguments = self.kernel.arguments
        return arguments[:-1] if self.kernel.scan_module.hooks.initial else arguments

    @property
    def plan(self):
        """The scan's own plan: the launches this call makes."""
        return self.kernel.plan(self.n, self.layout)


@dataclass(frozen=True)
class Checkpoint:
    """A point between a primitive's steps that the host may wait for without waiting for
    the steps after it: the runtime records an event there (ModuleRuntime.run returns it
    by ``name``), so a call can read what the steps before it wrote into mapped host memory
    (a verdict on its input) while the later ones run."""

    name: str
    why: str


@dataclass(frozen=True)
class ModulePlan(PlanTotals):
    """What a primitive's call runs, in order (``steps``: module Launch records, ScanCall
    and Checkpoint), the temporaries it uses (kept per stream), the buffers zeroed before the
    first step ((name, bytes) pairs) and the tile status words its single-pass launches
    share (0: none)."""

    title: str
    n: int
    steps: tuple
    temporaries: tuple[Temporary, ...] = ()
    zeroed: tuple[tuple[str, int], ...] = ()
    single_pass_tiles: int = 0
    #: What the modules are (one line each), printed under the title.
    modules: tuple[str, ...] = ()

    @property
    def launches(self) -> tuple[Launch, ...]:
        """Every kernel launch of the call in order, the scans' included."""
        out = []
        for step in self.steps:
            if isinstance(step, ScanCall):
                out += step.plan.launches
            elif not isinstance(step, Checkpoint):
                out.append(step)
        return tuple(out)

    def __str__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """A readable table of the plan (what ``python -m scangen plan`` prints)."""
        lines = [f"plan: {self.title} over n={self.n}"]
        lines += [f"  {module}" for module in self.modules]
        lines.append(f"  {len(self.launches)} launch(es)")
        for name, nbytes in self.zeroed:
            lines.append(f"  zeroed first: {name} ({nbytes} B)")
        number = 0
        for step in self.steps:
            if isinstance(step, ScanCall):
                args = ", ".join(f"{k}={format_value(v)}" for k, v in step.args)
                if step.initial is not None:
                    args += f", initial={format_value(step.initial)}"
                lines.append(f"  scan {step.name!r} over n={step.n} ({args}): {step.why}")
                for launch in step.plan.launches:
                    lines += [f"    {line}" for line in launch_lines(number, launch)]
                    number += 1
                lines += [f"    {line}" for line in temporary_lines(step.plan.temporaries)]
            elif isinstance(step, Checkpoint):
                lines.append(f"  checkpoint {step.name!r}: {step.why}")
            else:
                lines += launch_lines(number, step)
                number += 1
        lines += temporary_lines(self.temporaries)
        lines.append(f"  temporary bytes: {self.temp_bytes}")
        lines.append(f"  bytes read: {self.bytes_read}, written: {self.bytes_written}")
        return "\n".join(lines)


class ModulePlanBuilder:
    """Collects a primitive's steps, temporaries and zeroed buffers while it plans."""

    def __init__(self):
        self.steps, self.zeroed = [], []
        self._temporaries: dict[str, Temporary] = {}
        self.single_pass_tiles = 0

    def temporary(self, name: str, nbytes: int, what: str, *, persistent=False) -> BufferArg:
        """A temporary (the largest size asked for under its name) as an argument."""
        held = self._temporaries.get(name)
        if held is None or held.nbytes < nbytes:
            self._temporaries[name] = Temporary(name, nbytes, persistent, what)
        return BufferArg(name)

    def zero(self, name: str, nbytes: int) -> None:
        self.zeroed.append((name, nbytes))

    def launch(self, module: Module, name: str, grid: int, block: int, args: dict, **kw):
        self.steps.append(module.launch(name, grid, block, args, **kw))

    def checkpoint(self, name: str, why: str) -> None:
        """A Checkpoint after the steps so far."""
        self.steps.append(Checkpoint(name, why))

    def scan(self, kernel, n: int, args: dict, why: str, *, initial=None,
             layout=None) -> None:
        """A ScanCall of ``kernel``; ``initial`` (a RuntimeArg) names the call's value of
        the initial value, given exactly where the kernel takes one; ``layout``: a kernel
        of lines' (ScanCall)."""
        takes = kernel.scan_module.hooks.initial
        if takes != (initial is not None):
            raise ValueError(f"{kernel.scan_module.hooks.title}: the kernel takes "
                             f"{'an' if takes else 'no'} initial value; give initial= "
                             f"{'(a RuntimeArg)' if takes else 'None'}")
        if initial is not None and not isinstance(initial, RuntimeArg):
            raise TypeError(f"initial= is a value of the call (RuntimeArg), not {initial!r}")
        call = ScanCall(kernel, n, (), why)
        self.steps.append(ScanCall(kernel, n, named_arguments(call, args), why, initial,
                                   layout))

    def build(self, title: str, n: int, modules=()) -> ModulePlan:
        return ModulePlan(title, n, tuple(self.steps), tuple(self._temporaries.values()),
                          tuple(self.zeroed), self.single_pass_tiles, tuple(modules))

