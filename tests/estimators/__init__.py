"""Tests of attnx.estimators."""
