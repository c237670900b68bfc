"""Arrays and streams of other libraries: the one place that knows about array kinds.

Every public entry point converts at its boundary, through a :class:`Call`:

* each array argument is recognised as one *kind* (pycuda GPUArray, CuPy, torch, any other
  object with ``__cuda_array_interface__``, or any object with ``__dlpack__``) and seen
  through a view on the same memory (no copy): its address, shape and dtype, and the object
  that owns the memory, kept alive with the view. The kernels only ever see views;
* one call takes arrays of one kind (a TypeError says which argument differs);
* a ScanKernel's arguments are checked against their declarations (``convert_arguments``):
  arrays by dtype, scalars converted to their C type, ``n`` against the first array;
* outputs are allocated by the caller's library (``cupy.empty``, ``torch.empty`` on the
  input's device, ``gpuarray.empty``), so what is returned is native and owns its memory.
  A producer known by a protocol only that names its library (``__array_namespace__``:
  JAX, ...) gets that library's arrays back, its ``from_dlpack`` of the memory scangen
  wrote (scangen.dlpack; ``Call.returned``); other such producers (Numba, ...) get pycuda
  GPUArrays, which they read through ``__cuda_array_interface__``;
* the stream: ``stream=`` may be a pycuda Stream, a CuPy or torch stream, any object with
  ``__cuda_stream__``, or a raw CUstream handle (int). Without one, the work is ordered on
  the array library's current stream (``torch.cuda.current_stream(device)``,
  ``cupy.cuda.get_current_stream()``, the stream a ``__cuda_array_interface__`` v3 names),
  so scangen calls mix with that library's work without synchronising by hand.

CuPy and torch are never imported here: an object can only be a CuPy array or a torch
tensor if its library is already in ``sys.modules``.
"""
from __future__ import annotations

import sys

import numpy as np

from . import dlpack
from .args import INITIAL_ARGUMENT, convert_scalar
from .plan import as_count
from .runtime import contexts, gpu, streams
from .runtime.pool import allocator
from .runtime.streams import RawStream
from .types import as_dtype, optional_dtype

__all__ = ["Call", "DeviceArray", "DevicePointer", "as_stream", "check_array",
           "convert_arguments", "kind_of", "overlaps", "parse_cuda_array_interface"]


class DeviceArray:
    """A view of device memory: what the kernels are given. ``base`` owns the memory."""

    __slots__ = ("ptr", "shape", "dtype", "size", "nbytes", "base", "readonly")

    def __init__(self, ptr, shape, dtype, base, readonly=False):
        size = 1
        for extent in shape:
            size *= extent
        self.ptr, self.shape, self.dtype, self.size = ptr, shape, dtype, size
        self.nbytes, self.base, self.readonly = size * dtype.itemsize, base, readonly

    def __repr__(self):
        return f"DeviceArray({self.ptr:#x}, {self.shape}, {self.dtype})"


class DevicePointer:
    """Device memory known only by its address: ``DevicePointer(address, dtype, size)``, a
    1-D array of ``size`` elements of ``dtype`` at ``address`` (a CUdeviceptr, as an int).

    The one way to hand scangen memory no array object describes (a pointer from C, a
    buffer of a library scangen does not know): a bare int is refused where an array is
    expected, as it carries neither type nor length and a wrong one would be launched
    unchecked. It is checked like an array (its dtype against the pointer's declaration,
    ``n`` against its size) and read through ``__cuda_array_interface__`` by every entry
    point. The memory must stay allocated while a call that uses it runs."""

    __slots__ = ("ptr", "dtype", "size", "shape", "nbytes")

    def __init__(self, address, dtype, size):
        if isinstance(address, (bool, np.bool_)) or not isinstance(address, (int, np.integer)):
            raise TypeError(f"DevicePointer address must be an int (a CUdeviceptr), not "
                            f"{address!r}")
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"DevicePointer size must be an int (elements), not {size!r}")
        dtype = as_dtype(dtype, "DevicePointer dtype")
        address, size = int(address), int(size)
        if not 0 <= address < 1 << 64:
            raise ValueError(f"DevicePointer address {address} is not a 64-bit device address")
        if size < 0:
            raise ValueError(f"DevicePointer size must be >= 0, not {size}")
        if address == 0 and size:
            raise ValueError(f"DevicePointer address is 0 (null) for {size} elements")
        if address % dtype.alignment:
            raise ValueError(f"DevicePointer address {address:#x} is not aligned to "
                             f"{dtype.alignment} bytes, as {dtype} needs")
        self.ptr, self.dtype, self.size, self.shape = address, dtype, size, (size,)
        self.nbytes = size * dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 2, **({"descr": self.dtype.descr} if self.dtype.fields else {})}

    def __repr__(self):
        return f"DevicePointer({self.ptr:#x}, {self.dtype}, {self.size})"


