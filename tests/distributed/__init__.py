"""Tests of attnx.distributed (fits over MPI ranks) and of fits over Dask's worker processes."""
