"""How a scan's launches are bound, without a GPU. Prepared calls (Scan.prepare,
ScanKernel.prepare): the arrays are checked and the plan bound once, each call launches the
same values again, a replaced scratch binds again, and a prepared call launches exactly what
the plain call launches. Calls on a stream being captured into a CUDA graph: a plan that
keeps scratch takes scratch of the graph's own, allocated, zeroed and freed on the stream
around the launch, with tickets from 0 and epoch 1, and leaves the stream's scratch alone;
a primitive refuses to be captured."""
import types

import numpy as np
import pytest

import scangen
from scangen.runtime import launcher, scratch, streams
from scangen.runtime.modules import ModuleRuntime
from tests.support import FakeCupyArray, fake_cupy_module, record_launches, simulate_device


class FakeLauncher:
    """A bound plan that binds its scratch as Launcher does and notes each launch (its
    values and single-pass tickets) instead of running it."""

    made = []

    def __init__(self, plan, compiled, scratch, stream=None):
        self.plan, self.scratch, self.stream = plan, scratch, stream
        self.bindings = scratch.bind(plan, stream)
        self.keeps_scratch = bool(self.bindings)
        self.launched, self.is_stale = [], False
        FakeLauncher.made.append(self)

    def stale(self):
        return self.is_stale

    def __call__(self, values, stream):
        tickets = self.scratch.next_single_pass_call(1, stream) \
            if self.plan.single_pass_tiles else None
        self.launched.append((values, stream))
        self.tickets = tickets


@pytest.fixture
def device(monkeypatch):
    """A simulated device and CuPy whose bound plans are FakeLaunchers; returns their list."""
    simulate_device(monkeypatch)
    fake_cupy_module(monkeypatch)
    FakeLauncher.made = []
    monkeypatch.setattr(launcher, "Launcher", FakeLauncher)
    monkeypatch.setattr(launcher, "compile_module", lambda part: None)
    # the stream's scratch, as pycuda would allocate it
    addresses = iter(range(1 << 40, 1 << 41, 1 << 30))
    monkeypatch.setattr(scratch, "require_pycuda", lambda: types.SimpleNamespace(
        mem_alloc=lambda nbytes: next(addresses)))
    monkeypatch.setattr(scratch, "memset_d8_async", lambda *args: None)
    return FakeLauncher.made


def test_a_prepared_scan_binds_once_and_launches_each_call(device, rng):
    n = int(rng.integers(1, 1 << 20))
    x, out = FakeCupyArray(n, np.float32, ptr=0x10000), FakeCupyArray(n, np.float32,
                                                                      ptr=0x800000)
    run = scangen.Scan(np.float32, "add").prepare(x, out)
    assert isinstance(run, scangen.PreparedScan)
    calls = int(rng.integers(2, 6))
    results = [run() for _ in range(calls)]
    assert all(result is out for result in results)
    (bound,) = device
    assert bound.plan.n == n
    assert bound.launched == [((0x10000, 0x800000), bound.stream)] * calls


def test_a_prepared_scan_makes_its_output_once(device):
    x = FakeCupyArray(1000, np.int32)
    run = scangen.Scan(np.int32, "add", result_dtype=np.int64).prepare(x)
    assert run.out.dtype == np.int64 and run.out.shape == (1000,)
    assert run() is run() is run.out
    (bound,) = device
    assert [values[1] for values, _ in bound.launched] == [run.out.data.ptr] * 2


def test_a_prepared_call_binds_again_once_its_scratch_is_replaced(device):
    run = scangen.Scan(np.float32).prepare(FakeCupyArray(5000, np.float32),
                                           FakeCupyArray(5000, np.float32, ptr=0x900000))
    run()
    device[0].is_stale = True  # a larger call on the stream replaced the scratch
    run()
    run()
    first, second = device
    assert (len(first.launched), len(second.launched)) == (1, 2)
    assert second.plan.n == first.plan.n == 5000


def test_prepare_checks_the_arrays_before_it_binds(device):
    scan = scangen.Scan(np.float32)
    with pytest.raises(TypeError, match="dtype int32"):
        scan.prepare(FakeCupyArray(10, np.int32))
    with pytest.raises(ValueError, match="shape"):
        scan.prepare(FakeCupyArray(10, np.float32), FakeCupyArray(11, np.float32, ptr=0x9000))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        scan.prepare(FakeCupyArray((4, 5), np.float32), axis=2)
    assert device == []


def test_a_prepared_call_of_no_elements_launches_nothing(device):
    run = scangen.Scan(np.float32).prepare(FakeCupyArray((3, 0), np.float32), axis=0)
    assert run() is run.out
    assert device == []


@pytest.mark.parametrize("shape,axis", [((1000,), 0), ((7, 300), 1), ((7, 1500), -1),
                                        ((3, 4, 5), 0), ((3, 4, 5), 1), ((2, 9000), 1)])
def test_a_prepared_call_launches_what_the_call_launches(device, monkeypatch, shape, axis):
    """The same kernel, values, size, stream and layout as ``scan(x, out, axis=...)``, and
    the initial value given at prepare."""
    scan = scangen.Scan(np.float32, "add", initial=2.5)
    x, out = FakeCupyArray(shape, np.float32), FakeCupyArray(shape, np.float32, ptr=0x900000)
    run = scan.prepare(x, out, axis=axis, initial=-1.0)
    run()
    (bound,) = device
    recorded = record_launches(monkeypatch)
    scan(x, out, axis=axis, initial=-1.0)
    (call,) = recorded
    (values, stream), = bound.launched
    assert values == call.values and stream.handle == call.stream.handle
    assert bound.plan == scan.plan(shape, axis=axis)


