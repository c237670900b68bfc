"""CUDA contexts without a GPU: caches of device memory key the context as well as the
stream (one helper, scangen.runtime.contexts.stream_key), so a process with two contexts
(two devices, or a context the program pushed) never hands one context's memory to another;
and scangen.runtime.contexts pushes and pops contexts as PyCUDA needs (a fake pycuda context
stack)."""
import importlib
import types

import numpy as np
import pytest

import scangen

from scangen.primitives import compaction
from scangen.runtime import contexts as cuda_contexts, launcher, mapped
from scangen.runtime.modules import ModuleRuntime
from scangen.runtime.streams import RawStream
from tests.support import FakeContext


@pytest.fixture
def contexts(monkeypatch):
    """scangen.current_context() is ``contexts.current``, which a test may replace."""
    contexts = types.SimpleNamespace(current=FakeContext(0xC0))
    monkeypatch.setattr(cuda_contexts, "current_context", lambda: contexts.current)
    return contexts


def _one_each(contexts, get):
    """What ``get()`` gives under a first context (twice), a second context, another pycuda
    object for the second's CUcontext (PyCUDA frees memory through the object it was made
    under), and the first again."""
    first = contexts.current
    got = [get(), get()]
    contexts.current = FakeContext(0xD0)
    got.append(get())
    contexts.current = FakeContext(0xD0)
    got.append(get())
    contexts.current = first
    got.append(get())
    assert got[0] is got[1] is got[4], "kept for its context"
    assert len({id(g) for g in got}) == 3, "one per context object"
    return got


def test_radix_scratch_is_per_context_and_stream(contexts):
    launches = ModuleRuntime()
    _one_each(contexts, lambda: launches.scratch(None))
    stream = RawStream(0x1234)
    assert launches.scratch(stream) is launches.scratch(stream)
    assert launches.scratch(stream) is not launches.scratch(None)


def test_compaction_host_count_is_per_context(contexts, monkeypatch):
    monkeypatch.setattr(mapped, "MappedWord", lambda: object())
    select = compaction._Compaction(np.float32, None)
    _one_each(contexts, select._counts.get)


def test_histogram_device_edges_are_per_context(contexts, monkeypatch):
    """A Histogram keeps its last call's edges on the device: for the same bins in the same
    context only."""
    histogram = importlib.import_module("scangen.primitives.histogram")
    monkeypatch.setattr(histogram, "_gpuarray", lambda: types.SimpleNamespace(
        to_gpu=lambda host: object()))
    hist = histogram.Histogram(np.float32)

    def device_edges(bins=10):
        return hist._bins(bins, (0.0, 1.0))[3]

    first = device_edges()
    assert device_edges() is first
    assert device_edges(12) is not device_edges()
    contexts.current = FakeContext(0xD0)
    second = device_edges()
    contexts.current = FakeContext(0xD0)
    assert device_edges() is not second


def test_scan_scratch_and_launchers_are_per_context(contexts, monkeypatch):
    import scangen

    used = []

    class Launcher:
        keeps_scratch = False

        def __init__(self, plan, compiled, scratch, stream=None):
            self.scratch = scratch

        def stale(self):
            return False

        def __call__(self, values, stream):
            used.append(self)

    monkeypatch.setattr(launcher, "Launcher", Launcher)
    monkeypatch.setattr(launcher, "compile_module", lambda spec: None)
    kernel = scangen.ScanKernel(np.int32, "add", arguments="const scan_t *x, scan_t *out",
                                input_expr="x[i]", output_statement="out[i] = item;")
    runtime = launcher.Runtime(kernel.scan_module)

    def launch():
        runtime.launch((), 1000, None)
        return used[-1]

    launchers = _one_each(contexts, launch)
    assert len({id(b.scratch) for b in launchers}) == 3


def test_a_call_compiles_only_the_kernels_its_plan_launches(contexts, monkeypatch):
    """The first call of a size compiles its plan's part of the module (ScanModule.part),
    not every kernel the strategy may launch at some size."""
    compiled = []

    class Launcher:
        keeps_scratch = False

        def __init__(self, plan, module, scratch, stream):
            pass

        def __call__(self, values, stream):
            pass

    monkeypatch.setattr(launcher, "Launcher", Launcher)
    monkeypatch.setattr(launcher, "compile_module", compiled.append)
    kernel = scangen.ScanKernel(np.float32, "add", arguments="const scan_t *x, scan_t *out",
                                input_expr="x[i]", output_statement="out[i] = item;")
    runtime = launcher.Runtime(kernel.scan_module)
    section = kernel.spec.section_size
    for n in (section, section + 1):
        runtime.launch((), n, None)
    small, large = compiled
    assert [k.name for k in small.kernels] == ["scan_one_section_user"]
    assert [k.name for k in large.kernels] == ["scan_tiles_persistent_user"]
    assert (small, large) == (kernel.plan(section).part, kernel.plan(section + 1).part)


