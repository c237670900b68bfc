"""Calling a kernel spec: convert the user's arguments, bind a plan to one context's kernels
and one stream's scratch, launch. Per call, only the user's arguments (and the single-pass
ticket base and epoch) change."""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..args import INITIAL_ARGUMENT
from ..compile import compile_module, release_at_exit, require_pycuda, stream_key
from ..plan import NULL, USER_ARGS, BufferArg, RuntimeArg, make_plan
from ..spec import shared_memory_refusal
from ..strategies.tile_state import TileState
from .scratch import StreamScratch
from .streams import RawLaunch, RawStream

#: Bound launchers kept per kernel spec (one per distinct n, stream and context).
_MAX_LAUNCHERS = 256


@functools.lru_cache(maxsize=1024)
def cached_plan(kernel_spec, n):
    return make_plan(kernel_spec, n)


class Launcher:
    """A plan bound to one context's kernels and one stream's scratch."""

    def __init__(self, plan, compiled, scratch: StreamScratch, stream=None):
        self.scratch = scratch
        bindings = scratch.bind(plan, stream)
        # Read after bind, which bumps the generation when it replaces an allocation.
        self.generation = scratch.generation
        #: Tickets a call takes (scangen.strategies.base.Launch.tickets).
        self.tickets = 0
        self.steps = []
        for launch in plan.launches:
            grid = launch.grid
            if launch.persistent:
                grid = min(grid, resident_grid(plan.kernel_spec))
            if launch.kernel.family.single_pass:
                self.tickets += launch.tickets(grid)
            takes_user_args = launch.args[0] is USER_ARGS
            args = [_bind(arg, bindings) for arg in launch.args[1 if takes_user_args else 0:]]
            runtime_slots = [(i, arg.name) for i, arg in enumerate(
                launch.args[1 if takes_user_args else 0:]) if isinstance(arg, RuntimeArg)]
            self.steps.append((launch_function(compiled, launch.kernel.name, stream,
                                               launch.dynamic_shared_bytes),
                               (grid, 1, 1), (launch.block, 1, 1), takes_user_args,
                               args, runtime_slots))

    def stale(self) -> bool:
        """True once the scratch was reallocated (a larger call on the same stream)."""
        return self.generation != self.scratch.generation

    def __call__(self, user_values: tuple, stream) -> None:
        if self.tickets:
            ticket_base, epoch = self.scratch.next_single_pass_call(self.tickets, stream)
            # Plain ints: the launch packs every argument by the kernel's format, and numpy
            # scalars would cost a fifth of a microsecond each.
            runtime = {"ticket_base": ticket_base, "epoch": epoch}
            for _, _, _, _, args, runtime_slots in self.steps:
                for index, name in runtime_slots:
                    args[index] = runtime[name]
        for launch, grid, block, takes_user_args, args, _ in self.steps:
            if takes_user_args:
                launch(grid, block, stream, *user_values, *args)
            else:
                launch(grid, block, stream, *args)


def resident_grid(kernel_spec) -> int:
    """Blocks of a persistent tile kernel: as many as the current device holds at once under
    the kernel's register bound (Tuning.tile_min_threads_per_sm). More would only wait for a
    free multiprocessor; fewer, where shared memory holds fewer, is still correct (tickets
    go to running blocks only)."""
    spec = kernel_spec.scan
    return _multiprocessors() * \
        spec.tuning.at(spec.acc_itemsize).tile_min_blocks_per_sm(spec.block_size)


def wave_grid(tiles: int, blocks_per_sm: int) -> int:
    """Blocks of a grid-stride kernel over ``tiles`` tiles: one per tile, at most one wave
    of ``blocks_per_sm`` blocks on every multiprocessor of the current device."""
    return min(tiles, _multiprocessors() * blocks_per_sm)


def _multiprocessors() -> int:
    """Multiprocessors of the current context's device."""
    driver = require_pycuda()
    device = driver.Context.get_device()
    return device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)


def launch_function(compiled, name, stream, shared_bytes: int = 0):
    """``f(grid, block, stream, *args)`` launching kernel ``name`` of a CompiledModule on
    ``stream`` (as scangen.interop.as_stream returns it) with ``shared_bytes`` of dynamic
    shared memory (a plan's Launch.dynamic_shared_bytes): pycuda's prepared call on its own
    streams, the driver's cuLaunchKernel on a foreign handle (pycuda takes only its own
    Stream objects; see scangen.runtime.streams)."""
    function = compiled.functions[name]
    if isinstance(stream, RawStream):
        return RawLaunch(compiled.raw_functions().function(name), function.arg_format,
                         shared_bytes)
    return _prepared_launch(function, shared_bytes)


