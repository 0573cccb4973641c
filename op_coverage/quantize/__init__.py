"""``op_coverage quantize``: INT8 a target runs, with the size, latency and accuracy it costs.

``pipeline`` (the library call: quantize, check, measure, gate, write, rescan) · ``choice``
(format and op types, judged by the target's profile) · ``ort`` (the onnxruntime.quantization
calls) · ``calibration`` (inputs for static INT8) · ``metrics`` (size, latency, accuracy).
"""
from op_coverage.quantize.pipeline import Gates, QuantizeReport, quantize

__all__ = ["Gates", "QuantizeReport", "quantize"]
