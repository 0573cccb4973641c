"""What a quantized model holds: the float nodes it quantized, those it kept float and why, its rescan."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx

#: op types listed as kept float even without a constant input (an activation x activation product)
PRODUCTS = ("MatMul", "Conv", "Gemm", "ConvTranspose")

_INT8 = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def _all_nodes(model):
    """Every node of *model*, subgraphs included (local functions are not quantized)."""
    from op_coverage.onnx.inventory import all_nodes
    return all_nodes(model, functions=False)


def _all_initializers(model):
    """Every tensor of *model* (initializers at any depth, attribute tensors)."""
    from op_coverage.onnx.load import iter_tensors
    return iter_tensors(model)


def _dequantized(model) -> set:
    """Values of *model* that are quantized data read as float: DequantizeLinear outputs, INT8 tensors."""
    out = {o for n in _all_nodes(model) if n.op_type == "DequantizeLinear" for o in n.output}
    return out | {t.name for t in _all_initializers(model) if t.data_type in _INT8}  # a Gather on an int8 table


def quantized_node_names(quant_model, fmt: dict) -> set:
    """Names of the float nodes *quant_model* quantized: replaced by an integer op (``<name>_quant``), or
    of an op type the format quantizes and fed by a DequantizeLinear or an INT8 initializer."""
    from op_coverage.quantize.choice import float_name
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    from_dq = _dequantized(quant_model)
    return {float_name(n, back) for n in _all_nodes(quant_model)
            if n.op_type in back or (n.op_type in fmt["quantize"] and any(i in from_dq for i in n.input))}


def _census(quant_model, fmt: dict, choice_kept: dict, exclude, kept_nodes: dict | None = None) -> tuple:
    """(quantized nodes per float op type, [{"node", "op_type", "reason"}] of candidate nodes left float).

    A node counts as quantized when the format replaced it by its integer op (``quantized_as``), when
    one of its inputs comes from a DequantizeLinear (QDQ) or is an INT8 initializer (a weight-only
    quantized embedding: ``Gather`` on an int8 table, then DequantizeLinear).  A node left float is
    listed when it is a product (:data:`PRODUCTS`), reads a float constant, was excluded or sent back.
    """
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    from_dq = _dequantized(quant_model)
    candidates = set(fmt["quantize"]) | set(choice_kept) | {k["op_type"] for k in (kept_nodes or {}).values()}
    float_consts = {t.name for t in _all_initializers(quant_model)
                    if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)}
    done: Counter = Counter()
    kept = []
    for n in _all_nodes(quant_model):
        if n.op_type in back:
            done[back[n.op_type]] += 1
            continue
        if n.op_type not in candidates:
            continue
        if any(i in from_dq for i in n.input):
            done[n.op_type] += 1
            continue
        if n.name and n.name in exclude:
            why = "excluded by --exclude"
        elif n.name and n.name in (kept_nodes or {}):
            why = kept_nodes[n.name]["reason"]
        elif n.op_type in choice_kept:
            why = choice_kept[n.op_type]
        elif n.op_type not in PRODUCTS and not any(i in float_consts for i in n.input):
            continue  # a data-movement op (Transpose, an index Gather) onnxruntime quantizes only after a quantized input
        else:
            why = "onnxruntime.quantization leaves it float (e.g. no constant weight: both inputs are activations)"
        kept.append({"node": n.name or f"({n.op_type}, unnamed)", "op_type": n.op_type, "reason": why})
    return dict(done), kept


def _rescan(path: Path, profile, float_labels: Counter, rep=None) -> tuple[dict, dict]:
    """(rescan summary like rewrite's, op label -> nodes the quantized model adds).

    *rep*: the scan report of the same graph already made (the accepted try, which the written model
    is saved from unchanged); else *path* is scanned.
    """
    if rep is None:
        from op_coverage.quantize.choice import scan_report
        rep = scan_report(path, profile)
    remaining, labels = Counter(), Counter()
    for node, verdicts in rep.nodes:
        label = node.op_type if node.domain == "ai.onnx" else f"{node.domain}::{node.op_type}"
        labels[label] += 1
        if verdicts[profile.name].status != "native":
            remaining[label] += 1
    t = rep.targets[0]
    introduced = {k: v for k, v in sorted(labels.items()) if k not in float_labels}
    return ({"nodes": t.nodes, "coverage_by_node": round(t.coverage_by_node, 2),
             "nodes_by_status": dict(t.nodes_by_status), "not_native": dict(remaining)}, introduced)


def _labels(model) -> Counter:
    """Op label (``op_type``, or ``domain::op_type`` outside the default domain) -> nodes of *model*."""
    from op_coverage.onnx.inventory import norm_domain
    return Counter(n.op_type if norm_domain(n.domain) == "ai.onnx" else f"{n.domain}::{n.op_type}"
                   for n in _all_nodes(model))