def test_a_prepared_scan_kernel_holds_its_arrays_and_takes_scalars_once(device):
    kernel = scangen.ScanKernel(np.float32, "add", arguments="const float *x, float *out, "
                                "float weight", input_expr="weight * x[i]",
                                output_statement="out[i] = item;", initial=0.0)
    x, out = FakeCupyArray(300, np.float32), FakeCupyArray(300, np.float32, ptr=0x900000)
    run = kernel.prepare(x, out, 3.0, initial=1.5)
    assert run() is None
    assert x in run.keep and out in run.keep
    (bound,) = device
    (values, _), = bound.launched
    assert values[:2] == (x.data.ptr, out.data.ptr)
    assert [float(v) for v in values[2:]] == [3.0, 1.5]
    with pytest.raises(TypeError, match="argument 'weight'"):
        kernel.prepare(x, out, "heavy")


@pytest.fixture
def capture(device, monkeypatch):
    """``device``, with a switch for whether streams are being captured, and the driver's
    stream-ordered allocations and memsets in order as (call, address, ...) tuples."""
    state = types.SimpleNamespace(on=False, driver=[], made=device)
    monkeypatch.setattr(streams, "capturing", lambda stream: stream is not None and state.on)
    addresses = iter(range(1 << 44, 1 << 45, 1 << 30))

    def alloc(nbytes, stream):
        state.driver.append(("alloc", next(addresses), nbytes, stream.handle))
        return state.driver[-1][1]

    monkeypatch.setattr(scratch, "mem_alloc_async", alloc)
    monkeypatch.setattr(scratch, "mem_free_async", lambda address, stream: state.driver.append(
        ("free", address, stream.handle)))
    monkeypatch.setattr(scratch, "memset_d8_async", lambda address, value, nbytes, stream:
                        state.driver.append(("memset", address, value, nbytes, stream.handle)))
    return state


def single_pass_call(rng):
    """A scan whose plan at n is one single pass (tile status, tickets), and its arrays."""
    scan = scangen.Scan(np.float32, "add", strategy="decoupled_lookback", section_size=256)
    n = int(rng.integers(10_000, 1 << 22))
    assert scan.plan(n).single_pass_tiles > 1
    return scan, FakeCupyArray(n, np.float32), FakeCupyArray(n, np.float32, ptr=1 << 36)


def test_a_captured_single_pass_takes_scratch_of_the_graphs_own(capture, rng):
    scan, x, out = single_pass_call(rng)
    scan(x, out)
    scan(x, out)
    (plain,) = capture.made
    stream_scratch, stream_tickets = plain.scratch, plain.tickets
    capture.driver.clear()  # the stream scratch's first zeroing
    capture.on = True
    for _ in range(2):
        scan(x, out)
    capture.on = False
    scan(x, out)
    assert capture.made[0] is plain and len(capture.made) == 3
    for captured in capture.made[1:]:
        assert isinstance(captured.scratch, scratch.GraphScratch)
        assert captured.tickets == (0, 1)
        assert captured.launched == [((x.data.ptr, out.data.ptr), captured.launched[0][1])]
        assert set(captured.bindings.values()) != set(plain.bindings.values())
    # each capture: allocate, zero the single-pass state inside it, free after the launch
    assert [call[0] for call in capture.driver] == ["alloc", "memset", "free"] * 2
    for (_, address, nbytes, _), (_, zeroed, value, zeroed_bytes, _), (_, freed, _) in zip(
            capture.driver[0::3], capture.driver[1::3], capture.driver[2::3]):
        assert value == 0 and freed == address
        assert address <= zeroed and zeroed + zeroed_bytes == address + nbytes
    # the stream's own scratch went on counting for the plain calls alone
    assert plain.scratch is stream_scratch and len(plain.launched) == 3
    assert plain.tickets[1] == stream_tickets[1] + 1


def test_a_plan_without_scratch_is_captured_as_it_is(capture):
    scan = scangen.Scan(np.float32, "add")
    x, out = FakeCupyArray(1000, np.float32), FakeCupyArray(1000, np.float32, ptr=1 << 36)
    scan(x, out)
    capture.on = True
    scan(x, out)
    (bound,) = capture.made
    assert not bound.keeps_scratch and len(bound.launched) == 2 and capture.driver == []


def test_a_first_call_inside_a_capture_leaves_the_streams_scratch_unmade(capture, rng):
    scan, x, out = single_pass_call(rng)
    capture.on = True
    run = scan.prepare(x, out)
    run()
    (captured,) = capture.made
    assert isinstance(captured.scratch, scratch.GraphScratch)
    capture.on = False
    run()
    assert isinstance(capture.made[-1].scratch, scratch.StreamScratch)
    assert capture.made[-1].tickets[1] == 1


def test_a_prepared_call_inside_a_capture_is_captured(capture, rng):
    scan, x, out = single_pass_call(rng)
    run = scan.prepare(x, out)
    run()
    capture.on = True
    run()
    capture.on = False
    run()
    plain, captured = capture.made
    assert len(plain.launched) == 2 and len(captured.launched) == 1
    assert isinstance(captured.scratch, scratch.GraphScratch)


def test_a_primitive_refuses_a_capture(monkeypatch):
    monkeypatch.setattr(streams, "capturing", lambda stream: True)
    plan = types.SimpleNamespace(title="histogram of float32 into 10 bins")
    with pytest.raises(RuntimeError, match="histogram of float32 into 10 bins cannot be "
                                           "captured into a CUDA graph"):
        ModuleRuntime().run(plan, {}, streams.RawStream(0x5000))
