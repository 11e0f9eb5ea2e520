"""Tests of the command line (attnx/__main__.py, `attnx forecast`)."""
