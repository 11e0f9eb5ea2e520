"""Tests of attnx.io: model files (save, load, format versions, damaged files) and ONNX export."""
