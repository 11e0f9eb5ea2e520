"""Tests of attnx.plot."""
