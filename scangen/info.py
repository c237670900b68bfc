"""``python -m scangen info``: what scangen sees on this machine, for a bug report or to
learn which tuning table a process would use: the versions of scangen, Python and the array
libraries, nvcc, the GPU (and how its name was found), the tuning table and the cache.

Nothing here needs a GPU; naming the GPU may initialise the CUDA driver (scangen.devices)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from . import __version__, devices, tuning
from .cache import cache_dir

#: The optional packages scangen works with, by the name they are imported under.
OPTIONAL = ("pycuda", "cupy", "torch", "dask", "distributed", "ml_dtypes", "platformdirs")


def package_version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module`` (cupy's is named
    cupy-cuda12x, for one), without importing it; None where it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    for distribution in importlib.metadata.packages_distributions().get(module, [module]):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed, version unknown"


def nvcc_release() -> str:
    """nvcc's path and release, or why there is none."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "not on PATH (scangen runs it to compile kernels; no GPU needs it for source)"
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return f"{nvcc} (does not run: {err})"
    release = re.search(r"release ([0-9.]+)", text)
    return f"{nvcc} (release {release.group(1) if release else 'unknown'})"


def gpu() -> str:
    """Device 0's name and where it came from."""
    listed = devices.listed_model()
    if listed is not None:
        return f"{listed} (from the driver's listing of GPUs; CUDA not initialised)"
    name = devices.name_from_driver(0)  # the listing could not tell: ask the driver
    if name is not None:
        return f"{name} (from the CUDA driver)"
    return "none seen (no NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES hides them all)"


def _files(folder: Path, pattern: str) -> tuple[int, int]:
    """How many files of ``pattern`` ``folder`` holds, and their bytes."""
    try:
        sizes = [path.stat().st_size for path in folder.glob(pattern)]
    except OSError:
        return 0, 0
    return len(sizes), sum(sizes)


def cache() -> str:
    """The cache folder and what it holds."""
    cubins, cubin_bytes = _files(cache_dir("cubin"), "*.cubin")
    tables, _ = _files(tuning.user_tables(), "*.json")
    return (f"{cache_dir('cubin').parent} (compiled modules: {cubins}, "
            f"{cubin_bytes / 2**20:.1f} MiB; tuning tables of your own: {tables})")


def report() -> list[tuple[str, str]]:
    """``(what, value)`` rows, in the order ``info`` prints them."""
    rows = [("scangen", f"{__version__} ({Path(__file__).resolve().parent})"),
            ("python", sys.version.split()[0]),
            ("numpy", np.__version__)]
    rows += [(module, package_version(module) or "not installed") for module in OPTIONAL]
    rows += [("nvcc", nvcc_release()),
             ("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "not set")),
             ("GPU 0", gpu()),
             ("tuning table", tuning.active_scan_table()[1]),
             ("cache", cache())]
    return rows


def main() -> int:
    rows = report()
    width = max(len(what) for what, _ in rows)
    for what, value in rows:
        print(f"{what:<{width}}  {value}")
    return 0
