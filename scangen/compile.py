"""Compile rendered modules with PyCUDA, lazily imported, and cache them per CUDA context.

Nothing outside this module and scangen.runtime imports pycuda, so spec, plan, render and
the CLI work on any machine (scangen.runtime.gpu). The text compiled is exactly the rendered
text (C++, with ``extern "C"`` entry points), the same that ``check_with_nvcc`` and the CPU
tests compile.

What is compiled is a *module*: a hashable object with ``module_source()`` (the
rendered ModuleSource), ``entry_points()`` (each ``__global__`` function's name and its
parameters, as scangen.args.Argument) and ``description`` (what to call it in an error).
A ScanKernel's ScanModule is one; a module with kernels of its own (scangen.modules.Module:
radix passes, histogram, run lengths) is another. A module may
also have ``dynamic_shared()``: {entry point: bytes of dynamic shared memory its launches
take}; the compiled module lets each such kernel use that much (the opt-in attribute).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import nvrtc
from .args import launch_format
from .cache import cache_dir, write_atomically
from .render import ModuleSource
from .runtime.contexts import context_key, current_context, release_at_exit
from .runtime.gpu import GPUUnavailableError, require_pycuda
from .runtime.streams import RawFunctions
from .tuning import DEFAULT_ARCH

#: With the context and PyCUDA helpers programs and benchmarks import from here.
__all__ = ["CompiledModule", "GPUUnavailableError", "ScanCompileError", "check_all_with_nvcc",
           "check_with_nvcc",
           "compile_module", "current_context", "describe_compile_error", "precompile",
           "require_pycuda"]


class ScanCompileError(RuntimeError):
    """The compiler (nvcc, or NVRTC: compiler()) rejected the emitted source. The message
    names the user code the first error is in (input_expr, output_statement, operator,
    preamble) and shows the numbered source around it."""


# ------------------------------------------------------------------ compile errors

#: The line of an error in nvcc's log: cudafe++ writes ``module.cu(12): error``, the host
#: preprocessor (a missing #include, an unterminated comment) ``module.cu:12:5: error``.
_ERROR_LINE = re.compile(r"(?:\((\d+)\)|:(\d+):\d+): (?:fatal |catastrophic )?error")
#: Lines of nvcc's log shown: the first errors; the rest mostly follow from them.
_LOG_LINES = 40


def describe_compile_error(source: ModuleSource, log: str, what: str,
                           compiler: str = "nvcc") -> str:
    """The compiler's first errors, the user code the first one is in, and the numbered
    source around it (never the whole module: it runs to hundreds of lines)."""
    lines = log.strip().splitlines()
    if len(lines) > _LOG_LINES:
        lines = lines[:_LOG_LINES] + [f"... ({len(lines) - _LOG_LINES} more lines of "
                                      f"{compiler}'s log)"]
    log = "\n".join(lines)
    match = _ERROR_LINE.search(log)
    if match is None:
        return (f"{compiler} could not compile {what}:\n{log}\n(the source compiled is the "
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
    return (f"{compiler} could not compile {what}: the first error is {where}, line {line}:\n"
            f"{log}\n--- emitted source around line {line} ---\n"
            f"{source.numbered(around=line)}")


def check_all_with_nvcc(modules) -> None:
    """check_with_nvcc over ``modules`` (ScanModules and Modules: what an object's
    ``modules_to_compile()`` lists), in order; the first error is raised."""
    for module in modules:
        check_with_nvcc(module)


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
    takes dynamic shared memory (the module's ``dynamic_shared()``) may use that much:
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
            with _lock:
                if self._raw is None:
                    self._raw = RawFunctions(self.cubin, self.dynamic_shared)
        return self._raw


_cache: dict = {}  # (module, context_key) -> CompiledModule
_lock = threading.Lock()


class _Modules:
    """At exit, with the context current: the compiled modules are dropped."""

    def release_device_memory(self) -> None:
        _cache.clear()


#: Held here because release_at_exit keeps its holders weakly.
_RELEASE_MODULES = _Modules()
release_at_exit(_RELEASE_MODULES)
#: How many modules this process has compiled (read by tests: an identical spec compiles once).
compile_count = 0


def _arch(context) -> str:
    major, minor = context.get_device().compute_capability()
    return f"sm_{major}{minor}"


#: What SCANGEN_COMPILER may name: the compilers scangen runs.
COMPILERS = ("nvcc", "nvrtc")


def compiler() -> str:
    """The compiler that turns modules into cubins: ``SCANGEN_COMPILER``, "nvcc" (through
    PyCUDA; the default) or "nvrtc" (scangen.nvrtc: the runtime compiler in this process,
    about 0.16 s less a module)."""
    name = os.environ.get("SCANGEN_COMPILER", "").strip().lower() or "nvcc"
    if name not in COMPILERS:
        raise ValueError(f"SCANGEN_COMPILER={name!r}: use one of {', '.join(COMPILERS)}")
    return name


def _cubin_path(source: ModuleSource, arch: str) -> Path:
    """Where scangen's cache keeps the cubin of ``source`` for ``arch``: keyed by the text,
    the architecture, the compiler and its version (the toolkit's headers come with the
    version)."""
    if compiler() == "nvrtc":
        made_by = [nvrtc.version()]
    else:
        from pycuda.compiler import DEFAULT_NVCC_FLAGS, get_nvcc_version

        made_by = [get_nvcc_version("nvcc"), *DEFAULT_NVCC_FLAGS]
    key = "\0".join([source.text, arch, *made_by])
    return cache_dir("cubin") / f"{hashlib.sha256(key.encode()).hexdigest()}.cubin"


def _cubin(module_spec, arch: str) -> bytes:
    """The compiler's cubin (compiler()), cached in scangen's cache directory
    (scangen.cache). nvcc runs through PyCUDA, whose own cache is not used: its key runs
    nvcc's preprocessor over every source with an ``#include`` (half, bfloat16 and complex
    types), a few hundred milliseconds a lookup, and it writes its files in place, where
    another process may read one half-written."""
    source = module_spec.module_source()
    path = _cubin_path(source, arch)
    try:
        return path.read_bytes()
    except OSError:
        pass
    cubin = _compiled(source, arch, module_spec.description)
    try:
        write_atomically(path, cubin)
    except OSError:  # a cache that cannot be written: compile again next time
        pass
    return cubin


def _compiled(source: ModuleSource, arch: str, what: str) -> bytes:
    """``source``'s cubin from the compiler; its errors as a ScanCompileError."""
    if compiler() == "nvrtc":
        try:
            return nvrtc.compile_cubin(source.text, arch)
        except nvrtc.NvrtcCompileError as err:
            raise ScanCompileError(describe_compile_error(source, err.log, what,
                                                          "NVRTC")) from None
    from pycuda.compiler import compile as nvcc_compile
    from pycuda.driver import CompileError

    try:
        return nvcc_compile(source.text, arch=arch, no_extern_c=True, cache_dir=False)
    except CompileError as err:
        raise ScanCompileError(describe_compile_error(
            source, str(err.stderr or err), what)) from None


