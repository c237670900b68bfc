"""Arrays and streams of other libraries, without a GPU (scangen.interop).

CuPy and torch are simulated by small fake modules put in sys.modules (scangen only ever
looks them up there); __cuda_array_interface__ and DLPack producers by small classes; the
driver by tests.support.simulate_device and a fake libcuda. What needs the real libraries
and a device is in tests/gpu/test_interop.py.
"""
import ctypes
import gc
import subprocess
import sys
import types
import weakref

import numpy as np
import pytest

import scangen
from scangen import interop, one_shot
from scangen.interop import Call, as_stream, kind_of, parse_cuda_array_interface
from scangen.runtime import contexts, gpu, launcher, streams
from scangen.runtime.modules import ModuleRuntime
from scangen.runtime.streams import RawLaunch, RawStream
from tests.support import (AFFINE, BFLOAT16, FakeContext, FakeCupyArray, FakeCupyStream,
                           FakeDeviceArray, FakeDLPack, fake_cupy_module, record_launches,
                           simulate_device)


# --- fakes ---------------------------------------------------------------------------------

class FakeTorchDevice:
    def __init__(self, kind, index):
        self.type, self.index = kind, index

    def __str__(self):
        return f"{self.type}:{self.index}" if self.type == "cuda" else self.type


class FakeTensor:
    """What scangen reads of a torch.Tensor."""

    def __init__(self, shape, dtype="float32", ptr=0x2000, device="cuda", index=0,
                 contiguous=True, conj=False, neg=False):
        self.shape = shape if isinstance(shape, tuple) else (shape,)
        self.dtype = getattr(FAKE_TORCH, dtype)
        self._ptr, self._contiguous, self._conj, self._neg = ptr, contiguous, conj, neg
        self.device = FakeTorchDevice(device, index if device == "cuda" else None)

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._contiguous

    def is_conj(self):
        return self._conj

    def is_neg(self):
        return self._neg


class FakeTorchDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeTorchStream:
    def __init__(self, handle, index=0):
        self.cuda_stream, self.device = handle, FakeTorchDevice("cuda", index)


FAKE_TORCH = types.ModuleType("torch")
FAKE_TORCH.Tensor = FakeTensor
FAKE_TORCH.dtype = FakeTorchDtype
for _name in ("float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16"):
    setattr(FAKE_TORCH, _name, FakeTorchDtype(_name))


@pytest.fixture
def device(monkeypatch):
    """No GPU: device 0, context 0xC0 (tests.support.simulate_device)."""
    simulate_device(monkeypatch)


@pytest.fixture
def launches(monkeypatch, device):
    """Every launch a call makes, as a RecordedLaunch, instead of running it."""
    return record_launches(monkeypatch)


@pytest.fixture
def fake_cupy(monkeypatch, device):
    """A cupy module whose current stream is 0x5000 (tests.support.fake_cupy)."""
    return fake_cupy_module(monkeypatch)


@pytest.fixture
def fake_torch(monkeypatch, device):
    state = types.SimpleNamespace(current=0x7000)
    FAKE_TORCH.cuda = types.SimpleNamespace(
        current_stream=lambda device=None: FakeTorchStream(state.current),
        Stream=FakeTorchStream)
    FAKE_TORCH.empty = lambda shape, dtype, device: FakeTensor(shape, dtype.name, ptr=0xA0000)
    # torch's read of the current stream's handle alone (the fast path); test_torch_default_
    # stream_and_dtypes also takes it away
    FAKE_TORCH._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: state.current)
    monkeypatch.setitem(sys.modules, "torch", FAKE_TORCH)
    return state


# --- __cuda_array_interface__ ------------------------------------------------------------------

def interface(**fields):
    return {"shape": (4, 3), "typestr": "<f4", "data": (0x1000, False), "version": 3, **fields}


def test_array_interface_shape_dtype_address_and_flags():
    info = parse_cuda_array_interface(interface())
    assert (info.ptr, info.shape, info.dtype, info.readonly, info.stream) == \
        (0x1000, (4, 3), np.dtype(np.float32), False, None)
    info = parse_cuda_array_interface(interface(data=(0x2000, True), typestr="<u8",
                                                stream=0x77))
    assert (info.ptr, info.dtype, info.readonly, info.stream) == \
        (0x2000, np.dtype(np.uint64), True, 0x77)
    # C-contiguous strides (and any stride on an extent of 1) are taken as given.
    assert parse_cuda_array_interface(interface(strides=(12, 4))).shape == (4, 3)
    assert parse_cuda_array_interface(interface(shape=(4, 1), strides=(4, 999))).shape == (4, 1)
    assert parse_cuda_array_interface(interface(shape=(0,), data=(0, False))).ptr == 0


