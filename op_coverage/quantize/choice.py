"""Which INT8 format, element types and op types a target can run: tried on the model, judged by its profile.

For each format of the ``--mode`` (``data/quantize_formats.json``, in order) and each of its
variants, the model is quantized with onnxruntime and the result is scanned against the target.
An op the result brings in that the target does not run natively (a kernel missing, a dtype not
listed, only a host fallback) sends the float op types whose quantized nodes it feeds back to
float, and the quantization is tried again with the rest.  The first try whose result adds nothing the target
lacks wins; what was sent back, and why, goes into the report.
"""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from op_coverage.datafiles import read_json
from op_coverage.onnx.inventory import all_nodes
from op_coverage.targets.profile import SupportProfile


def registry_op_types(name: str) -> list[str]:
    """The op types of ``onnxruntime.quantization.registry.<name>`` (its keys, in its order).

    Read at run time so that a newer onnxruntime brings the op types it has learnt to quantize.
    """
    from onnxruntime.quantization import registry
    table = getattr(registry, name, None)
    if not isinstance(table, dict):
        raise RuntimeError(f"onnxruntime.quantization.registry has no {name} (data/quantize_formats.json names it); "
                           f"this onnxruntime is too old or too new for op_coverage quantize: use onnxruntime 1.16+ "
                           f"or correct 'registry' in the data file")
    return list(table)


def formats() -> dict:
    """``data/quantize_formats.json`` with each format's ``quantize`` list filled in.

    ``quantize`` = the keys of the onnxruntime registry the format names (``registry``), then its
    ``quantize_also`` (op types stated by hand), without repeats.
    """
    facts = copy.deepcopy(read_json("quantize_formats.json"))
    for fmt in facts["formats"].values():
        fmt["quantize"] = list(dict.fromkeys(registry_op_types(fmt["registry"]) + fmt.get("quantize_also", [])))
    return facts


@dataclass
class Choice:
    """The outcome of :func:`choose`."""

    format: str | None = None
    variant: dict | None = None
    op_types: list = field(default_factory=list)
    kept_float: dict = field(default_factory=dict)    # op type -> why it stays float
    tried: list = field(default_factory=list)         # one dict per quantization tried
    path: Path | None = None                          # the accepted quantized model

    def to_dict(self) -> dict:
        return {"format": self.format, "variant": self.variant, "op_types": self.op_types,
                "kept_float": self.kept_float, "tried": self.tried}


def scan_nodes(path: Path, profile: SupportProfile) -> list:
    """``[(NodeInfo, Verdict)]`` for every node of *path* (subgraphs included) on *profile*."""
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.scan import scan_model
    return [(node, verdicts[profile.name]) for node, verdicts in scan_model(load_for_scan(path), [profile]).nodes]


def _label(node) -> str:
    return node.op_type if node.domain == "ai.onnx" else f"{node.domain}::{node.op_type}"


def not_native(path: Path, profile: SupportProfile, nodes: list | None = None) -> dict:
    """Op label -> (nodes, first reason) of every node of *path* that *profile* does not run natively."""
    out: dict = {}
    for node, v in nodes if nodes is not None else scan_nodes(path, profile):
        if v.status != "native":
            n, why = out.get(_label(node), (0, f"{v.status}: {v.reason}"))
            out[_label(node)] = (n + 1, why)
    return out


