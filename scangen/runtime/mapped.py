"""Words a kernel writes straight into page-locked host memory mapped into the device's
address space: a compaction's count, a segmented scan's verdict on its offsets. Reading one
takes a wait for the work that writes it and no copy: a synchronous copy of a few bytes from
device memory costs microseconds a call, which small calls pay in full."""
from __future__ import annotations

import threading

import numpy as np

from .contexts import context_key
from .gpu import require_pycuda


class MappedWord:
    """One int64 in mapped page-locked memory (portable: every context may write it).
    ``host`` is its numpy view, ``ptr`` its device address; ``size`` makes it bindable as a
    one-element buffer (scangen.modules.address_of)."""

    size = 1

    def __init__(self):
        driver = require_pycuda()
        flags = driver.host_alloc_flags.DEVICEMAP | driver.host_alloc_flags.PORTABLE
        self.host = driver.pagelocked_empty(1, np.int64, mem_flags=flags)
        self.ptr = self.host.base.get_device_pointer()

    @property
    def value(self) -> int:
        return int(self.host[0])

    @value.setter
    def value(self, value: int) -> None:
        self.host[0] = value


class ThreadWords:
    """A MappedWord per calling thread and context. A call that writes a word and reads it
    before it returns takes turns with the calling thread's other calls; a call from
    another thread (the one-shot functions share their objects) has its own, and so has
    another context (PyCUDA frees the memory in the one it was made in)."""

    def __init__(self):
        self._words = {}  # (thread ident, runtime.contexts.context_key) -> MappedWord

    def get(self) -> MappedWord:
        """The calling thread's word in the current context."""
        key = (threading.get_ident(), *context_key())
        word = self._words.get(key)
        if word is None:
            word = self._words[key] = MappedWord()
        return word

    def clear(self) -> None:
        self._words.clear()
