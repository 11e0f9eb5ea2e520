"""Tests of attnx.layers."""