def test_array_interface_versions():
    # Versions before 3 name no stream: whatever they carry there is not read.
    assert parse_cuda_array_interface(interface(version=2, stream=0x77)).stream is None
    assert parse_cuda_array_interface(interface(version=0)).shape == (4, 3)
    with pytest.raises(ValueError, match="lacks version"):
        parse_cuda_array_interface({k: v for k, v in interface().items() if k != "version"})
    with pytest.raises(ValueError, match="has version -1"):
        parse_cuda_array_interface(interface(version=-1))
    with pytest.raises(ValueError, match="stream 0, which the protocol does not allow"):
        parse_cuda_array_interface(interface(stream=0))


def test_array_interface_structured_types_through_descr():
    pair = np.dtype([("m", np.float64), ("c", np.float64)])
    info = parse_cuda_array_interface(interface(typestr=pair.str, descr=pair.descr))
    assert info.dtype == pair


@pytest.mark.parametrize("fields,error,message", [
    (dict(strides=(4, 16)), ValueError, "not C-contiguous"),
    (dict(strides=(24, 4), shape=(4, 3)), ValueError, "not C-contiguous"),
    (dict(mask=object()), ValueError, "masked"),
    (dict(data=0x1000), ValueError, r"data must be \(address, read-only\)"),
    (dict(typestr="<x9"), TypeError, "numpy does not read"),
])
def test_array_interface_refusals(fields, error, message):
    with pytest.raises(error, match=message):
        parse_cuda_array_interface(interface(**fields), "x")
    with pytest.raises(TypeError, match="must be a dict"):
        parse_cuda_array_interface([1, 2], "x")


# --- kinds -----------------------------------------------------------------------------------------

def test_kind_detection():
    assert kind_of(FakeDeviceArray(3, np.int32)) is interop.ARRAY_INTERFACE
    assert kind_of(FakeDLPack((3,))) is interop.DLPACK
    for host in (np.zeros(3), np.float32(1), [1, 2], 3.0, None):
        assert kind_of(host) is None  # numpy speaks DLPack too, for the CPU


def test_cupy_and_torch_are_known_only_once_imported(fake_cupy, fake_torch):
    assert kind_of(FakeCupyArray(3, np.int32)) is interop.CUPY
    assert kind_of(FakeTensor(3)) is interop.TORCH


def test_dlpack_views_the_same_memory(device):
    producer = FakeDLPack((2, 5), code=1, bits=16, byte_offset=8)
    call = Call(None, {"x": producer})
    view = call.views["x"]
    assert (view.ptr, view.shape, view.dtype) == (0x3000 + 8, (2, 5), np.dtype(np.uint16))
    assert producer.streams == [1]  # no stream: the producer readies the data on the legacy one
    assert call.kind is interop.DLPACK and view.base[0] is producer


def test_dlpack_refusals(device):
    with pytest.raises(TypeError, match="not in CUDA device memory"):
        Call(None, {"x": FakeDLPack((3,), device_type=1)})
    with pytest.raises(TypeError, match="code 3, 64 bits"):  # an opaque handle
        Call(None, {"x": FakeDLPack((3,), code=3, bits=64)})
    with pytest.raises(ValueError, match="not C-contiguous"):
        Call(None, {"x": FakeDLPack((2, 3), strides=(1, 2))})
    assert Call(None, {"x": FakeDLPack((2, 3), strides=(3, 1))}).views["x"].shape == (2, 3)


def test_cupy_views_and_native_outputs(fake_cupy, launches):
    x = FakeCupyArray(10, np.int32, ptr=0x1000)
    out = scangen.Scan(np.int32, "add")(x)
    assert isinstance(out, FakeCupyArray) and out.shape == (10,)
    (title, values, n, stream, _), = launches
    assert values == (0x1000, out.data.ptr) and n == 10
    # No stream given: CuPy's current stream, also the one the output was allocated on.
    assert isinstance(stream, RawStream) and stream.handle == 0x5000
    assert fake_cupy.allocated_under == [0x5000]


def test_cupy_output_allocated_on_the_call_stream(fake_cupy, launches):
    x = FakeCupyArray(10, np.int32)
    scangen.Scan(np.int32, "add")(x, stream=FakeCupyStream(0x6000))
    assert launches[0][3].handle == 0x6000
    # The pool hands memory back to the stream it came from: allocate on the writer's.
    assert fake_cupy.allocated_under == [0x6000] and fake_cupy.current == 0x5000


