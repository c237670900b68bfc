"""Running a primitive's plan (scangen.modules.ModulePlan): bind its buffers to the call's
arrays and one stream's scratch, zero what it zeroes, and launch its steps in order, each
launch bound once per stream (BoundLaunch: its function, grid and packed numbers)."""
from __future__ import annotations

import threading

import numpy as np

from ..args import C_SCALARS
from ..modules import ArgumentSlots, Checkpoint, ScanCall, address_of, c_scalar
from .contexts import release_at_exit, stream_key
from .gpu import gpuarray as _gpuarray, wave_grid
from .launcher import launch_function
from . import streams
from .scratch import StreamScratch
from .streams import RawStream, StreamEvent, memset_d8_async

#: The values the single-pass state gives each launch that takes them.
_SINGLE_PASS = ("ticket_base", "epoch")
#: Launches a stream's scratch keeps bound (a plan's are cached, so few are seen).
_MAX_BOUND_LAUNCHES = 64


def _python_number(parameter, value):
    """A call's value for ``parameter`` as a Python float or int (the launch packs it by the
    kernel's format; a numpy scalar would cost more), or as given for a type that is no C
    number."""
    dtype = C_SCALARS.get(parameter.c_type)
    if dtype is None:
        return value
    return float(value) if dtype.kind == "f" else int(value)


class BoundLaunch:
    """A module launch made ready for one stream of the current context, once: its kernel's
    launch function, its grid (a wave where it walks tiles) and its arguments sorted
    (ArgumentSlots). A call fills in only its buffers' addresses and its own values
    (RuntimeArg), so a small call costs little more than the driver's launch."""

    def __init__(self, launch, stream):
        self.launch = launch
        entry = launch.kernel
        grid = wave_grid(launch.grid, launch.blocks_per_sm) if launch.blocks_per_sm \
            else launch.grid
        self.grid, self.block = (grid, 1, 1), (launch.block, 1, 1)
        self.function = launch_function(entry.module.compiled(), entry.name, stream,
                                        launch.dynamic_shared_bytes)
        self.arguments = ArgumentSlots(entry, launch.args)
        #: each launch takes its own tickets and epoch
        self.single_pass = any(value in _SINGLE_PASS
                               for *_, value in self.arguments.call_values)

    def __call__(self, buffers: dict, values: dict, scratch, stream) -> None:
        if self.single_pass:
            ticket_base, epoch = scratch.status.next_single_pass_call(
                self.launch.tickets(self.grid[0]), stream)
            values = {**values, "ticket_base": ticket_base, "epoch": epoch}
        self.function(self.grid, self.block, stream,
                      *self.arguments.fill(buffers, values, _python_number))


