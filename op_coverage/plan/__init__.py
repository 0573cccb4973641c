"""Planning replacements: for each node a target lacks, the cheapest composition of ops it runs.

``planner`` (search over candidates) · ``function_rules`` (onnx's function bodies as
rules) · ``rules/`` (the project's decompositions, an explicit registry) · ``apply``
(replace in memory, subgraphs and functions too) · ``fold`` (constant casts the
replacements bring in) · ``node_suite`` (every decomposition against ONNX's node tests).
"""
from op_coverage.plan.planner import NodePlan, Planner

__all__ = ["NodePlan", "Planner"]
