"""Results handed back to the library of a producer scangen knows by a protocol only
(DLPack or __cuda_array_interface__, as JAX's arrays speak both) that names its library
(scangen.dlpack, scangen.interop._Protocol), without a GPU: the producers and the library's
``from_dlpack`` are fakes (tests.support.FakeDLPack, FakeDeviceArray, FakeArrayNamespace),
pycuda's GPUArrays too (the memory scangen writes), and launches are recorded instead of
run. What a tensor handed over says (address,
shape, strides, type, device), when its memory is let go, and how the consumer's stream is
ordered after the call's. tests/gpu/test_interop.py hands results to torch this way on a
GPU."""
import itertools
import math
import sys
import types
import weakref

import numpy as np
import pytest

import scangen
from scangen import dlpack, interop
from scangen.runtime import gpu, streams
from tests.support import (BFLOAT16, FakeArrayNamespace, FakeDeviceArray, FakeDLPack,
                           needs_bfloat16, record_launches, simulate_device)


class FakeGPUArray:
    """What scangen reads and makes of pycuda's GPUArray: memory at a fresh address."""

    addresses = itertools.count(0x40000000, 0x100000)

    def __init__(self, shape, dtype, allocator=None, gpudata=None, base=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = tuple(int(s) for s in np.empty(self.shape, self.dtype).strides) \
            if self.size else (0,) * len(self.shape)
        self.gpudata = gpudata if gpudata is not None else \
            (next(self.addresses) if self.size else None)
        self.base = base

    @property
    def ptr(self):
        if self.gpudata is None:
            raise AttributeError("an empty GPUArray has no memory")
        return int(self.gpudata)


@pytest.fixture
def device(monkeypatch):
    """A simulated device whose GPUArrays are FakeGPUArrays; launches recorded, not run;
    the consumer streams ordered after a call's, as (call's stream, handle) pairs."""
    simulate_device(monkeypatch)
    module = types.ModuleType("pycuda.gpuarray")
    module.GPUArray = FakeGPUArray
    module.empty = FakeGPUArray
    monkeypatch.setitem(sys.modules, "pycuda.gpuarray", module)
    monkeypatch.setattr(gpu, "gpuarray", lambda: module)
    monkeypatch.setattr(interop, "allocator", lambda stream: None)
    ordered = []
    monkeypatch.setattr(streams, "order_after", lambda stream, handle: ordered.append(
        (stream, handle)))
    return types.SimpleNamespace(launches=record_launches(monkeypatch), ordered=ordered)


def test_a_scan_hands_its_result_to_the_producers_library(device):
    namespace = FakeArrayNamespace(stream=0x7700)
    x = FakeDLPack((3, 5), code=2, bits=32, namespace=namespace)
    result = scangen.Scan(np.float32, "add")(x)
    (tensor,) = namespace.consumed
    assert result is tensor
    (launch,) = device.launches
    x_ptr, out_ptr, row_length = launch.values
    assert (x_ptr, row_length) == (0x3000, 5) and tensor.ptr == out_ptr and not tensor.byte_offset
    assert tensor.shape == (3, 5) and tensor.strides == (5, 1)  # in elements
    assert tensor.type == (2, 32, 1) and tensor.device == (2, 0)
    # the producer readied x on the legacy stream, which the scan ran on; the consumer's
    # stream waits for it
    assert x.streams == [1] and device.ordered == [(None, 0x7700)]
    tensor.release()
    assert not dlpack._held


@pytest.mark.parametrize("dtype,expected", [
    (np.int8, (0, 8, 1)), (np.uint64, (1, 64, 1)), (np.float16, (2, 16, 1)),
    (np.float64, (2, 64, 1)), (np.complex64, (5, 64, 1)), (np.bool_, (6, 8, 1))])
def test_dlpack_types_both_ways(dtype, expected):
    assert dlpack.type_of(np.dtype(dtype)) == expected
    assert dlpack.numpy_dtype(dlpack.DLDataType(*expected)) == np.dtype(dtype)


def test_dlpack_types_without_a_numpy_twin():
    assert dlpack.type_of(np.dtype([("a", np.int32), ("b", np.float32)])) is None
    for code, bits, lanes in ((3, 64, 1), (2, 32, 2), (2, 12, 1), (6, 16, 1)):
        assert dlpack.numpy_dtype(dlpack.DLDataType(code, bits, lanes)) is None


@needs_bfloat16
def test_bfloat16_goes_both_ways(device):
    assert dlpack.type_of(BFLOAT16) == (4, 16, 1)
    view = interop.Call(None, {"x": FakeDLPack((4,), code=4, bits=16)}).views["x"]
    assert view.dtype == BFLOAT16


def test_the_memory_lives_until_the_consumer_lets_go(device):
    namespace = FakeArrayNamespace()
    x = FakeDLPack((64,), code=0, bits=32, namespace=namespace)
    made = []
    real_empty = sys.modules["pycuda.gpuarray"].empty

    def tracked(*args, **kwargs):
        made.append(real_empty(*args, **kwargs))
        return made[-1]

    sys.modules["pycuda.gpuarray"].empty = tracked
    try:
        tensor = scangen.Scan(np.int32, "max")(x)
    finally:
        sys.modules["pycuda.gpuarray"].empty = real_empty
    (array,) = made
    owner = weakref.ref(array)
    del made[:], array
    assert owner() is not None and len(dlpack._held) == 1  # the consumer still reads it
    tensor.release()
    assert owner() is None and not dlpack._held


def test_each_array_of_a_result_is_handed_back(device):
    namespace = FakeArrayNamespace()
    x = FakeDLPack((100,), code=2, bits=32, namespace=namespace)
    out, count = scangen.Select(np.float32, "x > 0.0f")(x, count_on_device=True)
    assert [out, count] == namespace.consumed
    assert out.shape == (100,) and out.type == (2, 32, 1)
    assert count.shape == (1,) and count.type == (0, 64, 1)  # int64, on the device
    for tensor in namespace.consumed:
        tensor.release()
    assert not dlpack._held


def test_no_namespace_or_no_dlpack_type_gives_gpuarrays(device):
    assert isinstance(scangen.Scan(np.float32)(FakeDLPack((8,))), FakeGPUArray)
    namespace = FakeArrayNamespace()
    pairs = FakeGPUArray((3,), [("m", np.float32), ("c", np.float32)])
    like = FakeDLPack((3,), namespace=namespace)
    assert interop.DLPACK.hand_back((pairs, 7), like, None) == (pairs, 7)
    assert not namespace.consumed


def test_a_linear_recurrence_hands_back_its_states(device):
    namespace = FakeArrayNamespace()
    a, b = (FakeDLPack((4, 6), namespace=namespace, data=address)
            for address in (0x3000, 0x8000))
    h = scangen.linear_recurrence(a, b, axis=0)
    assert namespace.consumed == [h] and h.shape == (4, 6) and h.type == (2, 32, 1)
    h.release()


def test_a_capsule_the_consumer_did_not_take_is_deleted(device):
    namespace = FakeArrayNamespace(take=False)
    x = FakeDLPack((8,), namespace=namespace)
    with pytest.raises(RuntimeError, match="takes nothing"):
        scangen.Scan(np.float32)(x)
    assert not dlpack._held


def test_the_consumer_may_ask_for_no_ordering(device):
    namespace = FakeArrayNamespace(stream=-1)
    scangen.Scan(np.float32)(FakeDLPack((8,), namespace=namespace))
    assert device.ordered == []
    namespace.consumed[0].release()


def test_a_copy_or_another_device_is_refused(device):
    offer = dlpack._Offer(0x5000, (4,), np.dtype(np.float32), 0, object(), None)
    assert offer.__dlpack_device__() == (2, 0)
    with pytest.raises(BufferError, match="without copying"):
        offer.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not \\(2, 1\\)"):
        offer.__dlpack__(dl_device=(2, 1))
    assert not offer.capsules and not dlpack._held


def test_after_exit_no_consumer_calls_back(device):
    namespace = FakeArrayNamespace()
    scangen.Scan(np.float32)(FakeDLPack((8,), namespace=namespace))
    assert len(dlpack._held) == 1
    dlpack._at_exit()
    (tensor,) = namespace.consumed
    assert not dlpack._held
    assert dlpack.DLManagedTensor.from_address(tensor.address).deleter is None
    tensor.release()  # finds no deleter, as after the interpreter's end


class JaxLikeArray(FakeDLPack):
    """A DLPack producer from a module named jax (whose arrays never change once made)."""


JaxLikeArray.__module__ = "jax._src.array"


def test_an_immutable_array_is_read_but_never_written(device):
    x, out = JaxLikeArray((8,)), JaxLikeArray((8,), data=0x9000)
    scangen.Scan(np.float32)(x)  # read: fine
    with pytest.raises(ValueError, match="out is read-only \\(a JAX array"):
        scangen.Scan(np.float32)(x, out=out)
    with pytest.raises(ValueError, match="read-only"):
        scangen.Scan(np.float32)(x, out=x)
    assert len(device.launches) == 1


def test_order_after_waits_only_across_streams(monkeypatch):
    calls = []

    class Driver:
        def cuEventCreate(self, event, flags):
            event._obj.value = 0xE0
            return 0

        def cuEventRecord(self, event, stream):
            calls.append(("record", event.value, stream.value))
            return 0

        def cuStreamWaitEvent(self, stream, event, flags):
            calls.append(("wait", stream.value, event.value))
            return 0

        def cuEventDestroy_v2(self, event):
            return 0

    monkeypatch.setattr(streams, "_lib", Driver)
    monkeypatch.setattr(streams, "_library", None)
    raw = streams.RawStream(0x5100)
    streams.order_after(None, 1)  # the legacy stream, both ways
    streams.order_after(raw, 0x5100)
    assert calls == []
    streams.order_after(raw, 0x7700)
    streams.order_after(None, 2)  # the per-thread default stream is another
    assert calls == [("record", 0xE0, 0x5100), ("wait", 0x7700, 0xE0),
                     ("record", 0xE0, None), ("wait", 2, 0xE0)]


class InterfaceOfALibrary(FakeDeviceArray):
    """A __cuda_array_interface__ producer that names its library."""

    def __init__(self, n, dtype, namespace, **interface):
        super().__init__(n, dtype, **interface)
        self.__array_namespace__ = lambda api_version=None: namespace


def test_an_array_interface_producer_gets_its_librarys_arrays(device):
    namespace = FakeArrayNamespace(stream=0x7700)
    x = InterfaceOfALibrary((4, 6), np.int32, namespace, stream=0x5100)
    result = scangen.Scan(np.int32, "max")(x, axis=0)
    assert namespace.consumed == [result] and result.shape == (4, 6)
    assert result.type == (0, 32, 1)
    (launch,) = device.launches
    assert launch.stream.handle == 0x5100  # the interface's stream, which the consumer's waits for
    assert device.ordered == [(launch.stream, 0x7700)]
    result.release()
    assert isinstance(scangen.Scan(np.int32)(FakeDeviceArray(8, np.int32)), FakeGPUArray)


class JaxLikeInterface(FakeDeviceArray):
    pass


JaxLikeInterface.__module__ = "jax._src.array"


def test_an_immutable_array_interface_is_never_written(device):
    x = JaxLikeInterface(8, np.float32)
    with pytest.raises(ValueError, match="out is read-only"):
        scangen.Scan(np.float32)(FakeDeviceArray(8, np.float32, address=0x90000), out=x)


class OnTheHost:
    """An array whose __cuda_array_interface__ raises another error than AttributeError
    where its data is on the host (as a JAX array on the CPU does), and speaks DLPack."""

    @property
    def __cuda_array_interface__(self):
        raise ValueError("not a GPU buffer")

    def __dlpack_device__(self):
        return 1, 0

    def __dlpack__(self, stream=None):
        raise AssertionError("not asked for")


def test_a_host_array_that_raises_for_the_interface_is_refused_clearly(device):
    assert interop.kind_of(OnTheHost()) is interop.DLPACK
    with pytest.raises(TypeError, match="not in CUDA device memory"):
        scangen.Scan(np.float32)(OnTheHost())


class DynamicJaxprTracer:
    """What jax.jit hands a traced function: no array, no protocol."""


DynamicJaxprTracer.__module__ = "jax._src.interpreters.partial_eval"


def test_a_jax_tracer_is_refused_saying_why(device):
    with pytest.raises(TypeError, match="not DynamicJaxprTracer: scangen runs eagerly on "
                                        "concrete arrays, and JAX traces this call"):
        scangen.Scan(np.float32)(DynamicJaxprTracer())


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((2, 3, 4, 5), 2), ((1, 1, 9), -1),
                                        ((2, 0, 3), 1), ((0,), 0)])
def test_any_shape_is_handed_over_in_c_order(device, shape, axis):
    """Strides in elements, in C order, for every axis scanned; an array of no elements
    goes over with no address (nothing is launched for it)."""
    namespace = FakeArrayNamespace()
    x = FakeDLPack(shape, code=2, bits=64, namespace=namespace)
    tensor = scangen.Scan(np.float64, "add")(x, axis=axis)
    assert tensor.shape == shape and tensor.type == (2, 64, 1)
    assert tensor.strides == tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))
    assert (tensor.ptr == 0) == (0 in shape)
    assert len(device.launches) == (0 if 0 in shape else 1)
    tensor.release()
    assert not dlpack._held
