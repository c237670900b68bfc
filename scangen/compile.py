"""Compile rendered modules with PyCUDA, lazily imported, and cache them per CUDA context.

Nothing outside this module and scangen.runtime imports pycuda, so spec, plan, render and
the CLI work on any machine; the first step that needs a GPU raises GPUUnavailableError
saying what is missing. The text compiled is exactly the rendered text (C++, with
``extern "C"`` entry points), the same that ``check_with_nvcc`` and the CPU tests compile.

What is compiled is a *module spec*: a hashable object with ``module_source()`` (the
rendered ModuleSource), ``entry_points()`` (each ``__global__`` function's name and its
parameters, as scangen.args.Argument) and ``description`` (what to call it in an error).
A ScanKernel's KernelSpec is one; a module with kernels of its own (scangen.modules.Module:
radix passes, histogram, run lengths) is another. A module spec may
also have ``dynamic_shared()``: {entry point: bytes of dynamic shared memory its launches
take}; the compiled module lets each such kernel use that much (the opt-in attribute).
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import re
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path

from .args import launch_format
from .render import ModuleSource
from .tuning import DEFAULT_ARCH


class GPUUnavailableError(RuntimeError):
    """PyCUDA or a CUDA device is missing; the message says how to get it."""


class ScanCompileError(RuntimeError):
    """nvcc rejected the emitted source. The message names the user code the first error is
    in (input_expr, output_statement, operator, preamble) and shows the numbered source
    around it."""


def require_pycuda():
    """Import pycuda.driver, or explain how to install it."""
    try:
        import pycuda.driver as driver
        import pycuda.gpuarray  # noqa: F401  (callers use it next)
    except ImportError as err:
        raise GPUUnavailableError(
            f"running a scan needs PyCUDA, which failed to import ({err}). Install it on a "
            "machine with an NVIDIA GPU and the CUDA toolkit: pip install 'scangen[cuda]'. "
            "Rendering (.source, .plan(), python -m scangen source/plan) works without it."
        ) from err
    return driver


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
    global _primary, _main_thread_pushed
    driver = _initialised_driver()
    context = driver.Context.get_current()
    if context is None:
        try:
            with _primary_lock:  # threads starting at once must share one object
                if _primary is None:
                    # The device's primary context: the one torch and cupy use, so arrays
                    # and events can be shared with them.
                    _primary = driver.Device(0).retain_primary_context()
            _primary.push()
        except driver.Error as err:
            raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
        if threading.current_thread() is threading.main_thread():
            _main_thread_pushed = True
        else:
            _this_thread.pushed = _PopWhenThreadEnds(_primary)
        context = _primary
    return context


def context_of_this_thread():
    """The pycuda context current in this thread, or None; makes none current."""
    return _initialised_driver().Context.get_current()


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
    """Free scangen's device memory and modules in the main thread, with scangen's
    primary context object current (pushed even where another object for the same
    CUcontext is: PyCUDA frees through the object itself), then pop each push once.

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
        _cache.clear()
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


# ------------------------------------------------------------------ compile errors

#: The line of an error in nvcc's log: cudafe++ writes ``module.cu(12): error``, the host
#: preprocessor (a missing #include, an unterminated comment) ``module.cu:12:5: error``.
_ERROR_LINE = re.compile(r"(?:\((\d+)\)|:(\d+):\d+): (?:fatal |catastrophic )?error")
#: Lines of nvcc's log shown: the first errors; the rest mostly follow from them.
_LOG_LINES = 40


def describe_compile_error(source: ModuleSource, log: str, what: str) -> str:
    """nvcc's first errors, the user code the first one is in, and the numbered source
    around it (never the whole module: it runs to hundreds of lines)."""
    lines = log.strip().splitlines()
    if len(lines) > _LOG_LINES:
        lines = lines[:_LOG_LINES] + [f"... ({len(lines) - _LOG_LINES} more lines of nvcc's "
                                      "log)"]
    log = "\n".join(lines)
    match = _ERROR_LINE.search(log)
    if match is None:
        return (f"nvcc could not compile {what}:\n{log}\n(the source compiled is the "
                "object's .source)")
    line = int(match.group(1) or match.group(2))
    # An error on the line right after a piece's end marker is that piece cut short; it
    # wins over a piece enclosing the line (a primitive's predicate sits in a preamble).
    cut_short, piece = source.user_piece_before(line), source.user_piece_at(line)
    if cut_short:
        where = f"at the end of your {cut_short} (cut short?)"
    elif piece:
        where = f"in your {piece}"
    else:
        where = "in scangen's generated code (please report it)"
    return (f"nvcc could not compile {what}: the first error is {where}, line {line}:\n"
            f"{log}\n--- emitted source around line {line} ---\n"
            f"{source.numbered(around=line)}")


