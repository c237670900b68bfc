"""NVRTC, the CUDA runtime compiler, as a second way to turn a rendered module into a cubin
(scangen.compile chooses: ``SCANGEN_COMPILER=nvrtc``; nvcc by default).

nvcc runs as a chain of processes (the host preprocessor, cicc, ptxas) and includes the
CUDA runtime's headers in every translation unit: an empty kernel costs it about 0.18 s, a
plan's part about 0.38 s (measured with CUDA 13.0 on a 2-core host). NVRTC compiles the same
text in the calling process with no implicit headers: about 0.02 s and 0.21 s there. The
library is found through ctypes, without importing anything CUDA's: the toolkit's
(``CUDA_HOME``, ``CUDA_PATH``, beside the ``nvcc`` on PATH), the system's, or the
nvidia-cuda-nvrtc wheel's. Its builtins library is loaded first from the same folder,
since libnvrtc looks for it by name only. Headers a module includes (cuda_fp16.h,
cuda_bf16.h) come from the ``include`` folder beside the library's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys
import threading
from pathlib import Path


class NvrtcUnavailable(RuntimeError):
    """No libnvrtc could be loaded."""


class NvrtcCompileError(RuntimeError):
    """NVRTC rejected a source: ``log`` is its program log, whose errors name the source
    as ``module.cu(LINE): error``, as nvcc's do."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


#: The name NVRTC gives the compiled text in its messages.
SOURCE_NAME = "module.cu"


def _candidate_folders():
    """Folders that may hold libnvrtc, most specific first."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(variable)
        if root:
            yield Path(root) / "lib64"
            yield Path(root) / "lib"
    nvcc = shutil.which("nvcc")
    if nvcc:
        root = Path(nvcc).resolve().parent.parent
        yield root / "lib64"
        yield root / "lib"
    for entry in sys.path:  # the nvidia-cuda-nvrtc wheels (CUDA 13: nvidia/cu13/lib)
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            yield from sorted(nvidia.glob("*/lib"), reverse=True)


def _load():
    """(library, include folder or None); raises NvrtcUnavailable."""
    for folder in _candidate_folders():
        names = sorted(folder.glob("libnvrtc.so*"), key=lambda p: len(p.name)) \
            if folder.is_dir() else []
        for path in names:
            if ".alt." in path.name:
                continue
            for builtins in sorted(folder.glob("libnvrtc-builtins.so*")):
                if ".alt." not in builtins.name:
                    ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                    break
            include = folder.parent / "include"
            return ctypes.CDLL(str(path)), include if include.is_dir() else None
    found = ctypes.util.find_library("nvrtc")
    if found:
        return ctypes.CDLL(found), None
    raise NvrtcUnavailable("SCANGEN_COMPILER=nvrtc, but no libnvrtc was found: set CUDA_HOME "
                           "to the CUDA toolkit, install the nvidia-cuda-nvrtc wheel, or unset "
                           "SCANGEN_COMPILER to compile with nvcc")


_library = None
_lock = threading.Lock()


def _nvrtc():
    global _library
    with _lock:
        if _library is None:
            _library = _load()
        return _library


def version() -> str:
    """NVRTC's version, as "nvrtc MAJOR.MINOR" (part of a cubin's cache key)."""
    lib, _ = _nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return f"nvrtc {major.value}.{minor.value}"


def compile_cubin(text: str, arch: str) -> bytes:
    """The cubin of the CUDA C++ ``text`` for ``arch`` ("sm_90"), as nvcc -cubin makes it
    (entry points as the text declares them: scangen's are ``extern "C"``); raises
    NvrtcCompileError with NVRTC's log where the text does not compile."""
    lib, include = _nvrtc()
    program = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(program), text.encode(),
                                       SOURCE_NAME.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode()]
        if include is not None:
            options.append(f"--include-path={include}".encode())
        result = lib.nvrtcCompileProgram(program, len(options),
                                         (ctypes.c_char_p * len(options))(*options))
        if result != 0:
            raise NvrtcCompileError(_log(lib, program))
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def _log(lib, program) -> str:
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    return log.value.decode(errors="replace")


def _check(lib, result: int, call: str) -> None:
    if result != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{call} failed: {lib.nvrtcGetErrorString(result).decode()}")
