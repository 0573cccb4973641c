"""hal: one PyTorch training script and one ONNX model across accelerators."""
__version__ = "0.1.0"
