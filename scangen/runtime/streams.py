"""The streams scangen works on, and the few driver calls it makes on them.

A stream here is one of three things, decided once per call by scangen.interop:

* ``None``: the legacy default stream (handle 0);
* a pycuda ``Stream``;
* a :class:`RawStream`: a CUstream handle made by someone else (a CuPy or torch stream, a
  raw handle the caller passed).

PyCUDA launches, sets and synchronises only on its own ``Stream`` objects: it cannot wrap a
foreign handle, and it exposes neither a module's nor a function's CUfunction handle. So
for a RawStream this module calls the CUDA driver itself, through ctypes: it loads the
module's cubin a second time (cuModuleLoadData) to get CUfunction handles, and launches
with cuLaunchKernel on the handle, with the same packed parameter buffer pycuda builds. It
also pins host arrays in place (cuMemHostRegister), which pycuda's register_host_memory
cannot do under numpy 2, asks whether host memory is pinned, asks whether a stream is being
captured into a CUDA graph, and takes a captured launch's scratch from the stream-ordered
allocator (cuMemAllocAsync), which pycuda lacks. Everything else keeps
going through pycuda. This module is the only one that calls libcuda on the GPU's work
(scangen.devices only asks which GPU there is); it imports nothing from pycuda.
"""
from __future__ import annotations

import ctypes
import struct
import sys
import threading

from .gpu import GPUUnavailableError


class CUDADriverError(RuntimeError):
    """A CUDA driver call made through ctypes failed; the message names the call."""


class RawStream:
    """A CUstream handle scangen did not create; it keeps ``owner`` (the library's stream
    object, if any) alive while it is used."""

    __slots__ = ("handle", "owner")

    def __init__(self, handle: int, owner=None):
        self.handle = handle
        self.owner = owner

    def synchronize(self) -> None:
        _check(_lib().cuStreamSynchronize(ctypes.c_void_p(self.handle)),
               "cuStreamSynchronize")

    def __cuda_stream__(self):
        """The CUDA stream protocol (version 0, the handle), so libraries can wrap it."""
        return 0, self.handle

    def __repr__(self):
        return f"RawStream({self.handle:#x})"


# ----------------------------------------------------------------- libcuda through ctypes

_library = None
_library_lock = threading.Lock()
_VOID_P, _UINT, _SIZE_T = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t
_CUDEVICEPTR = ctypes.c_ulonglong
#: The driver entry points used, with their argument types. All take the current context.
_SIGNATURES = {
    "cuModuleLoadData": [ctypes.POINTER(_VOID_P), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_VOID_P), _VOID_P, ctypes.c_char_p],
    "cuFuncSetAttribute": [_VOID_P, ctypes.c_int, ctypes.c_int],
    "cuLaunchKernel": [_VOID_P] + [_UINT] * 7 + [_VOID_P, _VOID_P, _VOID_P],
    "cuMemsetD8Async": [_CUDEVICEPTR, ctypes.c_ubyte, _SIZE_T, _VOID_P],
    "cuStreamSynchronize": [_VOID_P],
    "cuStreamGetCtx": [_VOID_P, ctypes.POINTER(_VOID_P)],
    "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
    "cuPointerGetAttribute": [_VOID_P, ctypes.c_int, _CUDEVICEPTR],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuEventCreate": [ctypes.POINTER(_VOID_P), _UINT],
    "cuEventRecord": [_VOID_P, _VOID_P],
    "cuEventSynchronize": [_VOID_P],
    "cuEventDestroy_v2": [_VOID_P],
    "cuStreamWaitEvent": [_VOID_P, _VOID_P, _UINT],
    "cuMemHostRegister_v2": [_VOID_P, _SIZE_T, _UINT],
    "cuMemHostUnregister": [_VOID_P],
    "cuMemHostGetFlags": [ctypes.POINTER(_UINT), _VOID_P],
    "cuCtxGetCurrent": [ctypes.POINTER(_VOID_P)],
    "cuCtxSetCurrent": [_VOID_P],
    "cuStreamIsCapturing": [_VOID_P, ctypes.POINTER(ctypes.c_int)],
    "cuMemAllocAsync": [ctypes.POINTER(_CUDEVICEPTR), _SIZE_T, _VOID_P],
    "cuMemFreeAsync": [_CUDEVICEPTR, _VOID_P],
}
#: CU_EVENT_DISABLE_TIMING: an event without timing is cheaper to record and wait on.
_EVENT_DISABLE_TIMING = 2
#: CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END.
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 1, 2, 0
#: CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL.
_ATTRIBUTE_DEVICE_ORDINAL = 9
#: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
_ATTRIBUTE_MAX_DYNAMIC_SHARED = 8


def _lib():
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
                try:
                    library = ctypes.CDLL(name)
                except OSError as err:
                    raise GPUUnavailableError(f"cannot load the CUDA driver ({name}): {err}") \
                        from err
                for function, argtypes in _SIGNATURES.items():
                    getattr(library, function).argtypes = argtypes
                    getattr(library, function).restype = ctypes.c_int
                _library = library
    return _library


