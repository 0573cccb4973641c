"""com.microsoft Attention (the fused op onnxruntime's transformer optimiser and exporters emit) as
MatMul / Softmax / Transpose, for its common form: packed QKV weights, optional bias, optional
2-D key padding mask, optional causal masking, no past state."""
from __future__ import annotations

import math

from op_coverage.plan.rules.base import FLOATS, Builder, Decline, Rule, attr, dtype_enum, need_rank, only_attrs, unsqueeze

MASK_FILTER = -10000.0  # onnxruntime's default mask_filter_value for this op


def _attention(b: Builder, node) -> None:
    rule = "com.microsoft.attention"
    only_attrs(node, rule, {"num_heads": None, "unidirectional": {0, 1}, "scale": None,
                            "mask_filter_value": None, "do_rotary": {0}})
    ins = list(node.input) + [""] * 8
    x, w, bias, mask = ins[:4]
    if any(ins[4:8]):
        raise Decline(f"{rule}: past / attention_bias / past_sequence_length inputs are not handled")
    if len([o for o in node.output if o]) > 1:
        raise Decline(f"{rule}: the present output is not handled")
    if need_rank(b, x, rule) != 3:
        raise Decline(f"{rule}: input must be [batch, sequence, hidden]")
    wshape = b.shape(w)
    if not wshape or len(wshape) != 2 or not all(isinstance(d, int) for d in wshape) or wshape[1] % 3:
        raise Decline(f"{rule}: needs packed weights of static shape [hidden, 3*hidden] (qkv_hidden_sizes unset)")
    hidden = wshape[1] // 3
    heads = int(attr(node, "num_heads"))
    if hidden % heads:
        raise Decline(f"{rule}: hidden size {hidden} not divisible by num_heads {heads}")
    hd = hidden // heads
    if mask:
        ms = b.shape(mask)
        if b.dtype(mask) != "int32" or ms is None or len(ms) != 2:
            raise Decline(f"{rule}: only a 2-D int32 key padding mask [batch, sequence] (1 = keep) is handled")
    d = b.dtype(x)
    qkv = b.op("MatMul", x, w)
    if bias:
        qkv = b.op("Add", qkv, bias)
    heads_of = []
    for i in range(3):
        part = b.op("Slice", qkv, b.ints([i * hidden]), b.ints([(i + 1) * hidden]), b.ints([2]))
        part = b.op("Reshape", part, b.ints([0, 0, heads, hd]))
        heads_of.append(b.op("Transpose", part, perm=[0, 2, 1, 3]))  # [B, N, S, hd]
    q, k, v = heads_of
    scale = attr(node, "scale", 0.0) or 1.0 / math.sqrt(hd)
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), b.const(scale, like=x))
    fill = b.const(float(attr(node, "mask_filter_value", MASK_FILTER)), like=x)
    if mask:
        keep = b.op("Cast", unsqueeze(b, mask, [1, 2]), to=dtype_enum(d))  # [B, 1, 1, S]
        scores = b.op("Add", scores, b.op("Mul", b.op("Sub", b.const(1.0, like=x), keep), fill))
    if attr(node, "unidirectional", 0):
        s = b.op("Shape", x)
        n = b.op("Reshape", b.op("Slice", s, b.ints([1]), b.ints([2]), b.ints([0])), b.ints([]))
        idx = b.op("Range", b.scalar_int(0), n, b.scalar_int(1))
        future = b.op("Greater", idx, unsqueeze(b, idx, [1]))  # [S, S]: key j after query i
        scores = b.op("Add", scores, b.op("Mul", b.op("Cast", future, to=dtype_enum(d)), fill))
    probs = b.op("Softmax", scores, axis=-1)
    ctx = b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3])  # [B, S, N, hd]
    b.op("Reshape", ctx, b.ints([0, 0, hidden]), outputs=[node.output[0]])


RULES = (
    Rule("com.microsoft.attention", "Attention", _attention, domain="com.microsoft", dtypes=FLOATS,
         note="packed-QKV multi-head attention: MatMul+bias, per-head Transpose, scaled QK^T, 2-D padding "
              "mask and causal mask added as mask_filter_value (-10000), Softmax, MatMul; no past/present"),
)
