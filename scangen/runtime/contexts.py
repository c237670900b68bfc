"""The CUDA context scangen works in, from driver initialisation to the release at exit.

scangen makes device 0's primary context current in each thread that needs one and has none
(the context torch and CuPy use), pops it when that thread ends, and at exit frees its own
device memory and modules while that context is current (``release_at_exit``). Caches of
device memory and modules key a context by ``context_key`` and a stream by ``stream_key``.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import threading
import weakref

from . import streams
from .gpu import GPUUnavailableError, require_pycuda

_driver = None
_primary = None          # device 0's primary context, one pycuda object for every thread
_primary_lock = threading.Lock()
_this_thread = threading.local()
_main_thread_pushed = False
#: Objects holding device memory or modules (``release_device_memory()``), released at exit.
_holders = weakref.WeakSet()


def _initialised_driver():
    global _driver
    if _driver is None:
        driver = require_pycuda()
        try:
            driver.init()
        except driver.Error as err:
            raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
        with _primary_lock:
            if _driver is None:
                # Whichever context scangen's memory is made in (the primary context, or
                # one the program made current, pycuda.autoinit's say), it is freed at exit.
                atexit.register(_release_at_exit)
                _driver = driver
    return _driver


def current_context():
    """The current CUDA context, making device 0's primary context current if there is none.

    PyCUDA keeps a context stack per thread, aborts the process if a thread's stack is not
    empty when that thread's stack is destroyed, and frees memory only in a context object
    of the freeing thread or one current there. So every thread pushes the same pycuda
    object for the primary context, and pops it when the thread ends; at exit, scangen's own
    device memory is released with the context current (see _release_at_exit).
    """
    global _main_thread_pushed
    driver = _initialised_driver()
    context = driver.Context.get_current()
    if context is None:
        context = primary_context()
        try:
            context.push()
        except driver.Error as err:
            raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
        if threading.current_thread() is threading.main_thread():
            _main_thread_pushed = True
        else:
            _this_thread.pushed = _PopWhenThreadEnds(context)
    return context


def primary_context():
    """Device 0's primary context (the one torch and CuPy use, so arrays and events can be
    shared with them) as scangen's one pycuda object for it, made on first use."""
    global _primary
    driver = _initialised_driver()
    try:
        with _primary_lock:  # threads starting at once must share one object
            if _primary is None:
                _primary = driver.Device(0).retain_primary_context()
    except driver.Error as err:
        raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
    return _primary


@contextlib.contextmanager
def in_a_borrowed_thread():
    """Run the block in a thread scangen does not see end (torch's autograd threads end
    only with the process): where the thread has no context, the primary context is
    current for the block only and popped after it, so the thread's PyCUDA stack is empty
    again (PyCUDA aborts the process when a thread's stack is destroyed non-empty)."""
    if _initialised_driver().Context.get_current() is not None:
        yield
        return
    with made_current(primary_context()):
        yield


def context_of_this_thread():
    """The pycuda context current in this thread, or None; makes none current. Refused
    where the driver has another context current here: the program's arrays then live and
    are ordered in that one, and work done in pycuda's would race with them."""
    context = _initialised_driver().Context.get_current()
    if context is not None:
        _refuse_a_switched_context(context)
    return context


def check_context_not_switched(error: Exception) -> None:
    """After a failed launch (``error``): raise what to do instead where the cause is a
    context switched behind PyCUDA's back in this thread (the kernel was loaded in
    PyCUDA's context, and is launched in the driver's; "invalid resource handle")."""
    context = _initialised_driver().Context.get_current()
    if context is not None:
        _refuse_a_switched_context(context, error)


def _refuse_a_switched_context(context, cause=None) -> None:
    current = streams.driver_context()
    if current != context.handle:
        raise RuntimeError(
            f"PyCUDA's current context in this thread ({context.handle:#x}) is not the one "
            f"the CUDA driver has current here ({current:#x}): another library changed it "
            "(CuPy's ndarray.get() and torch call cudaSetDevice, which makes the device's "
            "primary context current), so scangen's work would not be ordered with that "
            "library's. Use the primary context: pycuda.autoprimaryctx instead of "
            "pycuda.autoinit, or no PyCUDA context of your own (scangen then uses the "
            "primary context)") from cause


def context_key(context=None) -> tuple:
    """What caches of device memory and modules key a context by (default: the current
    one, as current_context() gives it): its CUcontext handle and the pycuda object.
    PyCUDA frees an object through the pycuda context object that was current when it was
    made, and two objects can stand for one CUcontext (the primary context retained twice,
    by scangen and by pycuda.autoprimaryctx, say): memory made under one is not to be
    handed out under the other. A pycuda Context hashes its handle with its own address,
    so the hash tells the objects apart."""
    if context is None:
        context = current_context()
    return context.handle, hash(context)


def stream_key(stream) -> tuple:
    """The key of the current context and ``stream`` (None, a pycuda Stream or a
    RawStream: anything with a handle), for caches of device memory per stream (scratch,
    pools): two contexts, or two streams, never share one."""
    return (*context_key(), 0 if stream is None else stream.handle)


@contextlib.contextmanager
def made_current(context):
    """Run the block with ``context`` (a pycuda Context) current in this thread, or with
    current_context()'s where ``context`` is None; pops only what it pushed."""
    if context is None:
        yield current_context()
        return
    current = _initialised_driver().Context.get_current()
    if current is not None and context_key(current) == context_key(context):
        yield context
        return
    context.push()
    try:
        yield context
    finally:
        _pop_context(context)


def release_at_exit(holder) -> None:
    """Have ``holder.release_device_memory()`` called at exit, while the primary context is
    still current (PyCUDA could not free it later if another thread made the context)."""
    _holders.add(holder)


class _PopWhenThreadEnds:
    """Held in a threading.local: CPython drops it in the ending thread itself, before
    PyCUDA destroys that thread's context stack, so the pop happens in time."""

    def __init__(self, context):
        self.context = context

    def __del__(self):
        _pop_context(self.context)


def _release_at_exit() -> None:
    """Free scangen's device memory and modules (every holder's, scangen.compile's cache
    among them) in the main thread, with scangen's primary context object current (pushed
    even where another object for the same CUcontext is: PyCUDA frees through the object
    itself), then pop each push once.

    What the program still holds while the interpreter tears down (arrays in module
    globals) is freed after this, by PyCUDA pushing its context for the moment, which it
    does in the thread that made the context object: the main thread, where the program
    used the GPU first (or pycuda.autoinit made its context). scangen's pools stop holding
    blocks here (runtime/pool.py), so such an array goes straight back to CUDA."""
    pushes = int(_main_thread_pushed)
    try:
        current = _driver.Context.get_current()
        if _primary is not None and (current is None or
                                     context_key(current) != context_key(_primary)):
            _primary.push()
            pushes += 1
        for holder in list(_holders):
            holder.release_device_memory()
        gc.collect()
    except Exception:  # the process is ending: free what can be freed
        pass
    for _ in range(pushes):
        _pop_context(_primary)


def _pop_context(context) -> None:
    """Pop ``context`` if it is this thread's current one (the thread or process is ending;
    a context already gone is fine)."""
    try:
        current = _driver.Context.get_current()
        if current is not None and context_key(current) == context_key(context):
            context.pop()
    except Exception:
        pass
