"""Device scratch of one kernel spec for calls on one stream.

Calls on one stream run in order, so they can share scratch; calls on different streams
may run at once, so each stream gets its own. Two parts:

* per-call temporaries (partial scans, section totals), overwritten by every call;
* single-pass state kept between calls: a ticket counter and the tile status, laid out by
  scangen.strategies.tile_state. The status is tagged with a per-call epoch, so it needs no
  reset between calls; the ticket keeps counting, and each call is told where its tickets
  start.

A launch captured into a CUDA graph takes GraphScratch instead: the graph replays the
arguments it was captured with, so it cannot follow the stream's ticket count or epoch, and
a later call may replace the stream's scratch while the graph still uses it.
"""
from __future__ import annotations

from ..strategies.tile_state import EPOCH_LIMIT, TileState, aligned
from .gpu import require_pycuda
from .streams import mem_alloc_async, mem_free_async, memset_d8_async


class StreamScratch:
    def __init__(self, tile_state: TileState):
        self.tile_state = tile_state
        self.temporaries = None  # (allocation, nbytes)
        self.state = None  # (allocation, tile capacity)
        self.epoch = 0
        self.ticket_base = 0
        #: Bumped whenever an allocation is replaced, so launchers bound to it rebind.
        self.generation = 0

    def bind(self, plan, stream=None) -> dict:
        """Addresses of the plan's temporaries, growing the allocations if needed. New
        single-pass state is zeroed on ``stream``, ahead of the call's kernels (a memset on
        the legacy stream would not order against a non-blocking stream). ``stream`` may be a
        foreign handle (a RawStream): scratch is keyed by handle, whoever made the stream."""
        driver = require_pycuda()
        bindings = {}
        offsets, total = temporary_offsets(plan)
        if offsets:
            if self.temporaries is None or self.temporaries[1] < total:
                self.temporaries = (driver.mem_alloc(total), total)
                self.generation += 1
            base = int(self.temporaries[0])
            bindings.update({name: base + offset for name, offset in offsets.items()})
        if plan.single_pass_tiles:
            bindings.update(self.bind_state(plan.single_pass_tiles, stream))
        return bindings

    def bind_state(self, tiles: int, stream=None) -> dict:
        """Addresses of the ticket and the status of ``tiles`` tiles (names as
        TileState.offsets), growing and zeroing the allocation on ``stream`` if needed."""
        driver = require_pycuda()
        # Layout fixed by the capacity, not by n, so every call finds the ticket and each
        # tile's status where earlier calls left them.
        if self.state is None or self.state[1] < tiles:
            capacity = max(tiles, 2 * self.state[1] if self.state else 0)
            nbytes = self.tile_state.allocation_bytes(capacity)
            allocation = driver.mem_alloc(nbytes)
            memset_d8_async(int(allocation), 0, nbytes, stream)
            self.state, self.epoch, self.ticket_base = (allocation, capacity), 0, 0
            self.generation += 1
        allocation, capacity = self.state
        base = int(allocation)
        return {name: base + offset
                for name, offset in self.tile_state.offsets(capacity).items()}

    def next_single_pass_call(self, tiles: int, stream) -> tuple[int, int]:
        """(ticket base, epoch) for the next single-pass call of ``tiles`` tiles."""
        self.epoch += 1
        if self.epoch == EPOCH_LIMIT:
            allocation, capacity = self.state
            status = self.tile_state.offsets(capacity)["status"]
            memset_d8_async(
                int(allocation) + status, 0,
                self.tile_state.allocation_bytes(capacity) - status, stream)
            self.epoch = 1
        ticket_base = self.ticket_base
        self.ticket_base += tiles
        return ticket_base, self.epoch


def temporary_offsets(plan) -> tuple[dict, int]:
    """({name: byte offset}, total bytes) of the plan's per-call temporaries, one after the
    other in one allocation, each aligned."""
    offsets, total = {}, 0
    for temp in plan.temporaries:
        if not temp.persistent:
            offsets[temp.name] = total
            total += aligned(temp.nbytes)
    return offsets, total


class GraphScratch:
    """The scratch of one launch captured into a CUDA graph, which the graph owns: one
    allocation from the stream-ordered pool, made and freed by nodes of the graph around
    the launch (mem_alloc_async, then free after it), so each replay has its own and no
    call outside the graph shares or frees it. A memset node zeroes its single-pass state,
    so every replay takes tickets from 0 with epoch 1, whatever ran before."""

    #: Never replaced: a launcher bound to it is never stale.
    generation = 0

    def __init__(self, tile_state: TileState):
        self.tile_state = tile_state
        self.allocation = None

    def bind(self, plan, stream) -> dict:
        """As StreamScratch.bind, in an allocation made on ``stream`` for this launch."""
        offsets, total = temporary_offsets(plan)
        state_at, tiles = total, plan.single_pass_tiles
        state_bytes = self.tile_state.allocation_bytes(tiles) if tiles else 0
        self.allocation = mem_alloc_async(max(1, total + state_bytes), stream)
        bindings = {name: self.allocation + offset for name, offset in offsets.items()}
        if tiles:
            memset_d8_async(self.allocation + state_at, 0, state_bytes, stream)
            bindings.update({name: self.allocation + state_at + offset for name, offset in
                             self.tile_state.offsets(tiles).items()})
        return bindings

    def next_single_pass_call(self, tiles: int, stream) -> tuple[int, int]:
        """(ticket base, epoch) of the launch: the state was zeroed just before it."""
        return 0, 1

    def free(self, stream) -> None:
        """Free the allocation after the launch, on ``stream``."""
        mem_free_async(self.allocation, stream)