@pytest.mark.parametrize("handle_alone", [True, False])
def test_torch_default_stream_and_dtypes(fake_torch, launches, monkeypatch, handle_alone):
    """torch's current stream, its handle read alone or (a torch without that call) from
    the torch.cuda.Stream."""
    if not handle_alone:
        monkeypatch.delattr(FAKE_TORCH, "_C")
    x = FakeTensor(8, "int64", ptr=0x4000)
    out = FakeTensor(8, "int64", ptr=0x8000)
    assert scangen.Scan(np.int64, "add", mode="exclusive")(x, out) is out
    (title, values, n, stream, _), = launches
    assert values == (0x4000, 0x8000) and stream.handle == 0x7000
    fake_torch.current = 0  # torch's default stream is the legacy one: pycuda's own path
    scangen.Scan(np.int64, "add")(x, out)
    assert launches[1][3] is None
    # bfloat16 is a scangen type where ml_dtypes is installed (so a float32 scan refuses it
    # by dtype), and has no numpy twin where it is not
    refused = r"dtype bfloat16, but this scan was built for float32" if BFLOAT16 is not None \
        else r"dtype torch.bfloat16.*x.float\(\)"
    with pytest.raises(TypeError, match=refused):
        scangen.Scan(np.float32, "add")(FakeTensor(8, "bfloat16"))


@pytest.mark.skipif(BFLOAT16 is None, reason="bfloat16 needs ml_dtypes")
def test_torch_outputs_of_bfloat16_and_what_torch_cannot_hold(fake_torch):
    """ml_dtypes' bfloat16 is of numpy kind "V", as a struct is; torch has the one by name."""
    like = FakeTensor(8, "bfloat16")
    made = interop.TORCH.empty((3, 4), np.dtype(BFLOAT16), like, None, True)
    assert made.dtype is FAKE_TORCH.bfloat16 and made.shape == (3, 4)
    for dtype in (np.dtype([("m", np.float32), ("c", np.float32)]), np.dtype(np.uint16)):
        with pytest.raises(TypeError, match="torch has no dtype for"):
            interop.TORCH.empty((3,), dtype, like, None, True)


def test_a_new_output_is_viewed_as_made(fake_torch, launches):
    """A new output's view is the address, shape and dtype it was made with (neither read
    back nor checked again), for each kind that allocates its own: torch's here, and the
    scan launches into it."""
    x = FakeTensor((2, 8), "int64", ptr=0x4000)
    call = interop.Call(None, {"x": x, "out": None}, writes=("out",))
    native, view = call.empty((2, 8), np.dtype(np.int64))
    assert isinstance(native, FakeTensor) and view.base is native
    assert (view.ptr, view.shape, view.dtype, view.size) == (0xA0000, (2, 8),
                                                             np.dtype(np.int64), 16)
    out = scangen.Scan(np.int64, "add")(x)
    assert launches[-1][1][:2] == (0x4000, out.data_ptr())  # then the row length


def test_one_view_for_an_array_given_twice(launches):
    x = FakeDeviceArray(5, np.float32, 0x1000)
    assert scangen.Scan(np.float32, "max")(x, out=x) is x  # in place
    assert launches[0][1] == (0x1000, 0x1000)


# --- errors before launch --------------------------------------------------------------------------

def test_a_cpu_torch_tensor_is_refused(fake_torch, launches):
    with pytest.raises(TypeError, match=r"x is a torch tensor on cpu.*x.cuda\(\)"):
        scangen.Scan(np.float32, "add")(FakeTensor(4, device="cpu"))
    assert not launches


@pytest.mark.parametrize("make,message", [
    (lambda: FakeCupyArray(4, np.float32, contiguous=False), r"cupy.ascontiguousarray\(x\)"),
    (lambda: FakeTensor(4, contiguous=False), r"x.contiguous\(\)"),
    (lambda: FakeDeviceArray((4, 3), np.float32, strides=(4, 16)), "not C-contiguous"),
    (lambda: FakeTensor(4, conj=True), r"x is a lazy conjugate view.*x.resolve_conj\(\)"),
    (lambda: FakeTensor(4, neg=True), r"x is a lazy negated view.*x.resolve_neg\(\)"),
])
def test_non_contiguous_and_lazy_views_are_refused(fake_cupy, fake_torch, launches, make, message):
    with pytest.raises(ValueError, match=message):
        scangen.Scan(np.float32, "add")(make())
    assert not launches