def c_contiguous(shape, strides, itemsize) -> bool:
    """Whether byte ``strides`` lay out ``shape`` in C order (extents of 1 have any stride;
    an array of no elements is laid out whatever its strides, as numpy says)."""
    if len(shape) == 1:  # the common case, on every call
        return shape[0] <= 1 or strides[0] == itemsize
    if 0 in shape:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent > 1 and stride != expected:
            return False
        expected *= extent
    return True


def _not_contiguous(name, how) -> ValueError:
    return ValueError(f"{name} is not C-contiguous (a strided view or a transpose); scangen "
                      f"reads and writes packed arrays only: pass {how}")


# ----------------------------------------------------------------- the kinds of array

class _Kind:
    """How scangen sees one library's arrays. ``label`` names them in messages. ``view``
    checks what the kernels need (CUDA memory, C order, the context's device)."""

    label = ""
    #: Whether a call's results go back through hand_back (Call.returned).
    hands_back = False

    def view(self, value, name: str, stream) -> DeviceArray:
        raise NotImplementedError

    def default_stream(self, value):
        """The stream work on ``value`` is ordered on when the call names none."""
        return None

    def contiguous(self, value):
        """``value`` in C order: itself where it is, else a packed copy by its library, on
        the calling thread's current stream (a kind with no such copy returns ``value``, which
        ``view`` then refuses, saying how to pack it)."""
        return value

    def empty(self, shape, dtype, like, stream, current):
        """A new native array (of the library scangen returns to this kind's callers),
        written on ``stream``; ``current``: that is the library's current stream. A pycuda
        GPUArray's memory comes from scangen's pool for that stream (runtime/pool.py)."""
        return gpu.gpuarray().empty(shape, dtype, allocator=allocator(stream))

    def hand_back(self, result, like, stream):
        """What a call returns for ``result`` (arrays ``empty`` made, in a tuple or not),
        once its work is queued on ``stream``, where ``hands_back``; ``like``: the call's
        first array."""
        return result

    def new_view(self, native, shape, dtype) -> DeviceArray:
        """The view of an array ``empty`` just made (packed, on the context's device, of
        ``shape`` and ``dtype``). Kinds whose ``empty`` makes another library's arrays
        (GPUArrays, where the library has no allocator scangen calls) view them as that
        library's; CuPy and torch read the address alone, with nothing to check."""
        return kind_of(native).view(native, "out", None)


class _PyCUDA(_Kind):
    label = "pycuda GPUArray"

    def view(self, value, name, stream):
        # A GPUArray has every attribute a DeviceArray has: it is its own view, but an empty
        # one has no memory (gpudata None), so its .ptr raises: it reads as address 0.
        if not c_contiguous(value.shape, value.strides, value.dtype.itemsize):
            raise _not_contiguous(name, f"{name}.copy()")
        return value if value.size else DeviceArray(0, value.shape, value.dtype, value)


class _CuPy(_Kind):
    label = "CuPy array"

    def view(self, value, name, stream):
        if not value.flags.c_contiguous:
            raise _not_contiguous(name, f"cupy.ascontiguousarray({name})")
        _check_device(name, value.device.id)
        return DeviceArray(value.data.ptr, value.shape, value.dtype, value)

    def default_stream(self, value):
        return sys.modules["cupy"].cuda.get_current_stream()

    def contiguous(self, value):
        return sys.modules["cupy"].ascontiguousarray(value)

    def empty(self, shape, dtype, like, stream, current):
        cupy = sys.modules["cupy"]
        if current or _same_stream(stream, cupy.cuda.get_current_stream().ptr):
            return cupy.empty(shape, dtype)
        # CuPy's pool hands memory back to the stream it was allocated on: allocate on the
        # stream that writes it, or a freed block could be reused while the scan still runs.
        # Stream.from_external (the CUDA stream protocol) where CuPy has it, which deprecates
        # ExternalStream.
        from_external = getattr(getattr(cupy.cuda, "Stream", None), "from_external", None)
        with (from_external(stream)
              if from_external is not None and hasattr(stream, "__cuda_stream__") else
              cupy.cuda.ExternalStream(stream.handle, like.device.id)):
            return cupy.empty(shape, dtype)

    def new_view(self, native, shape, dtype):
        return DeviceArray(native.data.ptr, tuple(shape), dtype, native)


