"""DLPack, the C structures in which array libraries hand each other tensors
(https://dmlc.github.io/dlpack/latest/): read from the capsules a producer's ``__dlpack__``
returns (scangen.interop views such arrays), and made for the arrays scangen hands back to
the library of a producer it knows by a protocol only (``hand_over``), so that a JAX user,
say, gets JAX arrays.

Only the unversioned ("dltensor") capsule is made and read: every consumer takes it, and
the array API lets a producer return it whatever ``max_version`` asks for.

A tensor scangen hands over lives in memory of its own (malloc's, not Python objects'): its
deleter, which the consumer calls when it no longer needs the data, is a Python function
that lets go of the device memory, and a consumer may call it from any thread, or not
before the interpreter's exit. At exit, the tensors still held are given no deleter (the
field DLPack lets be NULL), so that no consumer calls into a finished interpreter.
"""
from __future__ import annotations

import atexit
import ctypes
import threading

import numpy as np

from .runtime import streams
from .types import optional_dtype

#: DLDeviceType: kDLCUDA (what scangen hands over), and the types of CUDA memory it reads
#: (kDLCUDA, kDLCUDAManaged).
CUDA = 2
CUDA_DEVICES = (CUDA, 13)
#: DLDataTypeCode -> numpy kind: int, uint, float, complex, bool; bfloat16 by name.
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_BFLOAT = 4
_CODES = {kind: code for code, kind in _KINDS.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


def numpy_dtype(dtype: DLDataType) -> np.dtype | None:
    """The numpy dtype of a DLPack type of one lane, or None where numpy (and scangen) has
    none: bfloat16 is ml_dtypes' (a TypeError where ml_dtypes is missing)."""
    if dtype.lanes != 1 or dtype.bits % 8:
        return None
    if dtype.code == _BFLOAT and dtype.bits == 16:
        return optional_dtype("bfloat16")
    kind = _KINDS.get(dtype.code)
    if kind == "b":
        return np.dtype(bool) if dtype.bits == 8 else None
    return None if kind is None else np.dtype(f"{kind}{dtype.bits // 8}")


def type_of(dtype: np.dtype) -> tuple | None:
    """``(code, bits, lanes)`` of a numpy dtype, or None for one DLPack has no type for (a
    struct)."""
    dtype = np.dtype(dtype)
    if dtype.fields is None and dtype.name == "bfloat16":
        return _BFLOAT, 16, 1
    code = _CODES.get(dtype.kind)
    return None if code is None else (code, 8 * dtype.itemsize, 1)


# ----------------------------------------------------------------- capsules

_PYTHON = ctypes.pythonapi
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _PYTHON))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _PYTHON))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _PYTHON))
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _PYTHON))
_UNCONSUMED, _CONSUMED = b"dltensor", b"used_dltensor"


def capsule_tensor(capsule) -> DLTensor | None:
    """The DLTensor of an unconsumed "dltensor" capsule (left unconsumed: its destructor
    frees the tensor when it goes), or None for anything else."""
    if not _capsule_is_valid(capsule, _UNCONSUMED):
        return None
    return DLManagedTensor.from_address(_capsule_pointer(capsule, _UNCONSUMED)).dl_tensor


# Python's raw allocator (malloc on every platform, and never freed at exit)
_malloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(("PyMem_RawMalloc", _PYTHON))
_free = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("PyMem_RawFree", _PYTHON))

#: Address of a DLManagedTensor handed over -> what it keeps alive (the device memory's
#: owner), until its deleter runs.
_held = {}
_held_lock = threading.Lock()
_exit_registered = False


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _delete(address):
    """A handed-over tensor's deleter: the consumer is done with it."""
    with _held_lock:
        _held.pop(address, None)
    _free(address)


def _at_exit():
    # A consumer may free its arrays after the interpreter is gone: from now on they find no
    # deleter (the memory goes with the process).
    with _held_lock:
        for address in _held:
            DLManagedTensor.from_address(address).deleter = None
        _held.clear()