def test_non_cuda_objects_are_refused(launches):
    scan = scangen.Scan(np.float32, "add")
    with pytest.raises(TypeError, match="x must be a pycuda GPUArray or another CUDA array "
                                        r"\(CuPy, torch, Numba.*not list"):
        scan([1.0, 2.0])
    with pytest.raises(TypeError, match="not ndarray.*one-shot function"):
        scan(np.zeros(3, np.float32))
    assert not launches


def test_mixed_kinds_are_refused(fake_cupy, fake_torch, launches):
    with pytest.raises(TypeError, match="out is a torch tensor but x is a CuPy array: pass "
                                        "arrays of one kind"):
        scangen.Scan(np.float32, "add")(FakeCupyArray(4, np.float32), FakeTensor(4))
    with pytest.raises(TypeError, match="flags is a __cuda_array_interface__ array but x is a "
                                        "torch tensor"):
        scangen.SegmentedScan(np.float32, "add")(FakeTensor(4), flags=FakeDeviceArray(4, bool))
    assert not launches


def test_arrays_on_another_device_are_refused(fake_cupy, fake_torch, monkeypatch, launches):
    with pytest.raises(ValueError, match="x is on device 1, but scangen runs in the CUDA "
                                         "context of device 0"):
        scangen.Scan(np.float32, "add")(FakeCupyArray(4, np.float32, device=1))
    with pytest.raises(ValueError, match="out is on device 2"):
        scangen.Scan(np.float32, "add")(FakeTensor(4), FakeTensor(4, index=2))
    monkeypatch.setattr(streams, "pointer_device", lambda address: 3)
    with pytest.raises(ValueError, match="x is on device 3"):
        scangen.Scan(np.float32, "add")(FakeDeviceArray(4, np.float32))
    assert not launches


def test_read_only_outputs_are_refused(launches):
    x = FakeDeviceArray(4, np.float32)
    frozen = FakeDeviceArray(4, np.float32, 0x9000, data=(0x9000, True))
    with pytest.raises(ValueError, match="out is read-only"):
        scangen.Scan(np.float32, "add")(x, out=frozen)
    scangen.Scan(np.float32, "add")(frozen, out=x)  # reading one is fine
    kernel = scangen.ScanKernel(np.float32, "add", arguments="const float *x, float *y",
                                input_expr="x[i]", output_statement="y[i] = item;")
    with pytest.raises(ValueError, match="y is read-only"):
        kernel(x, frozen)
    kernel(frozen, x)
    assert len(launches) == 2


# --- streams ---------------------------------------------------------------------------------------

def test_stream_argument_forms(fake_cupy, fake_torch):
    assert as_stream(None) is None
    assert as_stream(0) is None and as_stream(1) is None  # the legacy default stream
    per_thread = as_stream(2)
    assert isinstance(per_thread, RawStream) and per_thread.handle == 2
    assert as_stream(np.uint64(0x1234)).handle == 0x1234
    raw = as_stream(0x1234)
    assert as_stream(raw) is raw
    torch_stream = FakeTorchStream(0x4321)
    assert as_stream(torch_stream).handle == 0x4321 and as_stream(torch_stream).owner is \
        torch_stream
    assert as_stream(FakeCupyStream(0x5555)).handle == 0x5555

    class Protocol:
        def __cuda_stream__(self):
            return 0, 0x6666

    assert as_stream(Protocol()).handle == 0x6666


def test_stream_argument_errors(fake_cupy, fake_torch, monkeypatch):
    with pytest.raises(TypeError, match="not True"):
        as_stream(True)
    with pytest.raises(ValueError, match="-5 is not a CUstream"):
        as_stream(-5)
    with pytest.raises(TypeError, match="takes a pycuda Stream, a CuPy or torch stream.*not str"):
        as_stream("default")

    class Future:
        def __cuda_stream__(self):
            return 1, 0x6666

    with pytest.raises(TypeError, match="version 1"):
        as_stream(Future())
    # A stream of another device than the context's, known by its object or its handle.
    with pytest.raises(ValueError, match="stream= is a stream of device 1"):
        as_stream(FakeTorchStream(0x4321, index=1))
    with pytest.raises(ValueError, match="stream= is a stream of device 2"):
        as_stream(FakeCupyStream(0x4321, device_id=2))
    monkeypatch.setattr(streams, "stream_context", lambda handle: 0xBAD)
    with pytest.raises(ValueError, match="belongs to another CUDA context"):
        as_stream(0x1234)
    assert as_stream(0x1234, check_device=False).handle == 0x1234


