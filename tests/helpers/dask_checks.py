"""What the Dask tests share: a dask import that skips (or, with ATTNX_REQUIRE_DASK=1,
fails), and the thread variables of a one-thread worker."""
import os

import pytest

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def require_dask(name):
    """The module `name` (dask, distributed, ...), or a skip; a failure when CI asks
    for the Dask tests to run."""
    try:
        return pytest.importorskip(name)
    except pytest.skip.Exception:
        if os.environ.get("ATTNX_REQUIRE_DASK") == "1":
            pytest.fail(f"ATTNX_REQUIRE_DASK=1 but {name} does not import "
                        f"(pip install 'attnx[dask]')")
        raise
