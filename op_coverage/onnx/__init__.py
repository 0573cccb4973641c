"""The ONNX model as op_coverage reads it: bytes without weights, every node, what is known of its values.

``wire`` (protobuf without tensor payloads) → ``load`` (safe external-data paths, opsets) →
``inventory`` (every node, subgraphs and functions included); ``walk`` finds every graph of a
model with its path, for the inventory and the passes after it; ``values``, ``builder`` and
``functions`` (types of a scope, building nodes, onnx's own function bodies) are what the
planner and the profiles work with; ``node_tests`` lists ONNX's backend node test cases.
"""
