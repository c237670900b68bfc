"""Which GPU this process sees, asked of the CUDA driver without making a context, so that
the tuning table for it can be chosen before anything runs (scangen.tuning.scan_table).

A leaf module: ctypes and the driver library only (no pycuda, nothing of scangen), since the
tuning tables it serves are read while specs are built. Everything else scangen asks of the
driver goes through pycuda or scangen.runtime.streams.
"""
from __future__ import annotations

import ctypes
import sys

#: CUDA_SUCCESS.
_SUCCESS = 0


def visible_device_name(ordinal: int = 0) -> str | None:
    """The name of device ``ordinal`` of those this process sees (CUDA_VISIBLE_DEVICES
    applies), as the driver reports it ("NVIDIA H200"); None where there is no driver, no
    such device, or the driver fails. Initialises the driver (cuInit), as a first launch
    would; makes no context."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(name)
    except OSError:
        return None
    device = ctypes.c_int()
    text = ctypes.create_string_buffer(256)
    if driver.cuInit(0) != _SUCCESS or \
            driver.cuDeviceGet(ctypes.byref(device), ordinal) != _SUCCESS or \
            driver.cuDeviceGetName(text, len(text), device) != _SUCCESS:
        return None
    return text.value.decode(errors="replace")