def check_with_nvcc(module_spec, arch: str = DEFAULT_ARCH) -> None:
    """Compile the module with the nvcc on PATH, without a GPU or PyCUDA."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise GPUUnavailableError("check_compile needs nvcc (the CUDA toolkit) on PATH")
    source = module_spec.module_source()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.cu"
        path.write_text(source.text)
        result = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(path.with_suffix(
            ".cubin")), str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        log = (result.stderr + result.stdout).replace(str(path), "module.cu")
        raise ScanCompileError(describe_compile_error(source, log, module_spec.description))


# ------------------------------------------------------------------ compile and load

class CompiledModule:
    """The prepared kernels of one module, in one context, by kernel name. A kernel that
    takes dynamic shared memory (the module spec's ``dynamic_shared()``) may use that much:
    past the 48 KiB a block has without asking, the attribute is set here, once per kernel
    and context."""

    def __init__(self, module, module_spec, cubin: bytes = b""):
        self.module = module
        self.cubin = cubin
        self._raw = None
        self.functions = {}
        #: Entry point -> the dynamic shared memory its launches take (absent: none).
        self.dynamic_shared = dict(getattr(module_spec, "dynamic_shared", dict)())
        for name, parameters in module_spec.entry_points():
            function = module.get_function(name)
            function.prepare(launch_format(parameters))
            if name in self.dynamic_shared:
                from pycuda.driver import function_attribute

                function.set_attribute(function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       self.dynamic_shared[name])
            self.functions[name] = function

    def raw_functions(self):
        """The same kernels loaded a second time through the driver API, for launches on
        streams pycuda did not make (scangen.runtime.streams explains why)."""
        if self._raw is None:
            from .runtime.streams import RawFunctions

            with _lock:
                if self._raw is None:
                    self._raw = RawFunctions(self.cubin, self.dynamic_shared)
        return self._raw


_cache: dict = {}
_lock = threading.Lock()
#: How many modules this process has compiled (read by tests: an identical spec compiles once).
compile_count = 0


def _arch(context) -> str:
    major, minor = context.get_device().compute_capability()
    return f"sm_{major}{minor}"


def _cubin(module_spec, arch: str) -> bytes:
    """nvcc through PyCUDA, whose on-disk cache is keyed by source, options, arch and nvcc."""
    from pycuda.compiler import compile as nvcc_compile
    from pycuda.driver import CompileError

    source = module_spec.module_source()
    try:
        return nvcc_compile(source.text, arch=arch, no_extern_c=True)
    except CompileError as err:
        raise ScanCompileError(describe_compile_error(
            source, str(err.stderr or err), module_spec.description)) from None


def compile_module(module_spec) -> CompiledModule:
    """Compile (or fetch from the in-memory cache) ``module_spec``'s module in the current
    context."""
    global compile_count
    context = current_context()
    key = (module_spec, context_key(context))
    with _lock:
        compiled = _cache.get(key)
        if compiled is not None:
            return compiled
        cubin = _cubin(module_spec, _arch(context))
        compile_count += 1
        from pycuda.driver import module_from_buffer

        compiled = CompiledModule(module_from_buffer(cubin), module_spec, cubin)
        _cache[key] = compiled
        return compiled


def precompile(module_specs, workers: int | None = None) -> None:
    """Run nvcc for many module specs in parallel threads, filling PyCUDA's disk cache.

    Loading still happens lazily (and cheaply) on first use in each context; this only
    takes the compiler's latency off the critical path, e.g. before a test matrix or a bench.
    """
    from concurrent.futures import ThreadPoolExecutor

    arch = _arch(current_context())
    unique = list(dict.fromkeys(module_specs))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda s: _cubin(s, arch), unique):
            pass