class FakeDriver:
    """pycuda.driver's context stack, per thread as PyCUDA keeps it: push, pop (the top,
    whichever it is), get_current."""

    def __init__(self):
        self.stack = []
        driver = self

        class Context:
            @staticmethod
            def get_current():
                return driver.stack[-1] if driver.stack else None

            @staticmethod
            def pop():
                driver.stack.pop()

        self.Context = Context

    def context(self, handle):
        context = FakeContext(handle)
        context.push = lambda: self.stack.append(context)
        context.pop = self.Context.pop
        return context


@pytest.fixture
def driver(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(cuda_contexts, "_driver", driver)
    return driver


def test_made_current_pushes_only_another_context_object(driver):
    ours, programs = driver.context(0xC0), driver.context(0xC0)
    ours.push()
    with cuda_contexts.made_current(ours):
        assert driver.stack == [ours]
    # the same CUcontext through another pycuda object: pushed, and popped after
    with cuda_contexts.made_current(programs):
        assert driver.stack == [ours, programs]
    assert driver.stack == [ours]
    with pytest.raises(ValueError):
        with cuda_contexts.made_current(programs):
            raise ValueError
    assert driver.stack == [ours]


@pytest.mark.parametrize("programs_first", [False, True])
def test_release_at_exit_frees_under_the_primary_context_object(driver, monkeypatch,
                                                                programs_first):
    """At exit scangen's memory is freed with its own context object current, even where
    the program's object for the same CUcontext is (pycuda.autoprimaryctx's, imported
    first: scangen then pushed none in the main thread), as PyCUDA frees through that
    object only in the thread that made it; each push is popped, the program's stays for
    the program to pop."""
    primary, programs = driver.context(0xC0), driver.context(0xC0)
    monkeypatch.setattr(cuda_contexts, "_primary", primary)
    monkeypatch.setattr(cuda_contexts, "_main_thread_pushed", not programs_first)
    (programs if programs_first else primary).push()
    seen = []

    class Holder:
        def release_device_memory(self):
            seen.append(driver.Context.get_current())

    holder = Holder()
    monkeypatch.setattr(cuda_contexts, "_holders", {holder})
    cuda_contexts._release_at_exit()
    assert seen == [primary]
    assert driver.stack == ([programs] if programs_first else [])


def test_a_borrowed_thread_pushes_for_the_block_only(driver, monkeypatch):
    """A thread scangen does not see end (torch's autograd threads) gets the primary context
    for the block and an empty stack after it; a thread with a context current gets none
    pushed."""
    primary = driver.context(0xC0)
    monkeypatch.setattr(cuda_contexts, "_primary", primary)
    with cuda_contexts.in_a_borrowed_thread():
        assert driver.stack == [primary]
    assert driver.stack == []
    with pytest.raises(ValueError):
        with cuda_contexts.in_a_borrowed_thread():
            raise ValueError
    assert driver.stack == []
    programs = driver.context(0xC0)
    programs.push()
    with cuda_contexts.in_a_borrowed_thread():
        assert driver.stack == [programs]
    assert driver.stack == [programs]


def test_a_context_the_driver_no_longer_has_current_is_refused(driver, monkeypatch):
    """pycuda.autoinit's context on PyCUDA's stack while another library made the primary
    context the driver's current one (CuPy's ndarray.get() calls cudaSetDevice): the call
    is refused with what to do, where running in PyCUDA's would race with the library's
    work; where the two agree, or PyCUDA has none, the context (or None) is given."""
    programs = driver.context(0xA0)
    programs.push()
    monkeypatch.setattr(cuda_contexts.streams, "driver_context", lambda: 0xA0)
    assert cuda_contexts.context_of_this_thread() is programs
    monkeypatch.setattr(cuda_contexts.streams, "driver_context", lambda: 0xC0)
    with pytest.raises(RuntimeError, match="pycuda.autoprimaryctx"):
        cuda_contexts.context_of_this_thread()
    programs.pop()
    assert cuda_contexts.context_of_this_thread() is None


def test_a_launch_failed_in_a_switched_context_says_why(driver, monkeypatch):
    """A launch that failed while the driver had another context current than PyCUDA's (the
    kernel was loaded in PyCUDA's: "invalid resource handle") is explained, the driver's
    error as its cause; any other failure is left to its own error."""
    programs = driver.context(0xA0)
    programs.push()
    failure = ValueError("cuLaunchKernel failed: invalid resource handle")
    monkeypatch.setattr(cuda_contexts.streams, "driver_context", lambda: 0xA0)
    assert cuda_contexts.check_context_not_switched(failure) is None
    monkeypatch.setattr(cuda_contexts.streams, "driver_context", lambda: 0xC0)
    with pytest.raises(RuntimeError, match="pycuda.autoprimaryctx") as raised:
        cuda_contexts.check_context_not_switched(failure)
    assert raised.value.__cause__ is failure
    programs.pop()
