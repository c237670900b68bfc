"""One thread per process for GPU work asked for by threads scangen does not own.

PyCUDA ties each device object (an allocation, a pool, a module, an event) to the pycuda
context object current when it was made. It frees the object only where that object is
current, or in the thread that made the object (pushing it for the moment); anywhere else
the memory leaks with a warning ("... in out-of-thread context could not be cleaned up"),
and a pooled block handed back where no context is current ends the process (``terminate
called ... explicit_context_dependent``). Schedulers such as Dask and distributed run tasks
on threads of their own, which come and go, and drop what tasks leave behind on others: an
event loop's thread, or whichever thread the garbage collector runs in.

So scangen.chunked's GPU backend runs every call here: one long-lived thread whose context
stays current, on which the device objects of a call are made, used and freed. What goes
back to the caller is host memory or arrays of the caller's own library; an exception goes
back with the locals of its frames on this thread cleared, so that no device array rides
on its traceback into another thread. Nothing then depends on which thread of a scheduler
runs a task, nor on when that thread ends.

A call runs in the context current in the calling thread, if it has one (a program that
made its own current and scans in it), else in device 0's primary context (the one CuPy
and torch use), as a call in the calling thread would. The thread is a
concurrent.futures worker: the interpreter joins it at exit before atexit handlers run, and
it pops its context as it ends (scangen.runtime.contexts._PopWhenThreadEnds); scangen's
memory is then freed by that module's handler at exit.
"""
from __future__ import annotations

import os
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

from . import contexts

_lock = threading.Lock()
_executor = None
_owner_pid = None  # the process the executor's thread runs in (not a forked child)
_thread_ident = None  # the GPU thread, once it has run a call


def on_gpu_thread(function, *args):
    """``function(*args)`` on scangen's GPU thread, in the calling thread's pycuda context
    (or device 0's primary context where it has none); its result, or its exception. A
    call from the GPU thread itself runs at once."""
    if threading.get_ident() == _thread_ident and os.getpid() == _owner_pid:
        return function(*args)
    context = contexts.context_of_this_thread()
    return _gpu_executor().submit(_call, context, function, args).result()


def _gpu_executor() -> ThreadPoolExecutor:
    global _executor, _owner_pid
    with _lock:
        # A forked child inherits the executor but not its thread.
        if _executor is None or _owner_pid != os.getpid():
            _executor = ThreadPoolExecutor(1, thread_name_prefix="scangen-gpu")
            _owner_pid = os.getpid()
        return _executor


def _call(context, function, args):
    global _thread_ident
    _thread_ident = threading.get_ident()
    try:
        with contexts.made_current(context):
            return function(*args)
    except BaseException as err:
        _clear_frames(err)
        raise


def _clear_frames(err: BaseException) -> None:
    """Drop the locals of the finished frames of ``err``'s traceback, and of the exceptions
    it was raised from, so that device arrays in them are freed here, now."""
    seen, pending = set(), [err]
    while pending:
        err = pending.pop()
        if err is not None and id(err) not in seen:
            seen.add(id(err))
            traceback.clear_frames(err.__traceback__)
            pending += [err.__cause__, err.__context__]
