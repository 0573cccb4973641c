"""Hand-built ONNX models for the op_coverage tests (onnx.helper only, no downloads)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = helper.make_node
F = TensorProto.FLOAT


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def nested_control_flow() -> onnx.ModelProto:
    """If → (Loop → body with Scan) in the then-branch; a local function; a com.microsoft op."""
    scan_body = helper.make_graph(
        [N("Add", ["s_state", "s_in"], ["s_next"]), N("Identity", ["s_next"], ["s_out"])], "scan_body",
        [vi("s_state", F, [4]), vi("s_in", F, [4])], [vi("s_next", F, [4]), vi("s_out", F, [4])])
    loop_body = helper.make_graph(
        [N("Scan", ["carry", "seq"], ["carry_out", "scan_out"], num_scan_inputs=1, body=scan_body),
         N("Identity", ["cond_in"], ["cond_out"])], "loop_body",
        [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("carry", F, [4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("carry_out", F, [4])])
    then_g = helper.make_graph(
        [N("Loop", ["trip", "", "x"], ["loop_out"], body=loop_body, name="the_loop"),
         N("Relu", ["loop_out"], ["then_out"])], "then", [], [vi("then_out", F, [4])])
    else_g = helper.make_graph([N("Neg", ["x"], ["else_out"])], "else", [], [vi("else_out", F, [4])])
    nodes = [
        N("If", ["flag"], ["branch"], then_branch=then_g, else_branch=else_g, name="top_if"),
        N("Twice", ["branch"], ["doubled"], domain="custom.local"),
        N("FastGelu", ["doubled"], ["y"], domain="com.microsoft"),
    ]
    fn = helper.make_function("custom.local", "Twice", ["A"], ["B"], [N("Add", ["A", "A"], ["B"])],
                              opset_imports=[helper.make_opsetid("", 17)])
    g = helper.make_graph(
        nodes, "nested",
        [vi("flag", TensorProto.BOOL, []), vi("x", F, [4]), vi("trip", TensorProto.INT64, []),
         vi("seq", F, [3, 4])], [vi("y", F, [4])])
    m = helper.make_model(g, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("custom.local", 1), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


def with_external(tmp: Path, *, location="weights.bin", dims=(64, 64), write_data=True, name="m.onnx") -> Path:
    """MatMul with one external-data weight; the data file is sparse (never written byte by byte)."""
    w = onnx.TensorProto(name="W", data_type=F, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    nbytes = int(np.prod(dims)) * 4
    for k, v in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        w.external_data.add(key=k, value=v)
    g = helper.make_graph([N("MatMul", ["x", "W"], ["y"], name="mm")], "ext",
                          [vi("x", F, [1, dims[0]])], [vi("y", F, [1, dims[-1]])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    path = tmp / name
    path.write_bytes(m.SerializeToString())
    if write_data and not os.path.isabs(location) and ".." not in location:
        with open(tmp / location, "wb") as fh:
            fh.truncate(nbytes)  # sparse: costs no disk and no time
    return path


def embedded(tmp: Path, mbytes: int, name="big.onnx", tensors: int = 1) -> Path:
    """A model whose weights (``mbytes`` MiB of float32) are embedded in the .onnx file.

    ``tensors=1``: one Gemm with one large weight.  ``tensors=k``: a chain of ``k`` MatMuls,
    each with a square weight of ``mbytes / k`` MiB (the shape of a real network: many weight
    headers spread through the file).
    """
    if tensors == 1:
        n = mbytes * 1024 * 1024 // 4
        rows = n // 1024
        w = numpy_helper.from_array(np.ones((rows, 1024), np.float32), "W")
        b = numpy_helper.from_array(np.zeros((1024,), np.float32), "B")
        g = helper.make_graph([N("Gemm", ["x", "W", "B"], ["y"], transB=1, name="fc")], "big",
                              [vi("x", F, [1, 1024])], [vi("y", F, [1, rows])], [w, b])
    else:
        side = int((mbytes * 1024 * 1024 // 4 // tensors) ** 0.5)
        weight = np.ones((side, side), np.float32).tobytes()
        inits = [helper.make_tensor(f"W{i}", F, [side, side], weight, raw=True) for i in range(tensors)]
        nodes = [N("MatMul", ["x" if i == 0 else f"h{i}", f"W{i}"], [f"h{i + 1}" if i < tensors - 1 else "y"],
                   name=f"mm{i}") for i in range(tensors)]
        g = helper.make_graph(nodes, "big", [vi("x", F, [1, side])], [vi("y", F, [1, side])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp / name
    with open(path, "wb") as fh:
        fh.write(m.SerializeToString())
    return path


def count_nodes_with_onnx(model: onnx.ModelProto) -> dict:
    """Independent count: walk with onnx's own API (every graph attribute, every function)."""
    from collections import Counter
    c: Counter = Counter()

    def walk(graph):
        for node in graph.node:
            c[(node.domain or "ai.onnx", node.op_type)] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for sub in attr.graphs:
                        walk(sub)

    walk(model.graph)
    for f in model.functions:
        walk(f)
    return dict(c)


def _len_field(num: int, payload: bytes) -> bytes:
    from op_coverage.onnx.wire import _encode_varint
    return _encode_varint(num << 3 | 2) + _encode_varint(len(payload)) + payload


def if_nest_bytes(depth: int) -> bytes:
    """A model whose main graph is *depth* unnamed If nodes, each in the then-branch of the last.

    Written as protobuf bytes directly: Python protobuf refuses to build (or copy) messages nested
    this deeply, and that is exactly what the test needs to hand the scan.
    """
    inner = helper.make_graph([N("Identity", ["x"], ["y0"])], "g0", [], [vi("y0", F, [1])]).SerializeToString()
    for i in range(1, depth):
        els = helper.make_graph([N("Identity", ["x"], [f"e{i}"])], f"e{i}", [], [vi(f"e{i}", F, [1])])
        node = N("If", ["c"], [f"y{i}"], else_branch=els)
        then = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH).SerializeToString()
        g = onnx.GraphProto(name=f"g{i}")
        g.output.append(vi(f"y{i}", F, [1]))
        if i == depth - 1:
            g.input.extend([vi("c", TensorProto.BOOL, []), vi("x", F, [1])])
        inner = g.SerializeToString() + _len_field(1, node.SerializeToString() + _len_field(5, then + _len_field(6, inner)))
    m = helper.make_model(onnx.GraphProto(name="tmp"), opset_imports=[helper.make_opsetid("", 17)])
    m.ClearField("graph")
    return m.SerializeToString() + _len_field(7, inner)