def blame(nodes: list, bad: set, fmt: dict, op_types: list) -> dict:
    """Float op type -> labels of the not-native *bad* ops that feed its quantized nodes (followed through at most 4 consumers).

    A DequantizeLinear of an int32 bias blames the Gemm it feeds, not every op type of the format.
    """
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    owners = {op: {op} | {g for g, xs in fmt.get("also_request", {}).items() if op in xs} for op in set(back.values())}
    consumers: dict = {}
    for node, _ in nodes:
        for i in node.inputs:
            consumers.setdefault(i, []).append(node)
    out: dict = {}
    for node, v in nodes:
        if v.status == "native" or _label(node) not in bad:
            continue
        frontier, seen = [node], set()
        for _ in range(4):
            nxt = []
            for m in frontier:
                ops = owners.get(back[m.op_type], set()) if m.op_type in back else \
                    ({m.op_type} if m is not node else set())
                if ops & set(op_types):
                    for op in ops & set(op_types):
                        out.setdefault(op, set()).add(_label(node))
                    continue
                for o in m.outputs:
                    for c in consumers.get(o, []):
                        if id(c) not in seen:
                            seen.add(id(c))
                            nxt.append(c)
            frontier = nxt
    return out


def holds_int8(path: Path) -> bool:
    """Whether the model at *path* has an INT8/UINT8 tensor or value (something was quantized)."""
    import onnx

    from op_coverage.onnx.load import _iter_tensors
    m = onnx.load(str(path), load_external_data=False)
    int8 = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return any(t.data_type in int8 for t in _iter_tensors(m)) or \
        any(n.op_type in ("DynamicQuantizeLinear", "QuantizeLinear") for n in all_nodes(m, functions=False))


def present_op_types(model) -> Counter:
    """Op type -> count over every graph of *model* (If/Loop/Scan bodies included)."""
    return Counter(n.op_type for n in all_nodes(model, functions=False))


def choose(mode: str, model, profile: SupportProfile, before: dict, trial: Callable[[str, dict, dict, list], Path],
           ) -> Choice:
    """Try the formats of *mode* in order; return the first whose result adds nothing *profile* lacks.

    :param before: :func:`not_native` of the float model (what the target lacks already is not held
        against a format).
    :param trial: ``trial(format_name, format, variant, op_types) -> path`` quantizes and returns the
        result; an exception means onnxruntime could not quantize that way.
    """
    facts = formats()
    present = present_op_types(model)
    choice = Choice()
    for name in facts["modes"][mode]:
        fmt = facts["formats"][name]
        wanted = [op for op in fmt["quantize"] if present[op]]
        if not wanted:
            choice.tried.append({"format": name, "variant": None, "op_types": [],
                                 "outcome": "the model has none of " + ", ".join(fmt["quantize"])})
            continue
        for variant in fmt["variants"]:
            op_types, dropped = list(wanted), {}
            while op_types:
                try:
                    extra = [x for op in op_types for x in fmt.get("also_request", {}).get(op, [])]
                    path = trial(name, fmt, variant, list(dict.fromkeys(op_types + extra)))
                except Exception as e:  # noqa: BLE001 - onnxruntime.quantization raises assorted types
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                         "outcome": f"onnxruntime.quantization failed: {str(e).splitlines()[0][:200]}"
                                         if str(e) else type(e).__name__})
                    break
                if not holds_int8(path):
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                         "outcome": "quantized nothing (no INT8 tensor in the result: what is left "
                                                    "quantizes only after a quantized input)"})
                    break
                nodes = scan_nodes(path, profile)
                new = {k: v for k, v in not_native(path, profile, nodes).items() if k not in before}
                if not new:
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types, "outcome": "ok"})
                    choice.format, choice.variant, choice.op_types, choice.path = name, variant, op_types, path
                    choice.kept_float = dropped
                    return choice
                lacks = "; ".join(f"{k} x{n} ({why})" for k, (n, why) in sorted(new.items()))
                choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                     "outcome": f"{profile.name} lacks {lacks}"})
                blamed = blame(nodes, set(new), fmt, op_types) or {op: set(new) for op in op_types}
                for op, lacked in blamed.items():
                    dropped[op] = (f"{profile.name} does not run its {name} form natively: "
                                   + "; ".join(f"{k}: {new[k][1]}" for k in sorted(lacked)))
                op_types = [op for op in op_types if op not in blamed]
            for op, why in dropped.items():
                choice.kept_float.setdefault(op, why)
    return choice
