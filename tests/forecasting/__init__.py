"""Tests of attnx.forecasting."""
