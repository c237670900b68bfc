"""Scan-based primitives, each a short composition of generated kernels: compaction
(select, remove_if), partition, unique and run-length encoding (one ScanKernel each); radix
digit offsets, radix sort and argsort (tile digit counts, a ScanKernel over them, a stable
scatter); equal-width histograms; flatnonzero (one ScanKernel).

Every module of this package is imported here and its ``__all__`` re-exported (and by
scangen): a primitive's module is the one place its public names are listed
(scangen.primitives.registry)."""
import importlib as _importlib
import pkgutil as _pkgutil

__all__ = []
for _found in _pkgutil.iter_modules(__path__):
    _module = _importlib.import_module(f"{__name__}.{_found.name}")
    # (the function histogram then hides the module of that name, as an import of it did)
    for _name in getattr(_module, "__all__", ()):
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