#: torch dtype name -> numpy dtype (None: no numpy twin; refused).
_TORCH_TO_NUMPY = {}
#: numpy dtype -> torch dtype, of the dtypes torch has (_Torch.empty).
_NUMPY_TO_TORCH = {}


class _Torch(_Kind):
    label = "torch tensor"

    def view(self, value, name, stream):
        device = value.device  # each read of a tensor's device makes a new object
        if device.type != "cuda":
            raise TypeError(f"{name} is a torch tensor on {device}; scangen scans device "
                            f"memory: move it first ({name}.cuda() or {name}.to('cuda'))")
        if not value.is_contiguous():
            raise _not_contiguous(name, f"{name}.contiguous()")
        # A lazy conjugate or negation (x.conj(), torch's neg views) shares memory that holds
        # the values before it: the kernels would read (or write) those.
        if value.is_conj() or value.is_neg():
            raise ValueError(f"{name} is a lazy {'conjugate' if value.is_conj() else 'negated'} "
                             f"view of its memory; pass {name}.resolve_conj() (or "
                             f"{name}.resolve_neg()), which holds its values")
        _check_device(name, device.index)
        return DeviceArray(value.data_ptr(), tuple(value.shape), _torch_dtype(value.dtype, name),
                           value)

    def default_stream(self, value):
        device = value.device
        if device.type != "cuda":
            return None  # refused by view(), with a message that says what to do
        return _torch_current_stream(device)

    def contiguous(self, value):
        return value.contiguous()

    def empty(self, shape, dtype, like, stream, current):
        torch = sys.modules["torch"]
        torch_dtype = _NUMPY_TO_TORCH.get(dtype)
        if not isinstance(torch_dtype, torch.dtype):  # not yet found (or of another torch)
            # by name: numpy's and ml_dtypes' names are torch's (bfloat16 is of kind "V"
            # there, as a struct is, but has no fields); remembered, as numpy works a
            # dtype's name out on each read (about a microsecond)
            torch_dtype = getattr(torch, dtype.name, None) if dtype.fields is None else None
            if not isinstance(torch_dtype, torch.dtype):
                raise TypeError(f"torch has no dtype for {dtype}; pass CuPy arrays or pycuda "
                                "GPUArrays for this scan")
            _NUMPY_TO_TORCH[dtype] = torch_dtype
        if current or _same_stream(stream, _torch_current_stream(like.device)):
            return torch.empty(shape, dtype=torch_dtype, device=like.device)
        # The caching allocator ties a block to the stream current at allocation: allocate
        # on the stream that writes it (see _CuPy.empty).
        owner = getattr(stream, "owner", None)
        owner = owner if isinstance(owner, torch.cuda.Stream) else \
            torch.cuda.ExternalStream(stream.handle, device=like.device)
        with torch.cuda.stream(owner):
            return torch.empty(shape, dtype=torch_dtype, device=like.device)

    def new_view(self, native, shape, dtype):
        return DeviceArray(native.data_ptr(), tuple(shape), dtype, native)


def _torch_current_stream(device) -> int:
    """The handle of torch's current stream on ``device``: read alone where torch has the
    call for it (torch.compile's generated code calls it), which costs a fraction of making
    the torch.cuda.Stream (several microseconds on a slow host)."""
    torch = sys.modules["torch"]
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    return raw(device.index) if raw is not None else \
        torch.cuda.current_stream(device).cuda_stream


def _same_stream(stream, current: int) -> bool:
    """Whether a resolved stream is the library's current one (handle ``current``)."""
    return (0 if stream is None else stream.handle) == (0 if current == 1 else current)


def _torch_dtype(torch_dtype, name) -> np.dtype:
    dtype = _TORCH_TO_NUMPY.get(torch_dtype, False)
    if dtype is False:
        short = str(torch_dtype).rpartition(".")[2]  # torch.float32 -> float32
        try:
            # bfloat16 is ml_dtypes' where that is installed
            dtype = optional_dtype(short) or np.dtype(short)
        except TypeError:
            dtype = None  # float8, or bfloat16 without ml_dtypes: no numpy twin
        _TORCH_TO_NUMPY[torch_dtype] = dtype
    if dtype is None:
        raise TypeError(f"{name} has dtype {torch_dtype}, which scangen does not scan (no "
                        f"numpy twin); convert it first, e.g. {name}.float()")
    return dtype


