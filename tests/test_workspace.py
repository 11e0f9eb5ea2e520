"""WorkspaceCache: a locked LRU of buffers."""
import threading
import time

from attnx._workspace import _MAX_ENTRIES, WorkspaceCache


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


def test_other_shapes_are_dropped_when_the_shape_changes():
    cache = WorkspaceCache()
    cache.get((2, 8, 4, "a"), True, object)
    cache.get((3, 8, 4, "a"), True, object)
    assert (2, 8, 4, "a") not in cache and len(cache) == 1


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
