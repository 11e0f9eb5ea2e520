"""attnx's version (a leaf module: io, onnx and the package root read it)."""
__version__ = "0.1.0"
