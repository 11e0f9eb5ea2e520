"""Tests of attnx.kernels."""
