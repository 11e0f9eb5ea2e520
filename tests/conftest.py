"""Fixtures for every test folder. The shared helper modules are in tests/helpers/ (put on
sys.path by pyproject's pytest `pythonpath`); the test files are imported by their path
(--import-mode=importlib), never through sys.path, so two folders may hold files of one name."""
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