class _Protocol(_Kind):
    """A kind known by a protocol only (the producer's library is not one scangen knows by
    name): results are scangen's GPUArrays, handed over to the producer's library where it
    names one (hand_back)."""

    hands_back = True

    def hand_back(self, result, like, stream):
        """``result`` with each GPUArray in it (the call made them all: its arrays are of
        this kind) handed over to ``like``'s library through the array API's
        ``from_dlpack``, without a copy: a JAX caller gets JAX arrays. Where ``like`` names
        no such library (``__array_namespace__``), or for a struct dtype (DLPack has no
        type for it), the GPUArrays themselves."""
        namespace = getattr(like, "__array_namespace__", None)
        from_dlpack = getattr(namespace(), "from_dlpack", None) if namespace else None
        if from_dlpack is None:
            return result
        return _handed_over(result, from_dlpack, gpu.gpuarray().GPUArray, stream)


class _ArrayInterface(_Protocol):
    label = "__cuda_array_interface__ array"

    def view(self, value, name, stream):
        info = parse_cuda_array_interface(value.__cuda_array_interface__, name)
        if info.ptr:
            _context_device()  # first: without pycuda or a context, that is the error to see
            _check_device(name, streams.pointer_device(info.ptr))
        return DeviceArray(info.ptr, info.shape, info.dtype, value,
                           info.readonly or _of_jax(value))

    def default_stream(self, value):
        return parse_cuda_array_interface(value.__cuda_array_interface__, "x").stream


class _DLPack(_Protocol):
    label = "DLPack array"

    def view(self, value, name, stream):
        device_type, device_id = value.__dlpack_device__()
        if device_type not in dlpack.CUDA_DEVICES:
            raise TypeError(f"{name} is not in CUDA device memory (DLPack device type "
                            f"{device_type}); copy it to the GPU first")
        _check_device(name, device_id)
        # The producer makes the data ready on the stream the consumer names (1: legacy).
        capsule = value.__dlpack__(stream=1 if stream is None else stream.handle)
        ptr, shape, dtype = parse_dlpack_capsule(capsule, name)
        # The capsule keeps the producer's memory alive; its destructor releases it.
        return DeviceArray(ptr, shape, dtype, (value, capsule), _of_jax(value))


def _handed_over(item, from_dlpack, array_type, stream):
    """_Protocol.hand_back's result, item by item (a function, not a closure: see _to_host)."""
    if isinstance(item, tuple):
        return tuple(_handed_over(part, from_dlpack, array_type, stream) for part in item)
    if not isinstance(item, array_type) or dlpack.type_of(item.dtype) is None:
        return item
    # an empty GPUArray has no memory, and its .ptr raises
    ptr = item.ptr if item.size else 0
    return dlpack.hand_over(from_dlpack, ptr, item.shape, item.dtype, _context_device(), item,
                            stream)


def _of_jax(value) -> bool:
    """Whether ``value`` is JAX's: an array, which JAX never changes once made (scangen
    reads it, and refuses to write its results there), or a tracer."""
    return type(value).__module__.split(".")[0] in ("jax", "jaxlib")


PYCUDA, CUPY, TORCH, ARRAY_INTERFACE, DLPACK = (_PyCUDA(), _CuPy(), _Torch(), _ArrayInterface(),
                                                _DLPack())
#: Kinds recognised by type alone, remembered per type (the per-call cost is one lookup).
_KIND_OF_TYPE = {}


def kind_of(value):
    """The kind of an array argument, or None if it is not a device array."""
    kind = _KIND_OF_TYPE.get(type(value))
    if kind is not None:
        return kind
    for module, attribute, kind in (("pycuda.gpuarray", "GPUArray", PYCUDA),
                                    ("cupy", "ndarray", CUPY), ("torch", "Tensor", TORCH)):
        # A module another thread is still importing may not define its class yet; then no
        # value can be an instance of it.
        array_type = getattr(sys.modules.get(module), attribute, None)
        if array_type is not None and isinstance(value, array_type):
            _KIND_OF_TYPE[type(value)] = kind
            return kind
    if isinstance(value, (np.ndarray, np.generic)):
        return None  # host memory (numpy also speaks DLPack, for the CPU)
    # Per object, not per type: a type may have the interface on some instances only (a
    # JAX array on the CPU raises another error than AttributeError for it: no interface).
    if _has(value, "__cuda_array_interface__"):
        return ARRAY_INTERFACE
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return DLPACK
    return None


