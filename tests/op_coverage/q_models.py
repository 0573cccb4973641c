"""Small float32 models for the quantize tests, built with onnx.helper (no export, a few ms each).

* :func:`bert_like`: embeddings-free encoder layer (Q/K/V/O projections, softmax attention, LayerNorm,
  Erf-GELU feed-forward) and a pooled classifier head, batch and sequence dims symbolic;
* :func:`llama_like`: RMSNorm, causal-free attention, SiLU-gated MLP, an LM head ``[B, T, vocab]``;
* :func:`small_cnn`: Conv-Relu x2, global pooling, a ``[N, 10]`` classifier;
* :func:`with_if`: a MatMul in each branch of an If.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
OPSET = 18


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, name, shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op, inputs, **attrs):
        self.n += 1
        out = f"{op.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.n}", **attrs))
        return out

    def linear(self, x, din, dout, name, bias=True):
        y = self.op("MatMul", [x, self.w(f"{name}.w", (din, dout))])
        return self.op("Add", [y, self.w(f"{name}.b", (dout,), 0.02)]) if bias else y

    def model(self, inputs, outputs, name):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def _attention(b: _Builder, x, d, heads, name):
    dh = d // heads
    shape = b.const(f"{name}.heads", np.array([0, 0, heads, dh], np.int64))
    flat = b.const(f"{name}.flat", np.array([0, 0, d], np.int64))

    def split(t):
        return b.op("Transpose", [b.op("Reshape", [t, shape])], perm=[0, 2, 1, 3])

    q, k, v = (split(b.linear(x, d, d, f"{name}.{p}")) for p in "qkv")
    s = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = b.op("Mul", [s, b.const(f"{name}.scale", np.array(1 / np.sqrt(dh), np.float32))])
    a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
    a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), flat])
    return b.linear(a, d, d, f"{name}.o")


def bert_like(d: int = 256, heads: int = 4, classes: int = 8, seed: int = 0) -> onnx.ModelProto:
    """One encoder layer and a classifier over the mean of the sequence: ``x[B, T, d] -> logits[B, classes]``."""
    b = _Builder(seed)
    ln = {}
    for i in (1, 2):
        ln[i] = (b.w(f"ln{i}.g", (d,), 0.1), b.w(f"ln{i}.b", (d,), 0.02))
    x = "x"
    h = b.op("LayerNormalization", [b.op("Add", [x, _attention(b, x, d, heads, "attn")]), *ln[1]], axis=-1)
    f = b.linear(h, d, 4 * d, "ff1")
    half = b.const("half", np.array(0.5, np.float32))
    gelu = b.op("Mul", [b.op("Mul", [f, half]),
                        b.op("Add", [b.op("Erf", [b.op("Mul", [f, b.const("rsqrt2", np.array(1 / np.sqrt(2), np.float32))])]),
                                     b.const("one", np.array(1.0, np.float32))])])
    h2 = b.op("LayerNormalization", [b.op("Add", [h, b.linear(gelu, 4 * d, d, "ff2")]), *ln[2]], axis=-1)
    b.op("ReduceMean", [h2, b.const("axes1", np.array([1], np.int64))], keepdims=0)
    b.nodes[-1].output[0] = "pooled"
    logits = b.linear("pooled", d, classes, "cls")
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="out"))
    return b.model([helper.make_tensor_value_info("x", F, ["batch", "seq", d])],
                   [helper.make_tensor_value_info("logits", F, ["batch", classes])], "bert_like")


def llama_like(d: int = 256, heads: int = 4, hidden: int = 512, vocab: int = 512, seed: int = 0) -> onnx.ModelProto:
    """RMSNorm, attention, SiLU-gated MLP and an LM head: ``x[B, T, d] -> logits[B, T, vocab]``."""
    b = _Builder(seed)
    two = b.const("two", np.array(2.0, np.float32))
    eps = b.const("eps", np.array(1e-6, np.float32))
    axes = b.const("axes", np.array([-1], np.int64))

    def rms(x, name):
        ms = b.op("ReduceMean", [b.op("Pow", [x, two]), axes], keepdims=1)
        return b.op("Mul", [b.op("Div", [x, b.op("Sqrt", [b.op("Add", [ms, eps])])]), b.w(f"{name}.g", (d,), 0.1)])

    x = "x"
    h = b.op("Add", [x, _attention(b, rms(x, "n1"), d, heads, "attn")])
    n = rms(h, "n2")
    gate = b.linear(n, d, hidden, "gate", bias=False)
    up = b.linear(n, d, hidden, "up", bias=False)
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
    h = b.op("Add", [h, b.linear(act, hidden, d, "down", bias=False)])
    logits = b.linear(rms(h, "nf"), d, vocab, "lm_head", bias=False)
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="out"))
    return b.model([helper.make_tensor_value_info("x", F, ["batch", "seq", d])],
                   [helper.make_tensor_value_info("logits", F, ["batch", "seq", vocab])], "llama_like")


def small_cnn(channels: int = 32, classes: int = 10, size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """Conv-Relu, Conv-Relu (stride 2), global average pooling, Gemm: ``x[N, 3, size, size] -> [N, classes]``."""
    b = _Builder(seed)
    c1 = b.op("Relu", [b.op("Conv", ["x", b.w("c1.w", (channels, 3, 3, 3), 0.3), b.w("c1.b", (channels,), 0.05)],
                             pads=[1, 1, 1, 1])])
    c2 = b.op("Relu", [b.op("Conv", [c1, b.w("c2.w", (channels, channels, 3, 3), 0.1),
                                     b.w("c2.b", (channels,), 0.05)], pads=[1, 1, 1, 1], strides=[2, 2])])
    p = b.op("Flatten", [b.op("GlobalAveragePool", [c2])])
    b.nodes.append(helper.make_node("Gemm", [p, b.w("fc.w", (classes, channels), 0.3), b.w("fc.b", (classes,), 0.05)],
                                    ["logits"], name="fc", transB=1))
    return b.model([helper.make_tensor_value_info("x", F, ["n", 3, size, size])],
                   [helper.make_tensor_value_info("logits", F, ["n", classes])], "small_cnn")


def with_if(d: int = 128, seed: int = 0) -> onnx.ModelProto:
    """``y = cond ? x @ W1 : x @ W2`` with W1, W2 in the main graph (read from the branches)."""
    rng = np.random.default_rng(seed)
    ws = [numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), f"w{i}")
          for i in (1, 2)]

    def branch(i):
        return helper.make_graph([helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"mm{i}")], f"b{i}", [],
                                 [helper.make_tensor_value_info(f"y{i}", F, ["batch", d])])

    node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch(1), else_branch=branch(2))
    g = helper.make_graph([node], "with_if", [helper.make_tensor_value_info("x", F, ["batch", d]),
                                             helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", F, ["batch", d])], ws)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def save(model: onnx.ModelProto, path, external: bool = False):
    """Write *model*; with *external* every tensor over 1 KB goes to ``<name>.data`` beside it."""
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
    return path
