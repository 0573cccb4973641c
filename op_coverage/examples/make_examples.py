"""Build the bundled example model ``tiny_block.onnx`` (run: python op_coverage/examples/make_examples.py).

A small transformer-like block, deterministic (fixed seed), about 70 KB: LayerNormalization,
MatMul attention with Softmax, a Gelu MLP (opset 20 Gelu, and the Erf form next to it), Gemm,
an If that picks a branch on a flag, a model-local function (RMS-style norm) and one
com.microsoft op (FusedMatMul), so a scan has something to say on every target.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, H = 32, 64


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name)

    inits = [w("ln_scale", D), w("ln_bias", D), w("Wq", D, D), w("Wk", D, D), w("Wv", D, D), w("Wo", D, D),
             w("W1", D, H), w("b1", H), w("W2", H, D), w("b2", D), w("Wg", D, D), w("rms_w", D),
             numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "scale"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(np.sqrt(0.5), np.float32), "inv_sqrt2"),
             numpy_helper.from_array(np.array([-1, D], np.int64), "flat_shape")]
    N = helper.make_node
    nodes = [
        N("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["ln"], name="ln_in", axis=-1, epsilon=1e-5),
        N("MatMul", ["ln", "Wq"], ["q"], name="attn_q"),
        N("MatMul", ["ln", "Wk"], ["k"], name="attn_k"),
        N("MatMul", ["ln", "Wv"], ["v"], name="attn_v"),
        N("Transpose", ["k"], ["kt"], name="attn_kt", perm=[0, 2, 1]),
        N("MatMul", ["q", "kt"], ["scores_raw"], name="attn_scores"),
        N("Mul", ["scores_raw", "scale"], ["scores"], name="attn_scale"),
        N("Softmax", ["scores"], ["probs"], name="attn_softmax", axis=-1),
        N("MatMul", ["probs", "v"], ["ctx"], name="attn_ctx"),
        N("MatMul", ["ctx", "Wo"], ["attn_out"], name="attn_out"),
        N("Add", ["x", "attn_out"], ["h"], name="residual_1"),
        N("Reshape", ["h", "flat_shape"], ["h2d"], name="flatten_tokens"),
        N("Gemm", ["h2d", "W1", "b1"], ["ff1"], name="mlp_up"),
        N("Gelu", ["ff1"], ["act_gelu"], name="mlp_gelu"),
        # the same activation written with Erf, as older exporters emit it
        N("Mul", ["ff1", "inv_sqrt2"], ["e0"], name="gelu_erf_scale"),
        N("Erf", ["e0"], ["e1"], name="gelu_erf"),
        N("Add", ["e1", "one"], ["e2"], name="gelu_erf_add"),
        N("Mul", ["ff1", "e2"], ["e3"], name="gelu_erf_mul"),
        N("Mul", ["e3", "half"], ["act_erf"], name="gelu_erf_half"),
        N("Add", ["act_gelu", "act_erf"], ["act2"], name="mlp_sum"),
        N("Mul", ["act2", "half"], ["act"], name="mlp_avg"),
        N("Gemm", ["act", "W2", "b2"], ["ff2"], name="mlp_down"),
        N("FusedMatMul", ["ff2", "Wg"], ["gated"], name="contrib_fused_matmul", domain="com.microsoft", alpha=1.0),
        N("RmsNorm", ["gated", "rms_w"], ["normed"], name="local_rmsnorm", domain="local"),
        N("If", ["use_tanh"], ["y"], name="pick_activation",
          then_branch=helper.make_graph([N("Tanh", ["normed"], ["t_out"], name="then_tanh")], "then", [],
                                        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["n", D])]),
          else_branch=helper.make_graph([N("Relu", ["normed"], ["e_out"], name="else_relu")], "else", [],
                                        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["n", D])])),
    ]
    rms = helper.make_function(
        "local", "RmsNorm", ["X", "W"], ["Y"],
        [N("Mul", ["X", "X"], ["sq"]), N("Constant", [], ["axes"], value_ints=[-1]),
         N("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
         N("Sqrt", ["ms"], ["rms"]), N("Div", ["X", "rms"], ["xn"]), N("Mul", ["xn", "W"], ["Y"])],
        opset_imports=[helper.make_opsetid("", 20)])
    graph = helper.make_graph(
        nodes, "tiny_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", D]),
         helper.make_tensor_value_info("use_tanh", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", D])], inits)
    model = helper.make_model(graph, functions=[rms], producer_name="op_coverage.examples",
                              opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1),
                                             helper.make_opsetid("local", 1)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def main() -> None:
    out = Path(__file__).resolve().parent / "tiny_block.onnx"
    onnx.save(build(), out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