def test_the_array_interface_names_the_default_stream(launches):
    x = FakeDeviceArray(4, np.float32, 0x1000, stream=0x3333)
    scangen.Scan(np.float32, "add")(x, out=FakeDeviceArray(4, np.float32, 0x2000))
    assert launches[-1][3].handle == 0x3333
    scangen.Scan(np.float32, "add")(x, out=FakeDeviceArray(4, np.float32, 0x2000), stream=2)
    assert launches[-1][3].handle == 2  # an explicit stream wins


class FakeDriver:
    """The ctypes libcuda, recording calls (scangen.runtime.streams._lib)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            return 0
        return call


def test_raw_launch_packs_as_pycuda_and_launches_on_the_handle(monkeypatch):
    driver = FakeDriver()
    parameters = []

    def launch(function, *args):
        grid_block, shared, stream, kernel_params, extra = args[:6], args[6], args[7], \
            args[8], args[9]
        # extra: BUFFER_POINTER, &buffer, BUFFER_SIZE, &size, END
        size = ctypes.c_size_t.from_address(extra[3]).value
        parameters.append(ctypes.string_at(extra[1], size))
        driver.calls.append(("cuLaunchKernel", (function, grid_block, shared, stream,
                                                kernel_params, extra[0], extra[2], extra[4])))
        return 0

    driver.cuLaunchKernel = launch
    monkeypatch.setattr(streams, "_library", driver)
    raw = RawLaunch(0xF00, "PPqI")
    values = (np.uintp(0x1000), np.uintp(0x2000), np.int64(-3), np.uint32(7))
    raw((5, 1, 1), (256, 1, 1), RawStream(0x4444), *values)
    (name, (function, grid_block, shared, stream, kernel_params, *markers)), = driver.calls
    assert (function, grid_block, shared, stream, kernel_params) == \
        (0xF00, (5, 1, 1, 256, 1, 1), 0, 0x4444, None)
    assert markers == [1, 2, None]  # CU_LAUNCH_PARAM_BUFFER_POINTER, _SIZE, _END (NULL)
    import struct

    assert parameters == [struct.pack("PPqI", *values)]  # native alignment, as pycuda packs


def test_foreign_streams_get_driver_launches_and_memsets(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(streams, "_library", driver)

    class Function:
        arg_format = "PP"
        prepared_async_call = object()

    class Compiled:
        functions = {"scan_sections": Function()}

        def raw_functions(self):
            return types.SimpleNamespace(function=lambda name: 0xABC)

    raw = launcher.launch_function(Compiled(), "scan_sections", RawStream(0x99))
    assert isinstance(raw, RawLaunch) and raw.function == 0xABC
    assert launcher.launch_function(Compiled(), "scan_sections", None) is \
        Function.prepared_async_call
    streams.memset_d8_async(0x1000, 0, 64, RawStream(0x99))
    assert driver.calls[-1][0] == "cuMemsetD8Async" and driver.calls[-1][1][:3] == (0x1000, 0, 64)
    RawStream(0x99).synchronize()
    assert driver.calls[-1][0] == "cuStreamSynchronize"


def test_driver_errors_name_the_call(monkeypatch):
    driver = FakeDriver()
    driver.cuStreamSynchronize = lambda handle: 700
    monkeypatch.setattr(streams, "_library", driver)
    with pytest.raises(streams.CUDADriverError, match=r"cuStreamSynchronize failed: \? \(700\)"):
        RawStream(0x99).synchronize()


# --- entry points through the boundary ---------------------------------------------------------------

def test_scan_kernel_arrays_of_any_kind(fake_cupy, launches):
    kernel = scangen.ScanKernel(np.uint64, AFFINE, arguments="const scan_t *x, scan_t *out",
                                input_expr="x[i]", output_statement="out[i] = item;")
    x, out = FakeCupyArray(6, np.uint64, 0x1000), FakeCupyArray(6, np.uint64, 0x2000)
    kernel(x, out)
    (title, values, n, stream, _), = launches
    assert values == (0x1000, 0x2000) and n == 6 and stream.handle == 0x5000
    # a DevicePointer mixes with any kind, and the arrays' library gives the stream
    kernel(x, scangen.DevicePointer(0x3000, np.uint64, 3), n=3)
    assert launches[-1][1] == (0x1000, 0x3000) and launches[-1][2] == 3
    assert launches[-1][3].handle == 0x5000


def test_segmented_scan_and_two_dimensional_rows(launches):
    x, out = FakeDeviceArray(6, np.int32, 0x1000), FakeDeviceArray(6, np.int32, 0x2000)
    scangen.SegmentedScan(np.int32, "add")(x, out, keys=FakeDeviceArray(6, np.int64, 0x3000))
    assert launches[-1][1] == (0x1000, 0x3000, 0x2000)
    rows = FakeDeviceArray((2, 3), np.int32, 0x4000)
    scangen.Scan(np.int32, "max")(rows, out=FakeDeviceArray((2, 3), np.int32, 0x5000))
    title, values, n, stream, _ = launches[-1]
    assert "rows" in title and values == (0x4000, 0x5000, 3) and n == 6


class _FakeEvent:
    def __init__(self, log):
        self.log = log

    def synchronize(self):
        self.log.append("wait")


def test_segmented_offsets_are_checked_on_the_call_stream(monkeypatch, launches):
    """The offsets plan runs on the call's stream with the thread's verdict word bound;
    the call waits for the checkpoint after the heads kernel, and reads the offsets to
    the host only when the device found them bad, to name the bad one."""
    from scangen.runtime import mapped

    log = []

    def copy_to_host(host, address, stream):
        log.append(("read", address, stream.handle))
        host[:] = [0, 4, 2, 6][:host.size]

    def no_page_locked_memory(word):
        word.host, word.ptr = np.array([-1], np.int64), 0x5000

    simulate_device(monkeypatch)  # the verdict is kept per thread and context
    monkeypatch.setattr(mapped.MappedWord, "__init__", no_page_locked_memory)
    monkeypatch.setattr(streams, "copy_to_host", copy_to_host)
    device_says_bad = []

    def run(runtime, plan, arrays, stream, values):
        verdict = arrays["verdict"]
        log.append(({name: None if view is None else view.ptr
                     for name, view in arrays.items()}, stream.handle, values,
                    None if verdict is None else verdict.value))
        if verdict is not None and device_says_bad:
            verdict.value = 1
        return {"offsets checked": _FakeEvent(log)}

    monkeypatch.setattr(ModuleRuntime, "run", run)
    x, out = FakeDeviceArray(6, np.int32, 0x1000), FakeDeviceArray(6, np.int32, 0x2000)
    offsets = FakeDeviceArray(3, np.int64, 0x3000)
    seg = scangen.SegmentedScan(np.int32, "add")
    seg(x, out, offsets=offsets, stream=0x4444)
    bound = {"x": 0x1000, "offsets": 0x3000, "out": 0x2000, "verdict": 0x5000}
    values = {"offset_count": 3, "initial": None}
    assert log == [(bound, 0x4444, values, 0), "wait"]  # the word set to 0 first
    log.clear()
    seg(x, out, offsets=offsets, stream=0x4444, check_offsets=False)
    assert log == [({**bound, "verdict": None}, 0x4444, values, None)]  # no wait
    log.clear()
    device_says_bad.append(True)
    bad = FakeDeviceArray(4, np.int64, 0x3000)
    with pytest.raises(ValueError, match=r"offsets\[1\] = 4 > offsets\[2\] = 2"):
        seg(x, out, offsets=bad, stream=0x4444)
    assert log[1:] == ["wait", ("read", 0x3000, 0x4444)]
    log.clear()
    with pytest.raises(ValueError, match="offsets must run from 0 to len"):
        seg(x, out, offsets=FakeDeviceArray(0, np.int64, 0))
    assert log == []  # nothing to read from an empty array, nothing launched
    with pytest.raises(ValueError, match="must run from 0 to len"):  # no elements: the host
        seg(FakeDeviceArray(0, np.int32, 0), FakeDeviceArray(0, np.int32, 0),
            offsets=FakeDeviceArray(3, np.int64, 0x3000), stream=0x4444)
    assert log == [("read", 0x3000, 0x4444)]


def test_select_with_the_count_on_the_device(fake_cupy, launches):
    select = scangen.Select(np.float32, flags=np.bool_)
    x, mask = FakeCupyArray(5, np.float32, 0x1000), FakeCupyArray(5, np.bool_, 0x2000)
    out, count = select(x, mask, count_on_device=True)
    assert isinstance(out, FakeCupyArray) and isinstance(count, FakeCupyArray)
    assert count.shape == (1,) and count.dtype == np.int64
    (title, values, n, stream, _), = launches
    assert values == (0x1000, 0x2000, out.data.ptr, count.data.ptr) and stream.handle == 0x5000


# --- one-shot functions ----------------------------------------------------------------------------

def test_one_shot_scans_cache_their_scan(launches):
    one_shot._scan.cache_clear()
    x, out = FakeDeviceArray(4, np.int32, 0x1000), FakeDeviceArray(4, np.int32, 0x2000)
    for _ in range(3):
        assert scangen.inclusive_scan(x, out=out) is out
    scangen.inclusive_scan(x, out=out, initial=5)
    scangen.inclusive_scan(x, out=out, initial=7)  # another value, the same kernel
    scangen.exclusive_scan(x, "b != 0 ? b : a", out=out, identity=0)
    scangen.exclusive_scan(x, "b != 0 ? b : a", out=out, identity=0)
    info = one_shot._scan.cache_info()
    assert (info.misses, info.hits) == (3, 4)
    assert [launch[1][-1] for launch in launches[3:5]] == [5, 7]  # the initial value, per call
    assert launches[-1][0] == "exclusive scan"


def test_one_shot_arguments(device):
    x = FakeDeviceArray(4, np.int32)
    with pytest.raises(ValueError, match="not a built-in.*needs identity="):
        scangen.inclusive_scan(x, "a > b ? a : b")
    with pytest.raises(ValueError, match="identity= goes with an operator written as a C "
                                         "expression"):
        scangen.inclusive_scan(x, "add", identity=0)
    with pytest.raises(TypeError, match=r"scan option tuning=\[1\] must be hashable"):
        scangen.inclusive_scan(x, tuning=[1])
    assert "host numpy array" in scangen.inclusive_scan.__doc__
    assert "y[0] = identity" in scangen.exclusive_scan.__doc__


class FakeGPUArray:
    """pycuda's GPUArray as host_round_trip uses it: to_gpu, empty and get."""

    def __init__(self, host):
        self.host, self.shape, self.dtype = host.copy(), host.shape, host.dtype

    def get(self):
        return self.host.copy()


