import os

import numpy as np
import pytest


@pytest.fixture(scope="session")
def torch():
    """PyTorch for oracle tests; with ATTNX_REQUIRE_TORCH=1 its absence is a failure."""
    try:
        import torch as _torch
    except ImportError:
        if os.environ.get("ATTNX_REQUIRE_TORCH") == "1":
            pytest.fail("ATTNX_REQUIRE_TORCH=1 but torch does not import")
        pytest.skip("torch is not installed")
    # no torch.set_num_threads here: torch shares the OpenMP runtime with attnx's kernels,
    # and a count of 1 set through torch would silently serialise every threaded test
    return _torch


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def rel_err(a, b, floor=1e-300):
    """max |a - b| / max |b| (a scale-aware relative error); `floor` bounds the
    denominator for arrays that are zero in exact arithmetic."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), floor))


def load_script(name, path):
    """A script of benchmarks/ as a module under `name` (registered in sys.modules,
    where dataclasses look their module up); its module level must import only the
    standard library."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
