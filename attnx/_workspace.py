"""Workspace caches: buffers reused across steps, one set per shape signature.

Training buffers (what backward needs) are shared by the model. Inference
buffers are kept per Python thread, so several threads can call predict on one
fitted model at once: the kernels release the GIL and each call writes only
its own thread's scratch.
"""
import os
import threading

import numpy as np

_MAX_ENTRIES = 16


def physical_memory():
    """Bytes of RAM on this machine, or None when the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_size(nbytes, what):
    """MemoryError before allocating more than the machine's RAM (instead of the OOM killer)."""
    ram = physical_memory()
    if ram is not None and nbytes > ram:
        raise MemoryError(
            f"{what} needs {nbytes / 2**30:.1f} GiB of buffers, more than this machine's "
            f"{ram / 2**30:.1f} GiB of RAM: use a smaller batch or sequence length "
            "(or attention='blocked', whose memory is linear in the sequence length)")


class WorkspaceCache:
    """key -> buffers; `shape` (the leading key fields) changing drops other shapes."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items = {}

    def get(self, key, store, make):
        if not store:
            key = key + (threading.get_ident(),)
        item = self._items.get(key)
        if item is None:
            item = make()
            with self._lock:
                items = {k: v for k, v in self._items.items() if k[:3] == key[:3]}
                if len(items) >= _MAX_ENTRIES:
                    items = {}
                items[key] = item
                self._items = items
        return item

    def clear(self):
        with self._lock:
            self._items = {}


def nbytes_of(dtype, *counts):
    return int(sum(counts)) * np.dtype(dtype).itemsize
