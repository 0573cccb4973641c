"""A small ONNX export for ``hal accept --onnx``, built with onnx.helper (a few ms): ``x[batch, 64]`` ->
MatMul -> Gelu -> MatMul -> ``y[batch, 10]``, opset 20.  Gelu is an op Moore Threads' and Ascend's ONNX
profiles lack (op_coverage rewrites it from Erf, Mul, Add, Div); the two MatMuls are what INT8 quantizes."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_with_gelu(path) -> str:
    """Write the model to ``path``; return it as a string."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 128)) / 8).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((128, 10)) / 11).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Gelu", ["h"], ["g"], name="act"),
             helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return str(path)
