"""Helpers for checking attnx against other implementations: torch_twin (the network of
attnx.SequenceModel in PyTorch). Importing attnx.testing or attnx.testing.torch_twin does not
import torch; using the twin does (pip install torch)."""