def _has(value, attribute) -> bool:
    """hasattr, where reading the attribute may raise any error (a property)."""
    try:
        return hasattr(value, attribute)
    except Exception:
        return False


def not_an_array(name, value) -> TypeError:
    hint = ""
    if isinstance(value, np.ndarray):
        hint = (" (copy it to the GPU first, e.g. pycuda.gpuarray.to_gpu, or call a one-shot "
                "function such as scangen.inclusive_scan, which copies host arrays in and out)")
    elif _of_jax(value):  # a JAX tracer: the call is being traced, by jax.jit say
        hint = (": scangen runs eagerly on concrete arrays, and JAX traces this call; call "
                "scangen outside the traced function, on its concrete results")
    return TypeError(f"{name} must be a pycuda GPUArray or another CUDA array (CuPy, torch, "
                     f"Numba: anything with __cuda_array_interface__ or __dlpack__), not "
                     f"{type(value).__name__}{hint}")


# ----------------------------------------------------------------- one call's arrays

class Call:
    """The arrays of one call, all of one kind: views for the kernels, the stream the call
    runs on, and native outputs.

    ``arrays`` maps argument names to arrays (None: not given); ``writes`` names the ones
    the call writes (refused if read-only). The first array given again under another name
    (``out=x``) shares its view.
    """

    __slots__ = ("kind", "like", "stream", "views", "_default_stream")

    def __init__(self, stream, arrays: dict, writes=()):
        if stream is None and self._own_views(arrays):
            return
        # One pass, as this runs on every call: the first array decides the kind and the
        # stream (which a DLPack view needs), every later one must be of the same kind.
        kind = like = first = None
        views = {}
        for name, value in arrays.items():
            if value is None:
                views[name] = None
                continue
            this = _KIND_OF_TYPE.get(type(value)) or kind_of(value)
            if kind is None:
                if this is None:
                    raise not_an_array(name, value)
                kind, like, first = this, value, name
                self._default_stream = stream is None
                stream = as_stream(kind.default_stream(value) if stream is None else stream,
                                   check_device=stream is not None)
            elif this is not kind:
                raise not_an_array(name, value) if this is None else TypeError(
                    f"{name} is a {this.label} but {first} is a {kind.label}: pass arrays of "
                    "one kind in a call (cupy.asarray and torch.as_tensor wrap other CUDA "
                    "arrays without a copy)")
            if value is like and name != first:  # out=x: one view under two names
                view = views[name] = views[first]
            else:
                view = views[name] = kind.view(value, name, stream)
            # Only views scangen made can be read-only (a GPUArray, its own view, cannot).
            if type(view) is DeviceArray and view.readonly and name in writes:
                raise ValueError(f"{name} is read-only (a JAX array, or a view its library "
                                 "marks read-only), and scangen writes there: pass a writable "
                                 f"array, or leave {name} out where the call makes one")
        if kind is None:  # no array given: pycuda's kind, on the stream given
            kind, self._default_stream = PYCUDA, stream is None
            stream = as_stream(stream)
        self.kind, self.like, self.stream, self.views = kind, like, stream, views

    def _own_views(self, arrays: dict) -> bool:
        """The common case of a small scan on a path of its own (the general one costs
        about 0.6 us more a call): packed 1-D pycuda GPUArrays on the default stream are
        their own views. False, having set nothing, for anything else."""
        like = None
        for value in arrays.values():
            if value is None:
                continue
            # c_contiguous's 1-D case, inline: a call of it costs a tenth of a microsecond
            # (an empty one goes the general way, whose view gives it address 0)
            if _KIND_OF_TYPE.get(type(value)) is not PYCUDA or len(value.shape) != 1 or \
                    not value.shape[0] or value.strides[0] != value.dtype.itemsize:
                return False
            if like is None:
                like = value
        if like is None:
            return False
        self.kind, self.like, self.stream, self.views = PYCUDA, like, None, dict(arrays)
        self._default_stream = True
        return True

    def empty(self, shape, dtype):
        """``(native, view)``: a new array of the call's kind, and the view kernels write."""
        dtype = np.dtype(dtype)
        native = self.kind.empty(shape, dtype, self.like, self.stream, self._default_stream)
        # Kinds without an allocator of their own (DLPack, the array interface) get GPUArrays.
        return native, self.kind.new_view(native, shape, dtype)

    def returned(self, result):
        """``result`` (what the call returns: its arrays, a tuple of them and numbers) as the
        caller gets it, called once the call's work is queued: itself, but for a kind whose
        results go back to the caller's own library (_Kind.hand_back: the library a producer
        known by a protocol names, such as JAX)."""
        if not self.kind.hands_back:
            return result
        return self.kind.hand_back(result, self.like, self.stream)

    def outputs(self, given: dict, shape, dtype) -> dict:
        """``given`` (output name -> array, or None) with a new array of the call's kind, of
        ``shape`` and ``dtype``, for each None, its view set for the kernels."""
        made = {}
        for name, array in given.items():
            if array is None:
                array, self.views[name] = self.empty(shape, dtype)
            made[name] = array
        return made

    def to_host(self, name) -> np.ndarray:
        """A host copy of one argument, after the work queued on the call's stream."""
        view = self.views[name]
        host = np.empty(view.shape, view.dtype)
        if view.size:  # an empty GPUArray has no address
            streams.copy_to_host(host, view.ptr, self.stream)
        return host


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
    """Whether two array views share any byte (an empty one shares none, wherever its
    address points)."""
    return a.nbytes > 0 and b.nbytes > 0 and a.ptr < b.ptr + b.nbytes and \
        b.ptr < a.ptr + a.nbytes


