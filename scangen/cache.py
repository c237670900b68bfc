"""scangen's files in the user's cache directory (platformdirs, or ``SCANGEN_CACHE_DIR``):
the tuning tables ``python -m scangen tune`` measures and the compiled kernels (cubins)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs


def cache_dir(kind: str) -> Path:
    """The folder of one kind of file ("tuning", "cubin"), not created here."""
    root = os.environ.get("SCANGEN_CACHE_DIR") or platformdirs.user_cache_dir("scangen")
    return Path(root) / kind


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file renamed over it, so a process reading the
    cache at the same time sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
