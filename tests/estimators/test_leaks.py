"""1000 fit/predict/save/load cycles keep the process's memory flat."""
import gc
import os

import numpy as np
import pytest

import attnx
from attnx.datasets import max_position_task


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_thousand_cycles_keep_memory_flat(tmp_path):
    X, Y = max_position_task(24, seq_len=5, d_model=4, random_state=0)
    path = tmp_path / "m.npz"

    def cycle(i):
        cls = attnx.AttentionRegressor if i % 2 else attnx.TransformerRegressor
        kw = {} if i % 2 else dict(n_layers=1, d_hidden=8)
        est = cls(n_heads=2, epochs=1, batch_size=8, random_state=i, **kw).fit(X, Y)
        est.predict(X)
        est.save(path)
        attnx.load(path).predict(X[:3])

    for i in range(100):          # warm-up: caches, allocator pools, lazy imports
        cycle(i)
    gc.collect()
    start = _rss_kib()
    for i in range(100, 1100):
        cycle(i)
    gc.collect()
    growth = _rss_kib() - start
    print(f"\n1000 cycles: RSS {start} KiB -> {start + growth} KiB (growth {growth} KiB)")
    assert growth < 4096, growth    # measured: a few hundred KiB at most
