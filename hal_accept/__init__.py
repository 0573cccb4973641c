"""``hal accept``: the migration acceptance report -- one command, the user's own script, a reference
against one or more targets.

::

    from hal_accept import AcceptOptions, Target, accept
    report = accept(AcceptOptions("train.py", targets=(Target("emu", "musa-2.7"),), steps=10))
    report["verdict"], report["sections"]["numerics"]

It sits above ``op_coverage`` (its static scan, op trace and scan; for an ONNX export its scan, rewrite and
quantize steps) and ``hal`` (``hal run``,
``hal.metrics`` attached from outside, ``hal.fallback``'s host route); ``hal``'s command line finds it
through the ``hal.commands`` entry point.  docs/accept.md.
"""
from hal_accept.accept import SCHEMA, accept
from hal_accept.numerics import bisect_ops, compare
from hal_accept.options import AcceptOptions, AcceptUsageError, Target, parse_target
from hal_accept.report import terminal, to_html

__all__ = ["SCHEMA", "AcceptOptions", "AcceptUsageError", "Target", "accept", "bisect_ops", "compare",
           "parse_target", "terminal", "to_html"]
