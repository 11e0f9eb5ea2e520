"""Tests of attnx.datasets."""
