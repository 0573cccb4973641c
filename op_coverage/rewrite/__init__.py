"""``op_coverage rewrite``: apply the plan to a model file, check it, verify it in onnxruntime, write, rescan.

``pipeline`` (the library call) · ``verify`` (original against rewritten, per output, with
dtype-aware tolerances).  The in-memory transform is :func:`op_coverage.plan.apply.rewrite_model`.

The names below are imported on first use, so that ``op_coverage.rewrite.verify`` (which
``op_coverage quantize`` uses) does not bring in the planner and its rules.
"""
import importlib

#: public name -> the module that defines it
_WHERE = {"RewriteResult": "op_coverage.plan.apply", "rewrite_model": "op_coverage.plan.apply",
          "RewriteReport": "op_coverage.rewrite.pipeline", "rewrite": "op_coverage.rewrite.pipeline",
          "save_checked": "op_coverage.rewrite.pipeline"}

__all__ = ["RewriteReport", "RewriteResult", "rewrite", "rewrite_model", "save_checked"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'op_coverage.rewrite' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
