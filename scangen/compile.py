"""Compile rendered modules with PyCUDA, lazily imported, and cache them per CUDA context.

Nothing outside this module imports pycuda, so spec, plan, render and the CLI work on any
machine; the first step that needs a GPU raises GPUUnavailableError saying what is missing.
"""
from __future__ import annotations

import atexit
import threading

from .render import ModuleSource, render
from .spec import ScanSpec

#: Prepared-call argument formats of each kernel family (P pointer, q long long).
KERNEL_SIGNATURES = {"scan_sections": "PPPq", "add_prefixes": "PPq", "reduce_sections": "PPq",
                     "scan_tiles": "PPPPPQIq"}


class GPUUnavailableError(RuntimeError):
    """PyCUDA or a CUDA device is missing; the message says how to get it."""


class ScanCompileError(RuntimeError):
    """nvcc rejected the emitted source; the message holds nvcc's output and the numbered source."""


def require_pycuda():
    """Import pycuda.driver, or explain how to install it."""
    try:
        import pycuda.driver as driver
        import pycuda.gpuarray  # noqa: F401  (callers use it next)
    except ImportError as err:
        raise GPUUnavailableError(
            f"running a scan needs PyCUDA, which failed to import ({err}). Install it on a "
            "machine with an NVIDIA GPU and the CUDA toolkit: pip install 'scangen[cuda]'. "
            "Rendering (Scan.source, python -m scangen source/plan) works without it."
        ) from err
    return driver


_driver = None


def current_context():
    """The current CUDA context, retaining device 0's primary context if there is none."""
    global _driver
    if _driver is None:
        driver = require_pycuda()
        try:
            driver.init()
        except driver.Error as err:
            raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
        _driver = driver
    context = _driver.Context.get_current()
    if context is None:
        try:
            # The device's primary context: the one torch and cupy use, so arrays and
            # events can be shared with them.
            context = _driver.Device(0).retain_primary_context()
            context.push()
        except _driver.Error as err:
            raise GPUUnavailableError(f"no usable CUDA device: {err}") from err
        atexit.register(_pop_context, context)
    return context


def _pop_context(context) -> None:
    try:
        context.pop()
    except Exception:  # the process is ending; a context already gone is fine
        pass


class CompiledScan:
    """The prepared kernels of one module, in one context."""

    def __init__(self, module, source: ModuleSource):
        self.module = module
        self.functions = {}
        for name in source.kernel_names:
            family = next(f for f in KERNEL_SIGNATURES if name.startswith(f))
            function = module.get_function(name)
            function.prepare(KERNEL_SIGNATURES[family])
            self.functions[name] = function


_cache: dict = {}
_lock = threading.Lock()
#: How many modules this process has compiled (read by tests: an identical spec compiles once).
compile_count = 0


def _arch(context) -> str:
    major, minor = context.get_device().compute_capability()
    return f"sm_{major}{minor}"


def _cubin(source: ModuleSource, spec: ScanSpec, arch: str) -> bytes:
    """nvcc through PyCUDA, whose on-disk cache is keyed by source, options, arch and nvcc."""
    from pycuda.compiler import compile as nvcc_compile
    from pycuda.driver import CompileError

    try:
        return nvcc_compile(source.text, arch=arch)
    except CompileError as err:
        raise ScanCompileError(
            f"nvcc could not compile the scan for {spec.operator.name!r} on "
            f"{spec.etype.name}:\n{err.stderr or err}\n--- emitted source ---\n"
            f"{source.numbered()}"
        ) from None


def compile_spec(spec: ScanSpec) -> CompiledScan:
    """Compile (or fetch from the in-memory cache) the module for ``spec`` in this context."""
    global compile_count
    context = current_context()
    key = (spec, context.handle)
    with _lock:
        compiled = _cache.get(key)
        if compiled is not None:
            return compiled
        source = render(spec)
        cubin = _cubin(source, spec, _arch(context))
        compile_count += 1
        from pycuda.driver import module_from_buffer

        compiled = CompiledScan(module_from_buffer(cubin), source)
        _cache[key] = compiled
        return compiled


def precompile(specs, workers: int | None = None) -> None:
    """Run nvcc for many specs in parallel threads, filling PyCUDA's disk cache.

    Loading still happens lazily (and cheaply) on first use in each context; this only
    takes the compiler's latency off the critical path, e.g. before a test matrix or a bench.
    """
    from concurrent.futures import ThreadPoolExecutor

    arch = _arch(current_context())
    unique = list(dict.fromkeys(specs))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda s: _cubin(render(s), s, arch), unique):
            pass
