"""``op_coverage quantize``: INT8 a target runs, with the size, latency and accuracy it costs.

The public API: :func:`quantize` (the library call behind the command), :class:`QuantizeOptions`
and :class:`Gates` (its knobs), :class:`QuantizeReport` (its ``--json`` document), and the steps
it runs, each callable alone (:mod:`~op_coverage.quantize.steps`): :func:`load`, :func:`make_feeds`,
:func:`choose`, :func:`check`, :func:`measure`, :func:`gate`, :func:`benchmark`, :func:`write`.

``options`` (the knobs, checked) · ``steps`` (the pipeline, step by step) · ``pipeline``
(:func:`quantize` and its report) · ``choice`` (format and op types, judged by the target's
profile) · ``ort`` (the onnxruntime.quantization calls) · ``calibration`` (inputs for static INT8)
· ``metrics`` (size, latency, accuracy) · ``baseline`` (onnxruntime's own default call) ·
``census`` (what a quantized model quantized, kept float, and its rescan).
"""
from op_coverage.quantize.options import Gates, QuantizeOptions
from op_coverage.quantize.pipeline import QuantizeReport, quantize
from op_coverage.quantize.steps import (Benchmark, Checked, Chosen, Feeds, Measurement, Source, Verdict, benchmark,
                                        check, choose, gate, load, make_feeds, measure, write)

__all__ = ["Benchmark", "Checked", "Chosen", "Feeds", "Gates", "Measurement", "QuantizeOptions", "QuantizeReport",
           "Source", "Verdict", "benchmark", "check", "choose", "gate", "load", "make_feeds", "measure", "quantize",
           "write"]
