"""Tests of attnx.runtime."""
