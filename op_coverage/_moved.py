"""Old import paths of op_coverage modules (before it was split by concern), kept for one release.

``import op_coverage.profile`` still works, warning that it is now
:mod:`op_coverage.targets.profile`; see :mod:`hal.util.moved`.
"""
from hal.util.moved import install

#: old module -> where it lives now
MOVED = {
    "op_coverage.wire": "op_coverage.onnx.wire",
    "op_coverage.load": "op_coverage.onnx.load",
    "op_coverage.inventory": "op_coverage.onnx.inventory",
    "op_coverage.profile": "op_coverage.targets.profile",
    "op_coverage.probe_ort": "op_coverage.targets.ort_live",
    "op_coverage.probe_cache": "op_coverage.targets.ort_live_cache",
    "op_coverage.agreement": "op_coverage.targets.agreement",
    "op_coverage.lacking": "op_coverage.targets.lacking",
    "op_coverage.expand": "op_coverage.plan.function_rules",
    "op_coverage.fold": "op_coverage.plan.fold",
    "op_coverage.rules": "op_coverage.plan.rules",
    "op_coverage.conformance": "op_coverage.plan.node_suite",
    "op_coverage.verify": "op_coverage.rewrite.verify",
    "op_coverage.quant_calibration": "op_coverage.quantize.calibration",
    "op_coverage.quant_choice": "op_coverage.quantize.choice",
    "op_coverage.quant_measure": "op_coverage.quantize.metrics",
    "op_coverage.quant_ort": "op_coverage.quantize.ort",
    "op_coverage.torch_scan": "op_coverage.torch.scan",
    "op_coverage.torch_static": "op_coverage.torch.static",
    "op_coverage.torch_static_ast": "op_coverage.torch.static_ast",
    "op_coverage.torch_trace": "op_coverage.torch.trace",
    "op_coverage.torch_profiles": "hal.op_support.torch_profile",
    "op_coverage.torch_plan": "hal.op_support.torch_plan",
    "op_coverage.cli_rewrite": "op_coverage.cli.rewrite",
    "op_coverage.cli_quantize": "op_coverage.cli.quantize",
    "op_coverage.cli_torch": "op_coverage.cli.trace",
}


def install_moved() -> None:
    """Let the old paths import (with a DeprecationWarning naming the new one)."""
    install(MOVED)