# ----------------------------------------------------------------- a kernel's arguments

def convert_arguments(arguments, scan_dtype, args, n, stream=None, with_shape=False):
    """A kernel's arguments (scangen.args.Argument) as it is launched: the values, n, and the
    stream (as as_stream gives it); ``with_shape``: then also the first array argument's
    shape (a DevicePointer's is its size). A pointer takes a device array (kind_of) or a
    DevicePointer, nothing else: an int would be launched as an address nobody checked.
    Raises TypeError or ValueError naming a wrong argument, before anything is launched."""
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
        first = first or (argument, view.size, tuple(view.shape))
        values.append(view.ptr if view.size else 0)
    if n is None:
        if first is None:
            raise TypeError("n= is required: no argument is an array whose length could be "
                            "the number of elements")
        n = first[1]
    else:
        n = as_count(n)
        if first is not None and n > first[1]:
            raise ValueError(f"n={n} is larger than the first array argument "
                             f"{first[0].name!r} ({first[1]} elements)")
    if with_shape:
        return tuple(values), n, call.stream, first[2]
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


# ----------------------------------------------------------------- streams

def as_stream(stream, check_device=True):
    """``stream=`` as scangen launches on it: None (the legacy default stream), a pycuda
    Stream, or a RawStream. Takes a pycuda Stream, a CuPy or torch stream, an object with
    ``__cuda_stream__``, or a raw CUstream handle (0 and 1 are the legacy default stream).
    With ``check_device``, a stream of another device than the current context's is
    refused."""
    if stream is None or isinstance(stream, RawStream):
        return stream
    pycuda_stream = getattr(sys.modules.get("pycuda.driver"), "Stream", None)  # as in kind_of
    if pycuda_stream is not None and isinstance(stream, pycuda_stream):
        return stream
    reader = _STREAM_READER_OF_TYPE.get(type(stream))
    if reader is None:
        reader = _STREAM_READER_OF_TYPE[type(stream)] = _stream_reader(stream)
    handle, device = reader(stream)
    if handle < 0:
        raise ValueError(f"stream= handle {handle} is not a CUstream")
    if handle in (0, 1):  # 0 and CU_STREAM_LEGACY: what pycuda launches on without a stream
        return None
    if check_device and handle != 2:  # CU_STREAM_PER_THREAD belongs to every context
        _check_stream_device(handle, device)
    return RawStream(handle, stream)