def fake_gpuarray(monkeypatch, copies):
    def to_gpu(host):
        copies.append("in")
        return FakeGPUArray(host)

    module = types.SimpleNamespace(GPUArray=FakeGPUArray, to_gpu=to_gpu,
                                   empty=lambda shape, dtype: FakeGPUArray(np.empty(shape, dtype)))
    monkeypatch.setattr(gpu, "gpuarray", lambda: module)


def test_host_arrays_are_copied_in_and_out(monkeypatch):
    copies = []
    fake_gpuarray(monkeypatch, copies)

    def run(x, out):
        assert isinstance(x, FakeGPUArray)
        out.host[:] = np.cumsum(x.host)
        return out

    x, out = np.arange(5, dtype=np.int32), np.zeros(5, np.int32)
    assert interop.host_round_trip(run, {"x": x, "out": out}, None) is out
    np.testing.assert_array_equal(out, [0, 1, 3, 6, 10])
    assert copies == ["in"]  # out is only written: not copied in

    def pair(x):
        return FakeGPUArray(x.host[::-1]), 3

    values, count = interop.host_round_trip(pair, {"x": x}, None)
    assert isinstance(values, np.ndarray) and count == 3
    np.testing.assert_array_equal(values, x[::-1])


def test_host_round_trip_leaves_no_device_array_to_the_garbage_collector(monkeypatch):
    """The device copies are freed as the call returns, in the calling thread: none is left
    in a reference cycle for the garbage collector, which runs in whichever thread happens
    to allocate (where pycuda may be unable to free device memory)."""
    fake_gpuarray(monkeypatch, [])
    module, made = gpu.gpuarray(), []

    def tracked(make):
        def make_tracked(*args):
            array = make(*args)
            made.append(weakref.ref(array))
            return array
        return make_tracked

    monkeypatch.setattr(gpu, "gpuarray", lambda: types.SimpleNamespace(
        GPUArray=FakeGPUArray, to_gpu=tracked(module.to_gpu), empty=tracked(module.empty)))

    def run(x, out):
        out.host[:] = x.host[::-1]
        return out, FakeGPUArray(x.host)

    x, out = np.arange(5, dtype=np.int32), np.zeros(5, np.int32)
    gc.collect()
    gc.disable()
    try:
        got, other = interop.host_round_trip(run, {"x": x, "out": out}, None)
        assert got is out and len(made) == 2
        assert [ref() for ref in made] == [None, None]
    finally:
        gc.enable()
    np.testing.assert_array_equal(out, x[::-1])
    np.testing.assert_array_equal(other, x)