def _check(result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(result, ctypes.byref(name))
        raise CUDADriverError(f"{call} failed: {(name.value or b'?').decode()} ({result})")


def pin_host_memory(address: int, nbytes: int) -> None:
    """Page-lock ``nbytes`` of host memory at ``address`` where it is, for the current
    context, until :func:`unpin_host_memory`: copies between it and the device then run
    asynchronously with no staging buffer. (pycuda's register_host_memory pins, then fails
    under numpy 2 giving its result array a second base.)"""
    _check(_lib().cuMemHostRegister_v2(ctypes.c_void_p(address), nbytes, 0),
           "cuMemHostRegister")


def unpin_host_memory(address: int) -> None:
    """Undo :func:`pin_host_memory` of the memory starting at ``address``."""
    _check(_lib().cuMemHostUnregister(ctypes.c_void_p(address)), "cuMemHostUnregister")


def driver_context() -> int:
    """The CUcontext the driver has current in this thread (0: none). Libraries of the CUDA
    runtime change it behind pycuda's back (cudaSetDevice makes a device's primary context
    current), so it can differ from the context on pycuda's stack."""
    handle = _VOID_P()
    _check(_lib().cuCtxGetCurrent(ctypes.byref(handle)), "cuCtxGetCurrent")
    return handle.value or 0


def set_driver_context(handle: int) -> None:
    """Make the CUcontext ``handle`` the driver's current one in this thread (a thread of
    scangen's own that only calls the driver through this module: PyCUDA's stack there
    stays empty)."""
    _check(_lib().cuCtxSetCurrent(ctypes.c_void_p(handle)), "cuCtxSetCurrent")


def is_pinned_host_memory(address: int) -> bool:
    """Whether the host memory at ``address`` is page-locked for the current context
    (allocated pinned, as by cupyx.empty_pinned or pycuda's pagelocked_empty, or
    registered); the driver answers for pinned memory only."""
    flags = _UINT()
    return _lib().cuMemHostGetFlags(ctypes.byref(flags), ctypes.c_void_p(address)) == 0


def memset_d8_async(address: int, value: int, nbytes: int, stream) -> None:
    """Set ``nbytes`` bytes at ``address`` to ``value``, ordered on ``stream``."""
    if isinstance(stream, RawStream):
        _check(_lib().cuMemsetD8Async(address, value, nbytes, ctypes.c_void_p(stream.handle)),
               "cuMemsetD8Async")
    else:
        import pycuda.driver as driver

        driver.memset_d8_async(address, value, nbytes, stream)


def capturing(stream) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph (or was, and the capture broke):
    its work is then recorded as the graph's nodes, not run. The legacy default stream
    (None) never is."""
    if stream is None:
        return False
    status = ctypes.c_int()
    _check(_lib().cuStreamIsCapturing(ctypes.c_void_p(stream.handle), ctypes.byref(status)),
           "cuStreamIsCapturing")
    return status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE


def mem_alloc_async(nbytes: int, stream) -> int:
    """``nbytes`` of device memory from the device's memory pool, ordered on ``stream`` (in a
    capture: a node of the graph, allocated by each replay)."""
    address = _CUDEVICEPTR()
    _check(_lib().cuMemAllocAsync(ctypes.byref(address), nbytes,
                                  ctypes.c_void_p(None if stream is None else stream.handle)),
           "cuMemAllocAsync")
    return address.value


def mem_free_async(address: int, stream) -> None:
    """Free what mem_alloc_async gave, ordered on ``stream``."""
    _check(_lib().cuMemFreeAsync(address, ctypes.c_void_p(None if stream is None else
                                                          stream.handle)), "cuMemFreeAsync")


def before_host_read(stream) -> None:
    """Make a synchronous device-to-host copy (pycuda's ``.get()``) see the work queued on
    ``stream``. That copy runs on the legacy default stream, which waits for blocking
    streams but not for non-blocking ones (torch's and CuPy's own streams are
    non-blocking), so any stream but the legacy one is synchronised first."""
    if stream is not None:
        stream.synchronize()


def synchronize(stream) -> None:
    """Wait for the work queued on ``stream`` (None: the legacy default stream)."""
    if stream is None:
        _check(_lib().cuStreamSynchronize(ctypes.c_void_p(0)), "cuStreamSynchronize")
    else:
        stream.synchronize()


def order_after(stream, handle: int) -> None:
    """Have the stream of ``handle`` (a raw CUstream, 1: the legacy default stream, 2: the
    per-thread one) run its next work after the work queued on ``stream`` (as launches
    take it: None is the legacy default stream), by an event; nothing where they are one
    stream."""
    ours = 1 if stream is None else stream.handle
    if handle in (0, 1) and ours in (0, 1) or handle == ours:
        return
    event = StreamEvent()  # the wait keeps what it waits for: the event may go at once
    event.record(stream)
    event.make_wait(handle)


def copy_to_host(host, address: int, stream) -> None:
    """Copy device memory at ``address`` into the numpy array ``host``, after the work
    queued on ``stream``."""
    before_host_read(stream)
    import pycuda.driver as driver

    driver.memcpy_dtoh(host, address)


def stream_context(handle: int) -> int:
    """The CUcontext a stream handle belongs to."""
    context = _VOID_P()
    _check(_lib().cuStreamGetCtx(ctypes.c_void_p(handle), ctypes.byref(context)),
           "cuStreamGetCtx")
    return context.value or 0


def context_device() -> int:
    """The device ordinal of the current context."""
    device = ctypes.c_int()
    _check(_lib().cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
    return device.value


def pointer_device(address: int) -> int:
    """The device ordinal of the allocation ``address`` points into."""
    ordinal = ctypes.c_int()
    _check(_lib().cuPointerGetAttribute(ctypes.byref(ordinal), _ATTRIBUTE_DEVICE_ORDINAL,
                                        address), "cuPointerGetAttribute")
    return ordinal.value


class StreamEvent:
    """A CUDA event (without timing) made in the current context, to be recorded on any
    kind of stream there (None, a pycuda Stream, a RawStream) and waited for: the host can
    then wait for part of what a call queued, not for all of it."""

    def __init__(self):
        event = _VOID_P()
        _check(_lib().cuEventCreate(ctypes.byref(event), _EVENT_DISABLE_TIMING), "cuEventCreate")
        self.handle = event.value

    def record(self, stream) -> None:
        handle = 0 if stream is None else stream.handle
        _check(_lib().cuEventRecord(ctypes.c_void_p(self.handle), ctypes.c_void_p(handle)),
               "cuEventRecord")

    def synchronize(self) -> None:
        """Wait for the work queued before the last record."""
        _check(_lib().cuEventSynchronize(ctypes.c_void_p(self.handle)), "cuEventSynchronize")

    def make_wait(self, handle: int) -> None:
        """Have the stream of ``handle`` run what is queued on it next only after the work
        queued before the last record."""
        _check(_lib().cuStreamWaitEvent(ctypes.c_void_p(handle), ctypes.c_void_p(self.handle),
                                        0), "cuStreamWaitEvent")

    def __del__(self):
        # At interpreter exit the context may be gone, and with it the event.
        if getattr(self, "handle", None) and _library is not None:
            _library.cuEventDestroy_v2(ctypes.c_void_p(self.handle))


# ----------------------------------------------------------------- launching on a handle

class RawFunctions:
    """The CUfunction handles of one cubin, loaded into the current context. A kernel of
    ``dynamic_shared`` ({name: bytes}) is let use that much dynamic shared memory, as the
    pycuda functions of the same module are (scangen.compile.CompiledModule)."""

    def __init__(self, cubin: bytes, dynamic_shared: dict | None = None):
        module = _VOID_P()
        _check(_lib().cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        self.module = module
        self.dynamic_shared = dict(dynamic_shared or {})
        self._functions = {}

    def function(self, name: str) -> int:
        if name not in self._functions:
            handle = _VOID_P()
            _check(_lib().cuModuleGetFunction(ctypes.byref(handle), self.module,
                                              name.encode()), f"cuModuleGetFunction({name})")
            if name in self.dynamic_shared:
                _check(_lib().cuFuncSetAttribute(handle, _ATTRIBUTE_MAX_DYNAMIC_SHARED,
                                                 self.dynamic_shared[name]),
                       f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES)")
            self._functions[name] = handle.value
        return self._functions[name]


class RawLaunch:
    """Launch one kernel on a RawStream: ``launch(grid, block, stream, *args)``, the call
    pycuda's ``prepared_async_call`` takes. The arguments are packed by the prepared format
    with native alignment, exactly as pycuda packs them, and passed to cuLaunchKernel as one
    parameter buffer, with ``shared_bytes`` of dynamic shared memory. The buffer and the
    driver's list of extras are made once and packed into on each call (cuLaunchKernel
    copies the parameters before it returns), so a launch allocates nothing; one launcher
    launches from one thread at a time (a Runtime's lock, or a launcher made per call)."""

    __slots__ = ("function", "packer", "shared_bytes", "_launch", "_parameters", "_size",
                 "_extra")

    def __init__(self, function: int, arg_format: str, shared_bytes: int = 0):
        self.function = function
        self.packer = struct.Struct(arg_format)
        self.shared_bytes = shared_bytes
        self._launch = _lib().cuLaunchKernel
        self._parameters = ctypes.create_string_buffer(max(1, self.packer.size))
        self._size = _SIZE_T(self.packer.size)
        self._extra = (_VOID_P * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(self._parameters),
                                    _PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                    _PARAM_END)

    def __call__(self, grid, block, stream, *args) -> None:
        self.packer.pack_into(self._parameters, 0, *args)
        _check(self._launch(self.function, *grid, *block, self.shared_bytes, stream.handle,
                            None, self._extra),
               "cuLaunchKernel")
