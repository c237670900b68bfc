"""Prepared calls without a GPU (Scan.prepare, ScanKernel.prepare): the arrays are checked and
the plan bound once, each call launches the same values again, a replaced scratch binds
again, and a prepared call launches exactly what the plain call launches."""
import numpy as np
import pytest

import scangen
from scangen.runtime import launcher
from tests.support import FakeCupyArray, fake_cupy_module, record_launches, simulate_device


class FakeLauncher:
    """A bound plan that notes what it was bound to and each launch instead of running it."""

    made = []

    def __init__(self, plan, compiled, scratch, stream=None):
        self.plan, self.stream, self.launched, self.is_stale = plan, stream, [], False
        FakeLauncher.made.append(self)

    def stale(self):
        return self.is_stale

    def __call__(self, values, stream):
        self.launched.append((values, stream))


@pytest.fixture
def device(monkeypatch):
    """A simulated device and CuPy whose bound plans are FakeLaunchers; returns their list."""
    simulate_device(monkeypatch)
    fake_cupy_module(monkeypatch)
    FakeLauncher.made = []
    monkeypatch.setattr(launcher, "Launcher", FakeLauncher)
    monkeypatch.setattr(launcher, "compile_module", lambda part: None)
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
