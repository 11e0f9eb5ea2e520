"""WorkspaceCache: a locked LRU of buffers."""
import threading
import time

from attnx.runtime._workspace import _MAX_ENTRIES, KEEP_OTHER_BYTES, WorkspaceCache


def test_least_recently_used_entry_is_evicted_not_every_entry():
    cache = WorkspaceCache()
    keys = [(2, 8, 4, i) for i in range(_MAX_ENTRIES)]
    for k in keys:
        cache.get(k, True, object)
    first = cache.get(keys[0], True, object)  # now the most recently used
    cache.get((2, 8, 4, "new"), True, object)
    assert len(cache) == _MAX_ENTRIES
    assert keys[0] in cache and cache.get(keys[0], True, object) is first
    assert keys[1] not in cache  # the least recently used went
    assert (2, 8, 4, "new") in cache


class _Sized:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def test_unsized_entries_of_other_shapes_are_dropped_when_the_shape_changes():
    cache = WorkspaceCache()
    cache.get((2, 8, 4, "a"), True, object)
    cache.get((3, 8, 4, "a"), True, object)
    assert (2, 8, 4, "a") not in cache and len(cache) == 1


def test_other_shapes_stay_within_the_byte_budget_least_recently_used_dropped():
    cache = WorkspaceCache()
    third = KEEP_OTHER_BYTES // 3
    for t in (5, 6, 7):
        cache.get((2, t, 4), True, lambda: _Sized(third))
    cache.get((2, 5, 4), True, object)    # t=5 is now the most recently used
    cache.get((2, 8, 4), True, lambda: _Sized(third))
    # other shapes than t=8 held 3 * third <= the budget: all kept
    assert len(cache) == 4
    cache.get((2, 9, 4), True, lambda: _Sized(third))
    # now 4 * third > the budget: the least recently used other shape (t=6) went
    assert (2, 6, 4) not in cache
    assert all((2, t, 4) in cache for t in (5, 7, 8, 9))
    cache.get((2, 10, 4), True, lambda: _Sized(2 * KEEP_OTHER_BYTES))
    assert len(cache) == 4   # the new one never counts against the budget
    cache.get((2, 11, 4), True, lambda: _Sized(1))
    assert (2, 10, 4) not in cache   # too large to keep beside another shape


def test_ragged_training_keeps_each_length_buffers():
    import numpy as np

    from attnx import SequenceModel
    m = SequenceModel(2, 8, 2, 2, 3, pooling="mean", norm="pre", random_state=0)
    dy = np.ones((2, 3), np.float32)
    made = {}
    for t in (4, 6, 4, 6):
        m.forward(np.ones((2, t, 2), np.float32))
        m.backward(dy)
        b = next(v for k, v in m._bufs._items.items() if k[1] == t)
        assert made.setdefault(t, b) is b   # the same buffers on the second visit
    assert {k[1] for k in m._bufs._items} == {4, 6}
    assert {k[1] for k in m.attn[0]._ws._items} == {4, 6}


def test_threads_asking_for_one_key_share_one_item():
    cache = WorkspaceCache()
    made = []

    def make():
        time.sleep(0.05)  # both threads miss before either inserts
        made.append(object())
        return made[-1]

    got = [None, None]

    def run(i):
        got[i] = cache.get((1, 2, 3), True, make)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0] is got[1] is cache.get((1, 2, 3), True, object)
    assert len(cache) == 1


def test_per_thread_entries_differ_between_threads():
    cache = WorkspaceCache()
    mine = cache.get((1, 2, 3), False, object)
    other = []
    t = threading.Thread(target=lambda: other.append(cache.get((1, 2, 3), False, object)))
    t.start()
    t.join()
    assert other[0] is not mine and cache.get((1, 2, 3), False, object) is mine
