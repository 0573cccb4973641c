"""op_coverage: which ONNX operators a target lacks, and how to replace them."""
__version__ = "0.1.0"