def _stream_reader(stream):
    """How to read ``(handle, device or None)`` from streams of this one's type: found once
    per type (the tests of what a stream is cost about a microsecond a call)."""
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError(f"stream= must be a stream or a CUstream handle, not {stream!r}")
    if isinstance(stream, (int, np.integer)):
        return lambda s: (int(s), None)
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, ExternalStream
        return lambda s: (s.cuda_stream, s.device.index)
    if hasattr(stream, "__cuda_stream__"):
        return _protocol_stream
    if type(stream).__module__.startswith("cupy") and hasattr(stream, "ptr"):
        return lambda s: (s.ptr, getattr(s, "device_id", None))
    raise TypeError(f"stream= takes a pycuda Stream, a CuPy or torch stream, an object "
                    f"with __cuda_stream__, or a CUstream handle (int), not "
                    f"{type(stream).__name__}")


def _protocol_stream(stream):
    version, handle = stream.__cuda_stream__()
    if version != 0:
        raise TypeError(f"stream= speaks __cuda_stream__ version {version}; scangen "
                        "knows version 0")
    return handle, getattr(stream, "device_id", None)


#: Stream type -> its reader (_stream_reader), remembered per type.
_STREAM_READER_OF_TYPE = {}


def _check_stream_device(handle, device) -> None:
    if device is not None and device >= 0:
        if device != _context_device():
            raise ValueError(f"stream= is a stream of device {device}, but scangen runs in "
                             f"the context of device {_context_device()}: pass a stream of "
                             f"device {_context_device()}")
        return
    if streams.stream_context(handle) != _current_context_handle():
        raise ValueError(f"stream= handle {handle:#x} belongs to another CUDA context than "
                         f"scangen's (device {_context_device()}): pass a stream of that "
                         "context")


#: Context handle -> its device ordinal.
_DEVICE_OF_CONTEXT = {}


def _current_context_handle() -> int:
    return contexts.current_context().handle


def _context_device() -> int:
    handle = _current_context_handle()
    device = _DEVICE_OF_CONTEXT.get(handle)
    if device is None:
        device = _DEVICE_OF_CONTEXT[handle] = streams.context_device()
    return device


def _check_device(name, device) -> None:
    if device is not None and device != _context_device():
        here = _context_device()
        raise ValueError(f"{name} is on device {device}, but scangen runs in the CUDA context "
                         f"of device {here}: make device {device} current before the first "
                         f"scangen call (pycuda.driver.Device({device}).retain_primary_context()"
                         f".push()) or move {name} to device {here}")


# ----------------------------------------------------------------- parsing the protocols

class _Interface:
    __slots__ = ("ptr", "shape", "dtype", "readonly", "stream")

    def __init__(self, ptr, shape, dtype, readonly, stream):
        self.ptr, self.shape, self.dtype, self.readonly, self.stream = \
            ptr, shape, dtype, readonly, stream


def parse_cuda_array_interface(interface, name="x") -> _Interface:
    """Numba's ``__cuda_array_interface__`` (versions 0 to 3) as address, shape, dtype,
    read-only flag and stream (an int handle, or None). Only C-contiguous, unmasked arrays
    are taken."""
    if not isinstance(interface, dict):
        raise TypeError(f"{name}.__cuda_array_interface__ must be a dict, not "
                        f"{type(interface).__name__}")
    missing = [key for key in ("shape", "typestr", "data", "version") if key not in interface]
    if missing:
        raise ValueError(f"{name}.__cuda_array_interface__ lacks {', '.join(missing)}")
    version = interface["version"]
    if not isinstance(version, int) or version < 0:
        raise ValueError(f"{name}.__cuda_array_interface__ has version {version!r}")
    shape = tuple(int(extent) for extent in interface["shape"])
    typestr, descr = interface["typestr"], interface.get("descr")
    try:
        # A structured type comes as an opaque "|V<size>" typestr and its fields in descr.
        dtype = np.dtype(descr) if typestr.startswith("|V") and descr and \
            descr != [("", typestr)] else np.dtype(typestr)
    except TypeError as err:
        raise TypeError(f"{name} has typestr {typestr!r}, which numpy does not read: {err}") \
            from None
    if interface.get("mask") is not None:
        raise ValueError(f"{name} is a masked array; scangen takes unmasked ones")
    data = interface["data"]
    if not isinstance(data, tuple) or len(data) != 2:
        raise ValueError(f"{name}.__cuda_array_interface__ data must be (address, read-only)")
    ptr, readonly = int(data[0] or 0), bool(data[1])
    strides = interface.get("strides")
    if strides is not None and not c_contiguous(shape, strides, dtype.itemsize):
        raise _not_contiguous(name, "a contiguous copy")
    stream = interface.get("stream") if version >= 3 else None
    if stream == 0:  # the protocol forbids 0: it cannot tell legacy from per-thread
        raise ValueError(f"{name}.__cuda_array_interface__ names stream 0, which the protocol "
                         "does not allow (1: legacy default stream, 2: per-thread)")
    return _Interface(ptr, shape, dtype, readonly, stream)


