"""Which GPU this process sees, without making a context, so that the tuning table for it
can be chosen before anything runs (scangen.tuning.scan_table).

A leaf module: the standard library and the driver library only (no pycuda, nothing of
scangen), since the tuning tables it serves are read while specs are built. Everything else
scangen asks of the driver goes through pycuda or scangen.runtime.streams.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
from pathlib import Path

#: CUDA_SUCCESS.
_SUCCESS = 0

#: Where the Linux driver lists the machine's GPUs: a folder each, whose "information" file
#: names its model as the CUDA driver does ("Model:  NVIDIA H100 80GB HBM3").
PROC_GPUS = Path("/proc/driver/nvidia/gpus")


def visible_device_name(ordinal: int = 0) -> str | None:
    """The name of device ``ordinal`` of those this process sees (CUDA_VISIBLE_DEVICES
    applies), as the driver reports it ("NVIDIA H200"); None where there is no driver, no
    such device, or the driver fails. Read from the driver's listing where that answers
    (listed_model): a process that has not used CUDA yet may then fork safely. Otherwise
    asked of the driver, which initialises it (cuInit) as a first launch would; no context
    is made either way."""
    listed = listed_model(ordinal)
    return listed if listed is not None else name_from_driver(ordinal)


def listed_model(ordinal: int = 0, gpus: Path | None = None) -> str | None:
    """The model of device ``ordinal`` from the Linux driver's listing of GPUs, without
    initialising CUDA: only where that listing cannot be wrong about which device the
    process sees, that is where every GPU of the machine is one model, the process sees
    at least ``ordinal + 1`` of them and CUDA_VISIBLE_DEVICES names whole GPUs (a MIG
    instance is named otherwise). None where it cannot tell."""
    folder = PROC_GPUS if gpus is None else gpus
    try:
        listed = list(folder.iterdir())
        models = {_model_in(path / "information") for path in listed}
    except OSError:
        return None
    if len(models) != 1 or None in models:
        return None
    count = len(listed)
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is not None:
        entries = [entry.strip() for entry in setting.split(",")]
        # CUDA takes the entries up to the first it cannot read; leave those cases to it
        if not all(re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+", entry) for entry in entries):
            return None
        count = min(count, len(entries))
    return models.pop() if ordinal < count else None


def _model_in(information: Path) -> str | None:
    """The "Model:" line of one GPU's information file, or None."""
    match = re.search(r"^Model:\s*(.+?)\s*$", information.read_text(errors="replace"),
                      re.MULTILINE)
    return match.group(1) if match else None


def name_from_driver(ordinal: int) -> str | None:
    """The CUDA driver's name of device ``ordinal``, after cuInit; None where it fails."""
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
