"""Workspace caches: buffers reused across steps, one set per shape signature.

Training buffers (what backward needs) are shared by the model. Inference
buffers are kept per Python thread, so several threads can call predict on one
fitted model at once: the kernels release the GIL and each call writes only
its own thread's scratch.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    import numpy.typing as npt

    _T = TypeVar("_T")

_MAX_ENTRIES = 16
# bytes the entries of shapes other than the newest may hold: ragged training visits
# a batch shape per length bucket over and over, and rebuilding its buffers (and the
# compiled blocks over them) each time cost ~10% of a fit; an inference over many
# lengths keeps at most this much besides its current shape
KEEP_OTHER_BYTES = 64 << 20


def physical_memory() -> int | None:
    """Bytes of RAM on this machine, or None when the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_size(nbytes: int, what: str) -> None:
    """MemoryError before allocating more than the machine's RAM (instead of the OOM killer)."""
    ram = physical_memory()
    if ram is not None and nbytes > ram:
        raise MemoryError(
            f"{what} needs {nbytes / 2**30:.1f} GiB of buffers, more than this machine's "
            f"{ram / 2**30:.1f} GiB of RAM: use a smaller batch or sequence length "
            "(or attention='blocked', whose memory is linear in the sequence length)")


def held_bytes(item: object) -> int | None:
    """The bytes an entry holds (its `nbytes`), None when it does not say."""
    n = getattr(item, "nbytes", None)
    return n if isinstance(n, int) else None


class WorkspaceCache:
    """key -> buffers, a locked LRU of at most _MAX_ENTRIES entries. Entries of other
    shapes than the newest (`shape`: the leading key fields) stay while they hold at
    most KEEP_OTHER_BYTES together (least recently used dropped first); an entry that
    does not say its size (`nbytes`) goes as soon as the shape changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # values: whatever the owner's `make` builds (one kind of buffers per owner);
        # ordered from least to most recently used
        self._items: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def get(self, key: tuple[Any, ...], store: bool, make: Callable[[], _T]) -> _T:
        """The buffers for `key` (made by `make` when missing); per Python thread
        unless `store`. Threads asking for one missing key at once all get the
        buffers of the first one to finish `make` (make runs outside the lock)."""
        if not store:
            key = key + (threading.get_ident(),)
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return cast("_T", item)
        made = make()
        with self._lock:
            item = self._items.get(key)
            if item is not None:  # another thread made it meanwhile
                self._items.move_to_end(key)
                return cast("_T", item)
            self._drop_other_shapes(key[:3])
            while len(self._items) >= _MAX_ENTRIES:
                self._items.popitem(last=False)  # the least recently used
            self._items[key] = made
        return made

    def _drop_other_shapes(self, shape: tuple[Any, ...]) -> None:
        """Drop other shapes' entries, least recently used first, until they hold at
        most KEEP_OTHER_BYTES (under the lock)."""
        others = [(k, held_bytes(v)) for k, v in self._items.items() if k[:3] != shape]
        held = sum(n for _, n in others if n is not None)
        for k, n in others:
            if n is None:
                del self._items[k]
        for k, n in others:
            if held <= KEEP_OTHER_BYTES:
                break
            if n is not None:
                del self._items[k]
                held -= n

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def nbytes_of(dtype: npt.DTypeLike, *counts: int) -> int:
    return int(sum(counts)) * np.dtype(dtype).itemsize
