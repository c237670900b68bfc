"""Calling a kernel spec: bind a plan to one context's kernels and one stream's scratch,
launch. Per call, only the user's arguments (converted by scangen.interop) and the
single-pass ticket base and epoch change."""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..compile import compile_module
from ..plan import NULL, USER_ARGS, BufferArg, RuntimeArg, make_plan
from ..strategies.tile_state import TileState
from .contexts import check_context_not_switched, release_at_exit, stream_key
from . import streams
from .gpu import check_shared_memory, resident_grid
from .scratch import GraphScratch, StreamScratch
from .streams import RawLaunch, RawStream

#: Bound launchers kept per kernel spec (one per distinct n, stream and context).
_MAX_LAUNCHERS = 256


@functools.lru_cache(maxsize=1024)
def cached_plan(scan_module, n, layout=None):
    return make_plan(scan_module, n, layout)


class Launcher:
    """A plan bound to one context's kernels and one stream's scratch."""

    def __init__(self, plan, compiled, scratch: StreamScratch, stream=None):
        self.scratch = scratch
        bindings = scratch.bind(plan, stream)
        # Read after bind, which bumps the generation when it replaces an allocation.
        self.generation = scratch.generation
        #: Tickets a call takes (scangen.strategies.base.Launch.tickets).
        self.tickets = 0
        #: Whether a launch uses the scratch (temporaries, single-pass state): then a
        #: capture into a CUDA graph needs scratch of the graph's own.
        self.keeps_scratch = bool(bindings)
        self.steps = []
        for launch in plan.launches:
            grid = launch.grid
            if launch.persistent:
                grid = min(grid, resident_grid(plan.scan_module))
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
        try:
            launch_kernel(grid, block, pack(arg_format, *args), shared_bytes, stream)
        except Exception as error:
            check_context_not_switched(error)
            raise

    return launch


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

    def __init__(self, scan_module):
        self.scan_module = scan_module
        self._scratch = {}  # contexts.stream_key -> StreamScratch
        self._launchers = {}  # (n, contexts.stream_key, raw) -> Launcher
        # One call at a time, whichever thread makes it: calls on a stream share its scratch
        # (tile status, ticket counter), a call's ticket base must reach the stream in the
        # order it was handed out, and a larger call may replace the scratch under another
        # thread's launcher.
        self._lock = threading.Lock()
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._scratch.clear()
        self._launchers.clear()

    def plan(self, n, layout=None):
        return cached_plan(self.scan_module, n, layout)

    def launch(self, user_values: tuple, n: int, stream, layout=None) -> None:
        """Launch over n indices with already converted argument values, on a stream as
        scangen.interop.as_stream gives it (None, a pycuda Stream or a RawStream);
        ``layout`` as for make_plan."""
        if n == 0:
            return
        with self._lock:
            self._launch(user_values, n, stream, layout)

    def prepare(self, user_values: tuple, n: int, stream, layout=None, keep=()):
        """A PreparedLaunch of these converted values over n indices on ``stream`` (as
        launch takes them), bound now: each of its calls launches again, doing nothing
        else. ``keep``: the arrays the values point into, held while it lives."""
        launcher = None
        if n:
            with self._lock:
                launcher = self._launcher(n, stream, layout)
        return PreparedLaunch(self, launcher, user_values, n, stream, layout, keep)

    def _launch(self, user_values: tuple, n: int, stream, layout, launcher=None):
        """Launch with ``launcher`` (a PreparedLaunch's, where still bound) or the one kept
        for these n, stream and layout; return the launcher used (None: the launch was
        captured with scratch of its own). Called under the lock."""
        launcher = self._launcher(n, stream, layout, launcher)
        if launcher is None:
            self._launch_captured(user_values, n, stream, layout)
        else:
            launcher(user_values, stream)
        return launcher

    def _launcher(self, n: int, stream, layout, launcher=None):
        """The bound Launcher of n indices on ``stream``: ``launcher`` where given and still
        bound, else the one kept for them, made or made again where its scratch was
        replaced. None where the stream is being captured into a CUDA graph and the plan
        keeps scratch, whose launch takes scratch of the graph's own (_launch_captured);
        a plan of no scratch is captured as it is. Called under the lock."""
        if launcher is None or launcher.stale():
            # Whose stream it is decides how the launcher launches (see launch_function).
            where = stream_key(stream)
            key = (n, layout, where, type(stream) is RawStream)
            launcher = self._launchers.get(key)
            if launcher is None or launcher.stale():
                if streams.capturing(stream):
                    return None  # binding would allocate and zero the stream's scratch
                scratch = self._scratch.get(where)
                if scratch is None:
                    scratch = self._scratch[where] = StreamScratch(
                        TileState.of(self.scan_module.scan))
                check_shared_memory(self.scan_module)
                plan = self.plan(n, layout)
                launcher = Launcher(plan, compile_module(plan.part), scratch, stream)
                if len(self._launchers) >= _MAX_LAUNCHERS:
                    self._launchers.clear()  # many distinct sizes: rebinding is cheap enough
                self._launchers[key] = launcher
        if launcher.keeps_scratch and streams.capturing(stream):
            return None
        return launcher

    def _launch_captured(self, user_values: tuple, n: int, stream, layout) -> None:
        """Launch into the CUDA graph ``stream`` is being captured into, with scratch the
        graph owns (GraphScratch): a replay cannot follow the stream's ticket count and
        epoch (it replays the values it was captured with), and the stream's scratch may be
        replaced, freed or used by another replay while the graph lives. The plan's module
        is compiled and loaded by an earlier call outside the capture, as CUDA graphs need
        (a warm-up call), or here."""
        check_shared_memory(self.scan_module)
        plan = self.plan(n, layout)
        scratch = GraphScratch(TileState.of(self.scan_module.scan))
        Launcher(plan, compile_module(plan.part), scratch, stream)(user_values, stream)
        scratch.free(stream)


class PreparedLaunch:
    """One launch of a kernel's plan, its arguments converted and its plan bound once
    (Runtime.prepare): a call takes the runtime's lock and launches, the single pass's
    ticket base and epoch its only new values. A larger call on the same stream that
    replaces the scratch makes the next call bind again; a call into a CUDA graph being
    captured is captured as Runtime.launch captures it. Calls return None."""

    __slots__ = ("_runtime", "_launcher", "_values", "_n", "_stream", "_layout", "keep")

    def __init__(self, runtime, launcher, values, n, stream, layout, keep):
        self._runtime, self._launcher, self._values = runtime, launcher, values
        self._n, self._stream, self._layout, self.keep = n, stream, layout, keep

    def __call__(self) -> None:
        if not self._n:
            return
        runtime = self._runtime
        with runtime._lock:
            self._launcher = runtime._launch(self._values, self._n, self._stream,
                                             self._layout, self._launcher)