class ModuleScratch:
    """What a primitive's launches on one stream use, kept between calls: its temporaries
    (bytes, grown as needed) and, for single-pass launches, the ticket and tile status
    (scangen.runtime.scratch.StreamScratch, epoch-tagged)."""

    def __init__(self, tile_state=None):
        self.arrays = {}
        self.status = None if tile_state is None else StreamScratch(tile_state)
        self.events = {}  # checkpoint name -> StreamEvent
        self.launches = {}  # (id of a plan's Launch, raw stream?) -> BoundLaunch
        self.scan_calls = {}  # id of a plan's ScanCall -> (the ScanCall, its ArgumentSlots)

    def bound(self, launch, stream) -> BoundLaunch:
        """``launch`` made ready for ``stream`` (BoundLaunch), once."""
        key = (id(launch), type(stream) is RawStream)
        bound = self.launches.get(key)
        if bound is None or bound.launch is not launch:
            if len(self.launches) >= _MAX_BOUND_LAUNCHES:
                self.launches.clear()  # many plans: binding again is cheap enough
            bound = self.launches[key] = BoundLaunch(launch, stream)
        return bound

    def scan_arguments(self, call: ScanCall, buffers: dict) -> tuple:
        """A ScanCall's arguments for the kernel, sorted once (ArgumentSlots) and filled from
        ``buffers``."""
        held = self.scan_calls.get(id(call))
        if held is None or held[0] is not call:
            if len(self.scan_calls) >= _MAX_BOUND_LAUNCHES:
                self.scan_calls.clear()
            held = self.scan_calls[id(call)] = (call, ArgumentSlots(call, call.args))
        return tuple(held[1].fill(buffers, None, c_scalar))

    def event(self, name: str) -> StreamEvent:
        event = self.events.get(name)
        if event is None:
            event = self.events[name] = StreamEvent()
        return event

    def get(self, name: str, nbytes: int):
        array = self.arrays.get(name)
        if array is None or array.nbytes < nbytes:
            array = self.arrays[name] = _gpuarray().empty(max(nbytes, 1), np.uint8)
        return array

    def bind(self, plan, stream) -> dict:
        """The plan's temporaries by name (arrays, or addresses of the tile state)."""
        buffers = {t.name: self.get(t.name, t.nbytes) for t in plan.temporaries
                   if not t.persistent}
        if plan.single_pass_tiles:
            buffers.update(self.status.bind_state(plan.single_pass_tiles, stream))
        return buffers


class ModuleRuntime:
    """Runs a primitive's plans with scratch per calling thread and stream: a call's
    launches use it in stream order, and a call from another thread (the one-shot
    functions share their objects) may queue its own on the same stream between them, so
    it has its own; another context's memory is not this one's."""

    def __init__(self, tile_state=None):
        #: The single-pass launches' status layout (None: the plans have none).
        self.tile_state = tile_state
        self._scratch = {}  # (thread, runtime.contexts.stream_key) -> ModuleScratch
        release_at_exit(self)

    def release_device_memory(self) -> None:
        self._scratch.clear()

    def scratch(self, stream) -> ModuleScratch:
        """The calling thread's scratch for ``stream`` in the current context."""
        key = (threading.get_ident(), *stream_key(stream))
        scratch = self._scratch.get(key)
        if scratch is None:
            scratch = self._scratch[key] = ModuleScratch(self.tile_state)
        return scratch

    def run(self, plan, arrays: dict, stream, values: dict | None = None) -> dict:
        """Queue ``plan`` on ``stream``: ``arrays`` binds the call's arrays by the names
        the plan gives them (views with ``ptr`` and ``size``, None for none), ``values``
        the call's scalars (RuntimeArg; a scan's initial value among them, None for the
        kernel's own). Returns the event recorded at each of the plan's checkpoints, by
        name (each is this thread's and stream's, recorded again by its next call).
        Refused on a stream being captured into a CUDA graph: a replay would use the
        stream's scratch, which later calls replace and reuse."""
        if streams.capturing(stream):
            raise RuntimeError(f"{plan.title} cannot be captured into a CUDA graph: it keeps "
                               "scratch of its stream, which later calls replace and reuse. "
                               "Call it outside the capture (Scan, ScanKernel and the "
                               "one-shot scans can be captured)")
        scratch = self.scratch(stream)
        events = {}
        buffers = {**arrays, **scratch.bind(plan, stream)}
        for name, nbytes in plan.zeroed:
            memset_d8_async(address_of(buffers[name]), 0, nbytes, stream)
        for step in plan.steps:
            if isinstance(step, ScanCall):
                # The kernel converts its initial value itself (the call's, else its own).
                initial = None if step.initial is None else \
                    (values or {}).get(step.initial.name)
                step.kernel.launch_converted(scratch.scan_arguments(step, buffers),
                                             step.n, stream, initial, step.layout)
            elif isinstance(step, Checkpoint):
                events[step.name] = scratch.event(step.name)
                events[step.name].record(stream)
            else:
                scratch.bound(step, stream)(buffers, values or {}, scratch, stream)
        return events
