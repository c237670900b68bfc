"""Device memory of the pycuda GPUArrays scangen returns: a pool per context and stream.

CuPy and torch hand their callers memory from caching allocators; pycuda's gpuarray.empty
calls cuMemAlloc, and the array's end cuMemFree: hundreds of microseconds for large arrays,
and a free waits for the device. So outputs of the pycuda kind come from a
pycuda.tools.DeviceMemoryPool instead. A block freed with its array goes back to the pool it
came from, and a pool serves one stream: the next array it hands out is written by work
queued on that stream after every earlier use of the block there. (As with CuPy's pool, an
array also used on another stream must outlive that use.) ``free_pooled_memory`` hands the
held blocks back to CUDA; a pool that cannot allocate frees its held blocks and retries.

At exit every pool stops holding blocks: an array the program still holds while the
interpreter tears down then goes straight back to CUDA. A pool that holds none and is handed
a block takes the context current at that moment, and PyCUDA ends the process
(``terminate called ... explicit_context_dependent``) where none is.
"""
from __future__ import annotations

from .contexts import release_at_exit, stream_key

_pools = {}  # contexts.stream_key -> DeviceMemoryPool


class _Pools:
    """At exit, with the context current: every pool frees its held blocks and holds no
    more."""

    def release_device_memory(self) -> None:
        for pool in _pools.values():
            pool.stop_holding()
        _pools.clear()


#: Held here because release_at_exit keeps its holders weakly: a pool left for the
#: interpreter's teardown frees its blocks after the context is gone from this thread
#: (PyCUDA then warns, or cannot free them at all when another thread made the context).
_RELEASE_POOLS = _Pools()


def allocator(stream):
    """The allocate function of the current context's pool for ``stream`` (None, a pycuda
    Stream or a RawStream: anything with a handle)."""
    key = stream_key(stream)
    pool = _pools.get(key)
    if pool is None:
        from pycuda.tools import DeviceMemoryPool

        if not _pools:
            release_at_exit(_RELEASE_POOLS)
        pool = _pools[key] = DeviceMemoryPool()
    return pool.allocate


def free_pooled_memory() -> None:
    """Hand the device memory pooled for scangen's pycuda outputs back to CUDA (arrays still
    alive keep theirs)."""
    for pool in _pools.values():
        pool.free_held()