def _managed_tensor(ptr: int, shape: tuple, dtype: np.dtype, device_id: int, owner) -> int:
    """A new DLManagedTensor in malloc's memory (its shape and strides after it) describing
    C-contiguous device memory at ``ptr`` that ``owner`` keeps alive; returns its address."""
    global _exit_registered
    ndim = len(shape)
    size = ctypes.sizeof(DLManagedTensor)
    address = _malloc(size + 16 * max(ndim, 1))
    if not address:
        raise MemoryError("no host memory for a DLPack tensor")
    extents = (ctypes.c_int64 * max(ndim, 1)).from_address(address + size)
    strides = (ctypes.c_int64 * max(ndim, 1)).from_address(address + size + 8 * max(ndim, 1))
    step = 1
    for axis in reversed(range(ndim)):  # in elements, as DLPack counts them
        extents[axis], strides[axis] = shape[axis], step
        step *= shape[axis]
    managed = DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    tensor.data, tensor.byte_offset, tensor.ndim = ptr or None, 0, ndim
    tensor.device = DLDevice(CUDA, device_id)
    tensor.dtype = DLDataType(*type_of(dtype))
    tensor.shape = ctypes.cast(ctypes.addressof(extents), ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(ctypes.addressof(strides), ctypes.POINTER(ctypes.c_int64))
    managed.manager_ctx = None
    managed.deleter = ctypes.cast(_delete, ctypes.c_void_p).value
    with _held_lock:
        if not _exit_registered:
            # Registered on first use, after scangen's own exit handler (made with its
            # context): atexit runs this one first, while the pools still take memory back.
            atexit.register(_at_exit)
            _exit_registered = True
        _held[address] = owner
    return address


class _Offer:
    """What a consumer's ``from_dlpack`` is given: ``__dlpack_device__`` and ``__dlpack__``,
    the latter making a capsule of the memory each time it is asked, and ordering the
    consumer's stream after the work queued on ``stream`` (the call's)."""

    def __init__(self, ptr, shape, dtype, device_id, owner, stream):
        self.ptr, self.shape, self.dtype, self.owner = ptr, shape, dtype, owner
        self.device_id, self.stream = device_id, stream
        self.capsules = []

    def __dlpack_device__(self):
        return CUDA, self.device_id

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"scangen's results are on CUDA device {self.device_id}, not "
                              f"{tuple(dl_device)}")
        if copy:
            raise BufferError("scangen hands over its results without copying them")
        if stream != -1:  # -1: the consumer asks for no ordering
            # None: the legacy default stream, as the array API says
            streams.order_after(self.stream, 1 if stream is None else stream)
        address = _managed_tensor(self.ptr, self.shape, self.dtype, self.device_id, self.owner)
        capsule = _new_capsule(address, _UNCONSUMED, None)
        self.capsules.append(capsule)
        return capsule

    def release_unconsumed(self):
        """Delete the tensors of capsules no consumer took (a consumer renames the capsules
        it takes, and calls their deleters itself)."""
        for capsule in self.capsules:
            if _capsule_is_valid(capsule, _UNCONSUMED):
                address = _capsule_pointer(capsule, _UNCONSUMED)
                _capsule_set_name(capsule, _CONSUMED)
                _delete(address)
        self.capsules.clear()


def hand_over(from_dlpack, ptr, shape, dtype, device_id, owner, stream):
    """``from_dlpack`` (a library's, e.g. ``jax.numpy.from_dlpack``) of C-contiguous device
    memory at ``ptr`` of ``shape`` and ``dtype`` on CUDA device ``device_id``, which
    ``owner`` keeps alive until the consumer lets go of it, written by work queued on
    ``stream`` (the stream a consumer names waits for it). The memory is not copied. A
    capsule the consumer did not take is deleted here, so the capsules need no destructor
    (one in Python could run while the interpreter unwinds an exception)."""
    offer = _Offer(ptr, tuple(shape), np.dtype(dtype), device_id, owner, stream)
    try:
        return from_dlpack(offer)
    finally:
        offer.release_unconsumed()
