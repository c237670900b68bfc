"""PyCUDA, imported when a GPU is first needed, and what scangen asks of the current device.

Nothing imports pycuda at ``import scangen``: spec, plan, render and the CLI work on any
machine, and the first step that needs a GPU raises GPUUnavailableError saying what is
missing.
"""
from __future__ import annotations

from ..spec import shared_memory_refusal


class GPUUnavailableError(RuntimeError):
    """PyCUDA or a CUDA device is missing; the message says how to get it."""


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


_gpuarray_module = None


def gpuarray():
    """pycuda.gpuarray, imported once (per-call imports cost microseconds on small scans)."""
    global _gpuarray_module
    if _gpuarray_module is None:
        require_pycuda()
        from pycuda import gpuarray as module

        _gpuarray_module = module
    return _gpuarray_module


def multiprocessors() -> int:
    """Multiprocessors of the current context's device."""
    driver = require_pycuda()
    device = driver.Context.get_device()
    return device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)


def resident_grid(scan_module) -> int:
    """Blocks of a persistent tile kernel: as many as the current device holds at once under
    the kernel's register bound (Tuning.tile_min_threads_per_sm). More would only wait for a
    free multiprocessor; fewer, where shared memory holds fewer, is still correct (tickets
    go to running blocks only)."""
    spec = scan_module.scan
    return multiprocessors() * \
        spec.tuning.at(spec.acc_itemsize).tile_min_blocks_per_sm(spec.block_size)


def wave_grid(tiles: int, blocks_per_sm: int) -> int:
    """Blocks of a grid-stride kernel over ``tiles`` tiles: one per tile, at most one wave
    of ``blocks_per_sm`` blocks on every multiprocessor of the current device."""
    return min(tiles, multiprocessors() * blocks_per_sm)


def check_shared_memory(scan_module) -> None:
    """Refuse, before compiling, a spec that needs more shared memory than a block of the
    current device may opt in to: make_spec checked it against scangen.tuning.DEFAULT_ARCH,
    and a device of another architecture may offer less (MAX_SHARED_BYTES_OPTIN)."""
    spec = scan_module.scan
    if not spec.dynamic_shared:
        return
    driver = require_pycuda()
    device = driver.Context.get_device()
    limit = device.get_attribute(driver.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    if spec.shared_bytes > limit:
        major, minor = device.compute_capability()
        raise ValueError(shared_memory_refusal(spec, limit,
                                               f"{device.name()} (sm_{major}{minor})"))
