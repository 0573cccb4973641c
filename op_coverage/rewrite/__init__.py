"""``op_coverage rewrite``: apply the plan to a model file, check it, verify it in onnxruntime, write, rescan.

``pipeline`` (the library call) · ``verify`` (original against rewritten, per output, with
dtype-aware tolerances).  The in-memory transform is :func:`op_coverage.plan.apply.rewrite_model`.
"""
from op_coverage.plan.apply import RewriteResult, rewrite_model
from op_coverage.rewrite.pipeline import RewriteReport, rewrite, save_checked

__all__ = ["RewriteReport", "RewriteResult", "rewrite", "rewrite_model", "save_checked"]
