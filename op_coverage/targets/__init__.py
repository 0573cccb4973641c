"""Targets: what a runtime or device runs, per (domain, op, opset, dtypes), and where that fact comes from.

``profile`` (the data and its judge) · ``catalog`` (which targets exist: bundled files,
plugins, user files, ``ort-live``) · ``ort_live`` / ``ort_live_cache`` (ask the installed
onnxruntime) · ``lacking`` (a profile minus some ops) · ``agreement`` (a table profile
against onnxruntime itself).
"""
from op_coverage.targets.catalog import TargetSet, load_targets, split_profile_files
from op_coverage.targets.profile import SupportProfile, Verdict

__all__ = ["SupportProfile", "TargetSet", "Verdict", "load_targets", "split_profile_files"]