def _prepared_launch(function, shared_bytes: int = 0):
    """What ``function.prepared_async_call`` does for scangen's kernels (pack the arguments
    by the prepared format, launch with ``shared_bytes`` of dynamic shared memory), without
    its per-call keyword handling, import and texture loop, which cost about a microsecond
    of a small scan. Falls back to prepared_async_call itself where pycuda lacks the pieces
    it is made of."""
    launch_kernel = getattr(function, "_launch_kernel", None)
    try:
        from pycuda._pvt_struct import pack
    except ImportError:
        pack = None
    if launch_kernel is None or pack is None or getattr(function, "texrefs", None):
        if not shared_bytes:
            return function.prepared_async_call

        def launch(grid, block, stream, *args):
            function.prepared_async_call(grid, block, stream, *args, shared_size=shared_bytes)

        return launch
    arg_format = function.arg_format

    def launch(grid, block, stream, *args):
        launch_kernel(grid, block, pack(arg_format, *args), shared_bytes, stream)

    return launch


def check_shared_memory(kernel_spec) -> None:
    """Refuse, before compiling, a spec that needs more shared memory than a block of the
    current device may opt in to: make_spec checked it against scangen.tuning.DEFAULT_ARCH,
    and a device of another architecture may offer less (MAX_SHARED_BYTES_OPTIN)."""
    spec = kernel_spec.scan
    if not spec.dynamic_shared:
        return
    driver = require_pycuda()
    device = driver.Context.get_device()
    limit = device.get_attribute(driver.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    if spec.shared_bytes > limit:
        major, minor = device.compute_capability()
        raise ValueError(shared_memory_refusal(spec, limit,
                                               f"{device.name()} (sm_{major}{minor})"))


def _bind(arg, bindings):
    if isinstance(arg, BufferArg):
        return bindings[arg.name]
    if arg is NULL:
        return np.uintp(0)
    if isinstance(arg, RuntimeArg):
        return None  # filled in per call
    return np.int64(arg)


class Runtime:
    """Everything a kernel spec needs to run: plans, per-stream scratch, bound launchers."""

    def __init__(self, kernel_spec):
        self.kernel_spec = kernel_spec
        self._scratch = {}  # compile.stream_key -> StreamScratch
        self._launchers = {}  # (n, compile.stream_key, raw) -> Launcher
        # One call at a time, whichever thread makes it: calls on a stream share its scratch
        # (tile status, ticket counter), a call's ticket base must reach the stream in the
        # order it was handed out, and a larger call may replace the scratch under another
        # thread's launcher.
        self._lock = threading.Lock()
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._scratch.clear()
        self._launchers.clear()

    def plan(self, n):
        return cached_plan(self.kernel_spec, n)

    def __call__(self, args, *, n=None, stream=None) -> None:
        values, n, stream = convert_arguments(self.kernel_spec.hooks.arguments,
                                              self.kernel_spec.scan.etype.dtype, args, n, stream)
        self.launch(values, n, stream)

    def launch(self, user_values: tuple, n: int, stream) -> None:
        """Launch over n indices with already converted argument values, on a stream as
        scangen.interop.as_stream gives it (None, a pycuda Stream or a RawStream)."""
        if n == 0:
            return
        with self._lock:
            self._launch(user_values, n, stream)

    def _launch(self, user_values: tuple, n: int, stream) -> None:
        where = stream_key(stream)
        # Whose stream it is decides how the launcher launches (see launch_function).
        key = (n, where, type(stream) is RawStream)
        launcher = self._launchers.get(key)
        if launcher is None or launcher.stale():
            scratch = self._scratch.get(where)
            if scratch is None:
                scratch = self._scratch[where] = StreamScratch(
                    TileState.of(self.kernel_spec.scan))
            check_shared_memory(self.kernel_spec)
            launcher = Launcher(self.plan(n), compile_module(self.kernel_spec), scratch, stream)
            if len(self._launchers) >= _MAX_LAUNCHERS:
                self._launchers.clear()  # many distinct sizes: rebinding is cheap enough
            self._launchers[key] = launcher
        launcher(user_values, stream)


# ------------------------------------------------------------------ argument conversion

def convert_arguments(arguments, scan_dtype, args, n, stream=None):
    """The values to launch with, n, and the stream (as scangen.interop.as_stream gives it).
    A pointer takes a device array (scangen.interop.kind_of) or a scangen.DevicePointer,
    nothing else: an int would be launched as an address nobody checked. Raises TypeError
    or ValueError naming a wrong argument, before anything is launched."""
    from ..interop import Call, DevicePointer, kind_of

    if len(args) != len(arguments):
        # The initial value, last, is not passed positionally: count what the user passes.
        user = [a.name for a in arguments if a.name != INITIAL_ARGUMENT]
        given = len(args) - (len(arguments) - len(user))
        raise TypeError(f"this kernel takes {len(user)} argument(s) ({', '.join(user) or 'none'})"
                        f" before n= and stream=, got {given}")
    arrays = {}
    for argument, value in zip(arguments, args):
        if not argument.pointer or isinstance(value, DevicePointer):
            continue
        if kind_of(value) is None:
            raise TypeError(f"argument {argument.name!r} ({argument.declaration}) needs a "
                            f"device array or a scangen.DevicePointer, not "
                            f"{_described(value)}")
        arrays[argument.name] = value
    call = Call(stream, arrays, writes=[a.name for a in arguments if a.pointer and not a.const])
    values = []
    first = None
    for argument, value in zip(arguments, args):
        if not argument.pointer:
            values.append(convert_scalar(argument, value))
            continue
        view = value if isinstance(value, DevicePointer) else call.views[argument.name]
        expected = scan_dtype if argument.c_type == "scan_t" else argument.scalar_dtype
        if expected is not None and view.dtype != expected:
            raise TypeError(f"argument {argument.name!r} is declared "
                            f"{argument.declaration} ({expected}) but the array has dtype "
                            f"{view.dtype}")
        first = first or (argument, view.size)
        values.append(view.ptr if view.size else 0)
    if n is None:
        if first is None:
            raise TypeError("n= is required: no argument is an array whose length could be "
                            "the number of elements")
        n = first[1]
    else:
        from ..plan import as_count

        n = as_count(n)
        if first is not None and n > first[1]:
            raise ValueError(f"n={n} is larger than the first array argument "
                             f"{first[0].name!r} ({first[1]} elements)")
    return tuple(values), n, call.stream


def _described(value) -> str:
    """What a value that is no device array is, and what to do about it."""
    if isinstance(value, np.ndarray):
        return ("a host numpy array (copy it to the GPU first, e.g. "
                "pycuda.gpuarray.to_gpu)")
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return (f"the int {value!r} (a device address goes in as "
                "scangen.DevicePointer(address, dtype, size))")
    return f"{type(value).__name__} {value!r}" if isinstance(
        value, (bool, np.bool_, float, np.generic, type(None))) else type(value).__name__


def convert_scalar(argument, value):
    """A scalar argument's value as the numpy scalar of its C type, or a clear error naming
    the argument as the user knows it (Argument.described)."""
    if argument.value_type is not None:  # a struct, complex or bfloat16 value: its bytes
        try:
            return argument.value_type.to_bytes(value)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{argument.described}: {err}") from None
    dtype = argument.scalar_dtype
    if dtype.kind in "iu":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{argument.described} needs an int, not {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{argument.described}: {value} does not fit {dtype} "
                             f"[{info.min}, {info.max}]")
        return dtype.type(value)
    if dtype.kind == "b":
        return np.uint8(bool(value))
    if not isinstance(value, (int, float, np.integer, np.floating)) or \
            isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{argument.described} needs a number, not {value!r}")
    return dtype.type(value)


def check_array(name, array, dtype, length=None) -> None:
    """A 1-D array view (scangen.interop, C-contiguous already) of ``dtype`` (and
    ``length`` elements), or a clear error."""
    if array.dtype != dtype:
        raise TypeError(f"{name} has dtype {array.dtype}; expected {dtype}")
    if len(array.shape) != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}")
    if length is not None and array.size != length:
        raise ValueError(f"{name} has {array.size} elements; expected {length}")


def overlaps(a, b) -> bool:
    """Whether two array views share any byte."""
    return a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


_gpuarray_module = None


def _gpuarray():
    """pycuda.gpuarray, imported once (per-call imports cost microseconds on small scans)."""
    global _gpuarray_module
    if _gpuarray_module is None:
        require_pycuda()
        from pycuda import gpuarray

        _gpuarray_module = gpuarray
    return _gpuarray_module