def test_host_and_device_arrays_do_not_mix(device):
    with pytest.raises(TypeError, match="x is a host numpy array but flags is on the device"):
        scangen.select(np.zeros(4, np.float32), flags=FakeDeviceArray(4, bool))


def test_dtype_of_every_kind(fake_torch):
    assert interop.dtype_of(np.zeros(2, np.int16)) == np.int16
    assert interop.dtype_of(FakeDeviceArray(2, np.uint8)) == np.uint8
    assert interop.dtype_of(FakeTensor(2, "bool")) == np.bool_
    with pytest.raises(TypeError, match="must be a pycuda GPUArray or another CUDA array"):
        interop.dtype_of("text")


# --- command line ----------------------------------------------------------------------------------

def test_version(capsys):
    from scangen.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"scangen {scangen.__version__}"
    result = subprocess.run([sys.executable, "-m", "scangen", "--version"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"scangen {scangen.__version__}"


def test_pycuda_results_come_from_a_pool_per_context_and_stream(monkeypatch):
    """GPUArray outputs are allocated through scangen's pools (runtime/pool.py): one per
    (context, stream), made once and kept; free_pooled_memory empties every one."""
    from scangen.runtime import pool

    class FakePool:
        made = []

        def __init__(self):
            self.held = True
            FakePool.made.append(self)

        def allocate(self, nbytes):
            return (self, nbytes)

        def free_held(self):
            self.held = False

        def stop_holding(self):
            self.free_held()
            self.stopped = True

    tools = types.ModuleType("pycuda.tools")
    tools.DeviceMemoryPool = FakePool
    monkeypatch.setitem(sys.modules, "pycuda.tools", tools)
    monkeypatch.setattr(pool, "_pools", {})
    released_at_exit = weakref.WeakSet()  # weakly, as contexts.release_at_exit keeps them
    monkeypatch.setattr(pool, "release_at_exit", released_at_exit.add)
    context = FakeContext(0xC0)
    monkeypatch.setattr(contexts, "current_context", lambda: context)
    default = pool.allocator(None)
    assert default(64) == (FakePool.made[0], 64)
    assert pool.allocator(None).__self__ is default.__self__  # kept, not remade
    other = pool.allocator(RawStream(0x1234))
    assert other.__self__ is not default.__self__
    context = FakeContext(0xD0)  # another context: another pool, even for the default stream
    assert pool.allocator(None).__self__ not in (default.__self__, other.__self__)
    # another pycuda object for the same CUcontext (the primary context retained twice):
    # another pool, as pycuda frees a block through the object it was allocated under
    context = FakeContext(0xD0)
    assert len({pool.allocator(None).__self__ for _ in range(2)} |
               {p for p in FakePool.made[:3]}) == 4
    assert len(FakePool.made) == 4
    gc.collect()
    (at_exit,) = released_at_exit  # still there to free the pools at exit
    at_exit.release_device_memory()
    # at exit the pools also stop holding: an array freed later goes straight back to CUDA
    assert all(not p.held and p.stopped for p in FakePool.made) and not pool._pools
    pool.allocator(None)
    scangen.free_pooled_memory()
    assert not FakePool.made[-1].held

    # what Call.empty hands pycuda for a GPUArray: the pool of the call's stream
    seen = {}
    monkeypatch.setattr(gpu, "gpuarray", lambda: types.SimpleNamespace(
        empty=lambda shape, dtype, allocator: seen.update(allocator=allocator)))
    interop.PYCUDA.empty((4,), np.dtype(np.float32), None, RawStream(0x1234), False)
    assert seen["allocator"].__self__ is pool.allocator(RawStream(0x1234)).__self__


def test_views_overlap_where_they_share_a_byte_and_an_empty_one_shares_none():
    def view(ptr, size):
        return interop.DeviceArray(ptr, (size,), np.dtype(np.float32), None)

    whole = view(0x1000, 16)  # bytes 0x1000 .. 0x103f
    assert interop.overlaps(whole, view(0x103c, 4)) and interop.overlaps(view(0xffc, 2), whole)
    assert not interop.overlaps(whole, view(0x1040, 4))  # just past its end
    assert not interop.overlaps(view(0xff0, 4), whole)  # ends where it starts
    for empty in (view(0x1010, 0), view(0x1000, 0)):  # an address inside, no bytes
        assert not interop.overlaps(whole, empty) and not interop.overlaps(empty, whole)
