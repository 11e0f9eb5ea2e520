"""Helpers for checking attnx against other implementations: torch_twin (the network of
attnx.SequenceModel in PyTorch), reference_pass (SequenceModel's forward and backward one
kernel call per stage, the reference its compiled pass is tested against) and
numpy_kernels (its row kernels in NumPy). Importing attnx.testing or any of them does not
import torch; using the twin does (pip install torch)."""
