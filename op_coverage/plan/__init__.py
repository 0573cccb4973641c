"""Planning replacements: for each node a target lacks, the cheapest composition of ops it runs.

``planner`` (search over candidates) · ``function_rules`` (onnx's function bodies as
rules) · ``rules/`` (the project's decompositions, an explicit registry) · ``apply``
(replace in memory, subgraphs and functions too) · ``fold`` (constant casts the
replacements bring in) · ``node_suite`` (every decomposition against ONNX's node tests).
"""
__all__ = ["NodePlan", "Planner"]


def __getattr__(name):
    # the planner imports every rule: only when it is asked for (``op_coverage conformance``'s parser
    # imports node_suite from this package on every command line, a scan that needs no plan included)
    if name in __all__:
        from op_coverage.plan import planner
        return getattr(planner, name)
    raise AttributeError(f"module 'op_coverage.plan' has no attribute {name!r}")