def parse_dlpack_capsule(capsule, name="x"):
    """``(address, shape, dtype)`` of an unconsumed "dltensor" capsule (C-contiguous only).
    The capsule is left unconsumed, so its destructor frees the tensor when it goes."""
    tensor = dlpack.capsule_tensor(capsule)
    if tensor is None:
        raise TypeError(f"{name}.__dlpack__() did not return a 'dltensor' capsule")
    dtype = dlpack.numpy_dtype(tensor.dtype)
    if dtype is None:
        raise TypeError(f"{name} has DLPack type (code {tensor.dtype.code}, "
                        f"{tensor.dtype.bits} bits, {tensor.dtype.lanes} lanes), which scangen "
                        "does not scan")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim))
        if not c_contiguous(shape, strides, dtype.itemsize):
            raise _not_contiguous(name, "a contiguous copy")
    return (tensor.data or 0) + tensor.byte_offset, shape, dtype


# ----------------------------------------------------------------- one-shot helpers

def dtype_of(value, name="x") -> np.dtype:
    """The numpy dtype of an array of any kind, host numpy arrays included."""
    kind = kind_of(value)
    if kind is TORCH:
        return _torch_dtype(value.dtype, name)
    if kind is ARRAY_INTERFACE:
        return parse_cuda_array_interface(value.__cuda_array_interface__, name).dtype
    if kind is DLPACK and not hasattr(value, "dtype"):
        # A producer may make a capsule per request: one, to read its dtype.
        return DLPACK.view(value, name, None).dtype
    try:
        return np.dtype(value.dtype)
    except (AttributeError, TypeError):
        if isinstance(value, np.ndarray) or kind is not None:
            raise
        raise not_an_array(name, value) from None


#: What the one-shot primitives say of their arrays, in their docstrings.
ONE_SHOT_ARRAYS = """Arrays are 1-D device arrays of one kind (pycuda GPUArray, CuPy, torch, or
    any object with __cuda_array_interface__ or __dlpack__) and results are of that kind; or
    host numpy arrays, copied to the GPU and the results copied back."""


def host_round_trip(run, arrays: dict, stream):
    """``run(**arrays)``, where host numpy arrays are first copied to the device (as pycuda
    GPUArrays) and the device arrays ``run`` returns are copied back; an ``out`` given on the
    host is filled in place and returned. For the one-shot functions, so that a first try
    from plain numpy works; the reusable objects take device arrays only."""
    on_host = [name for name, value in arrays.items() if isinstance(value, np.ndarray)]
    if not on_host:
        return run(**arrays)
    on_device = [name for name, value in arrays.items()
                 if value is not None and name not in on_host]
    if on_device:
        raise TypeError(f"{on_host[0]} is a host numpy array but {on_device[0]} is on the "
                        "device: pass both on the host or both on the device")
    gpuarray = gpu.gpuarray()
    copies, by_object = {}, {}
    for name, value in arrays.items():
        if value is not None and id(value) not in by_object:
            # out is only written, unless it is also an input (in place)
            by_object[id(value)] = gpuarray.empty(value.shape, value.dtype) if name == "out" \
                else gpuarray.to_gpu(np.ascontiguousarray(value))
        copies[name] = None if value is None else by_object[id(value)]
    result = run(**copies)
    streams.before_host_read(as_stream(stream))
    return _to_host(result, gpuarray.GPUArray, arrays.get("out"), copies.get("out"))


def _to_host(item, device_type, host_out, device_out):
    """host_round_trip's result on the host: a tuple item by item, ``device_out`` into
    ``host_out``, other device arrays as new numpy arrays. A function of its own, not a
    closure: a nested function that calls itself is a reference cycle, which would keep
    the device arrays it sees until the garbage collector runs, in whichever thread that
    is (where PyCUDA may not be able to free them)."""
    if isinstance(item, tuple):
        return tuple(_to_host(part, device_type, host_out, device_out) for part in item)
    if host_out is not None and item is device_out:
        host_out[...] = item.get()
        return host_out
    return item.get() if isinstance(item, device_type) else item