def _what_to_load(module_spec, arch: str):
    """The module to load for ``module_spec``: a part's whole module where that is compiled
    already (precompile compiles whole modules), else ``module_spec`` itself."""
    whole = getattr(module_spec, "scan_module", None)
    if whole is not None and _cubin_path(whole.module_source(), arch).exists():
        return whole
    return module_spec


def compile_module(module_spec) -> CompiledModule:
    """Compile (or fetch from the in-memory cache) ``module_spec``'s module in the current
    context. A plan's part (scangen.kernel.ModulePart) loads its whole module instead where
    that is in the cubin cache, so a precompiled scan runs nvcc for none of its parts."""
    global compile_count
    context = current_context()
    key = (module_spec, context_key(context))
    with _lock:
        compiled = _cache.get(key)
        if compiled is not None:
            return compiled
        arch = _arch(context)
        target = _what_to_load(module_spec, arch)
        compiled = _cache.get((target, key[1]))
        if compiled is None:
            cubin = _cubin(target, arch)
            compile_count += 1
            from pycuda.driver import module_from_buffer

            compiled = CompiledModule(module_from_buffer(cubin), target, cubin)
            _cache[(target, key[1])] = compiled
        _cache[key] = compiled
        return compiled


def precompile(module_specs, workers: int | None = None) -> None:
    """Run nvcc for many modules in parallel threads, filling scangen's cubin cache: each
    whole, one nvcc a module (a call then loads the whole module: compile_module).

    Loading still happens lazily (and cheaply) on first use in each context; this only
    takes the compiler's latency off the critical path, e.g. before a test matrix or a bench.
    """
    arch = _arch(current_context())
    unique = list(dict.fromkeys(module_specs))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda s: _cubin(s, arch), unique):
            pass
