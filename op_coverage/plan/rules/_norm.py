"""Normalisations: InstanceNormalization, BatchNormalization (inference), com.microsoft SkipLayerNormalization."""
from __future__ import annotations

from op_coverage.plan.rules.base import FLOATS, Builder, Decline, Rule, attr, need_rank, only_attrs, reduce, unsqueeze


def _per_channel(b: Builder, p: str, r: int) -> str:
    """[C] -> [C, 1, ..., 1] so it broadcasts against [N, C, D1, ...]."""
    return unsqueeze(b, p, list(range(1, r - 1))) if r > 2 else p


def _instance_norm(b: Builder, node) -> None:
    only_attrs(node, "instancenorm.reduce", {"epsilon": None})
    x, scale, bias = node.input
    r = need_rank(b, x, "instancenorm.reduce")
    axes = list(range(2, r))
    eps = attr(node, "epsilon", 1e-5)
    mean = reduce(b, "ReduceMean", x, axes, 1)
    xc = b.op("Sub", x, mean)
    var = reduce(b, "ReduceMean", b.op("Mul", xc, xc), axes, 1)
    inv = b.op("Sqrt", b.op("Add", var, b.const(eps, like=x)))
    y = b.op("Div", xc, inv)
    y = b.op("Mul", y, _per_channel(b, scale, r))
    b.op("Add", y, _per_channel(b, bias, r), outputs=[node.output[0]])


def _batch_norm(b: Builder, node) -> None:
    only_attrs(node, "batchnorm.inference", {"epsilon": None, "momentum": None, "training_mode": {0},
                                             "spatial": {1}, "is_test": {1}, "consumed_inputs": None})
    if len([o for o in node.output if o]) > 1:
        raise Decline("batchnorm.inference: training outputs (running mean/var) are not handled")
    x, scale, bias, mean, var = node.input[:5]
    r = need_rank(b, x, "batchnorm.inference")
    eps = attr(node, "epsilon", 1e-5)
    inv = b.op("Sqrt", b.op("Add", var, b.const(eps, like=var)))
    k = b.op("Div", scale, inv)  # per channel: scale / sqrt(var + eps)
    y = b.op("Mul", b.op("Sub", x, _per_channel(b, mean, r)), _per_channel(b, k, r))
    b.op("Add", y, _per_channel(b, bias, r), outputs=[node.output[0]])


def _skip_layer_norm(b: Builder, node) -> None:
    only_attrs(node, "com.microsoft.skiplayernorm", {"epsilon": None})
    outs = list(node.output) + [""] * (4 - len(node.output))
    if outs[1] or outs[2]:
        raise Decline("com.microsoft.skiplayernorm: mean / inv_std_var outputs are not handled")
    ins = list(node.input) + [""] * (5 - len(node.input))
    x, skip, gamma, beta, bias = ins[:5]
    if b.opset < 17:
        raise Decline("com.microsoft.skiplayernorm: emits LayerNormalization, needs ai.onnx opset >= 17")
    s = b.op("Add", x, skip)
    if bias:
        s = b.op("Add", s, bias, outputs=[outs[3]] if outs[3] else None)
    elif outs[3]:
        b.op("Identity", s, outputs=[outs[3]])
    for v in (s,):
        b.types[v] = b.dtype(x)
    args = [s, gamma] + ([beta] if beta else [])
    b.op("LayerNormalization", *args, axis=-1, epsilon=attr(node, "epsilon", 1e-12), outputs=[outs[0]])


def _layer_norm(b: Builder, node) -> None:
    """The pattern PyTorch's TorchScript exporter wrote and onnxruntime's LayerNormFusion recognises."""
    rule = "layernorm.reducemean"
    only_attrs(node, rule, {"axis": None, "epsilon": None, "stash_type": {1}})
    if len([o for o in node.output if o]) > 1:
        raise Decline(f"{rule}: Mean / InvStdDev outputs are not handled")
    x = node.input[0]
    r = need_rank(b, x, rule)
    axis = attr(node, "axis", -1) % r
    axes = list(range(axis, r))
    mean = reduce(b, "ReduceMean", x, axes, 1)
    xc = b.op("Sub", x, mean)
    var = reduce(b, "ReduceMean", b.op("Pow", xc, b.const(2.0, like=x)), axes, 1)
    std = b.op("Sqrt", b.op("Add", var, b.const(attr(node, "epsilon", 1e-5), like=x)))
    ins = list(node.input) + ["", ""]
    has_bias = bool(ins[2])
    y = b.op("Mul", b.op("Div", xc, std), ins[1], outputs=None if has_bias else [node.output[0]])
    if has_bias:
        b.op("Add", y, ins[2], outputs=[node.output[0]])


def _simplified_layer_norm(b: Builder, node) -> None:
    """SimplifiedLayerNormalization (onnxruntime contrib op in the ai.onnx domain) = RMSNorm: x / sqrt(mean(x^2) + eps) * scale."""
    only_attrs(node, "simplifiedlayernorm.reduce", {"axis": {-1}, "epsilon": None, "stash_type": {1}})
    if len([o for o in node.output if o]) > 1:
        raise Decline("simplifiedlayernorm.reduce: inv_std_var output is not handled")
    x, scale = node.input[:2]
    ms = reduce(b, "ReduceMean", b.op("Mul", x, x), [-1], 1)
    inv = b.op("Sqrt", b.op("Add", ms, b.const(attr(node, "epsilon", 1e-5), like=x)))
    b.op("Mul", b.op("Div", x, inv), scale, outputs=[node.output[0]])


RULES = (
    Rule("layernorm.reducemean", "LayerNormalization", _layer_norm, since=17, dtypes=FLOATS,
         note="ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add over axis..-1: the pattern onnxruntime's "
              "LayerNormFusion re-fuses; computes in the input dtype (stash_type=1 is exact for float32)"),
    Rule("instancenorm.reduce", "InstanceNormalization", _instance_norm, since=6, dtypes=FLOATS,
         note="ReduceMean / Sub / Mul / Sqrt / Div over the spatial axes, per-channel scale and bias"),
    Rule("batchnorm.inference", "BatchNormalization", _batch_norm, since=7, dtypes=FLOATS,
         note="(x - mean) * scale / sqrt(var + eps) + B with running statistics; training_mode=0 only"),
    Rule("com.microsoft.skiplayernorm", "SkipLayerNormalization", _skip_layer_norm, domain="com.microsoft",
         dtypes=FLOATS, note="Add(input, skip[, bias]) then LayerNormalization over the last axis"),
    Rule("simplifiedlayernorm.reduce", "SimplifiedLayerNormalization", _simplified_layer_norm,
         dtypes=FLOATS, note="x / sqrt(mean(x^2) + eps) * scale over the last axis"),
)
