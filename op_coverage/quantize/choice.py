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
from op_coverage.quantize.metrics import model_bytes
from op_coverage.targets.profile import SupportProfile


def registry_op_types(name: str) -> list[str]:
    """The op types of ``onnxruntime.quantization.registry.<name>`` (its keys, in its order).

    Read at run time so that a newer onnxruntime brings the op types it has learnt to quantize.
    """
    from op_coverage.quantize.ort import import_quantization
    table = getattr(import_quantization().registry, name, None)
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
    kept_nodes: dict = field(default_factory=dict)    # float node name -> {"op_type", "reason"} (nodes_to_exclude)
    tried: list = field(default_factory=list)         # one dict per quantization tried
    path: Path | None = None                          # the accepted quantized model
    scan: object = None                               # the scan report of *path* on the target
    default_path: Path | None = None                  # onnxruntime's default result, when made
    default_error: str | None = None                  # why onnxruntime's default call failed, when it did
    default_won: bool = False                         # *path* is onnxruntime's default result

    def to_dict(self) -> dict:
        return {"format": self.format, "variant": self.variant, "op_types": self.op_types,
                "kept_float": self.kept_float,
                "kept_float_by_node": self.kept_nodes, "tried": self.tried}


def scan_report(path: Path, profile: SupportProfile):
    """The scan report (:func:`op_coverage.scan.scan_model`) of the model at *path* on *profile* alone."""
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.scan import scan_model
    return scan_model(load_for_scan(path), [profile])


def scan_nodes(path: Path, profile: SupportProfile, report=None) -> list:
    """``[(NodeInfo, Verdict)]`` for every node of *path* (subgraphs included) on *profile*."""
    rep = report if report is not None else scan_report(path, profile)
    return [(node, verdicts[profile.name]) for node, verdicts in rep.nodes]


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


def float_name(node, back: dict) -> str:
    """The name of the float node *node* comes from: onnxruntime names an integer op ``<float name>_quant``."""
    if node.op_type in back and node.name.endswith("_quant"):
        return node.name[:-len("_quant")]
    return node.name


def blame(nodes: list, bad: set, fmt: dict, op_types: list) -> dict:
    """Float op type -> {float node name -> labels of the not-native *bad* ops its quantized form brings in}.

    From each bad node, consumers are followed through at most 4 hops to the quantized node they
    feed (a DequantizeLinear of an int32 bias blames the Gemm it feeds, not every op type of the
    format); a bad node that reads a node of a requested op type (the DequantizeLinear after a
    ``Gather`` on an int8 table) blames that node.
    """
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    owners = {op: {op} | {g for g, xs in fmt.get("also_request", {}).items() if op in xs} for op in set(back.values())}
    consumers: dict = {}
    producer: dict = {}
    for node, _ in nodes:
        for i in node.inputs:
            consumers.setdefault(i, []).append(node)
        for o in node.outputs:
            producer[o] = node
    wanted = set(op_types)
    out: dict = {}

    def put(op, m, node):
        out.setdefault(op, {}).setdefault(float_name(m, back), set()).add(_label(node))

    for node, v in nodes:
        if v.status == "native" or _label(node) not in bad:
            continue
        for i in node.inputs:
            p = producer.get(i)
            if p is not None and p.op_type in wanted and p.op_type not in back:
                put(p.op_type, p, node)
        frontier, seen = [node], set()
        for _ in range(4):
            nxt = []
            for m in frontier:
                ops = owners.get(back[m.op_type], set()) if m.op_type in back else \
                    ({m.op_type} if m is not node else set())
                if ops & wanted:
                    for op in ops & wanted:
                        put(op, m, node)
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

    from op_coverage.onnx.load import iter_tensors
    m = onnx.load(str(path), load_external_data=False)
    int8 = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return any(t.data_type in int8 for t in iter_tensors(m)) or \
        any(n.op_type in ("DynamicQuantizeLinear", "QuantizeLinear") for n in all_nodes(m, functions=False))


def present_op_types(model) -> Counter:
    """Op type -> count over every graph of *model* (If/Loop/Scan bodies included)."""
    return Counter(n.op_type for n in all_nodes(model, functions=False))


#: node-by-node rounds before a format sends whole op types back to float
NODE_ROUNDS = 3


def choose(mode: str, model, profile: SupportProfile, before: dict, trial: Callable[..., Path],
           facts: dict | None = None, default: Callable[[], Path] | None = None) -> Choice:
    """Try the formats of *mode* in order; the result that adds nothing *profile* lacks wins.

    A format that quantizes all it was asked for wins at once; one that had to keep nodes or op
    types float lets the later formats try as well, and the smallest clean result wins.

    When a clean result is of the format onnxruntime's default call emits (``onnxruntime_default``
    in the data file), *default* (``() -> path``: that call on the model as given) is made too;
    when it is smaller than the best result it is scanned, and it wins when the target runs it:
    the result is never larger than what onnxruntime gives by itself on a target that runs it.

    When a result brings in an op the target lacks, the float nodes whose quantized form brought
    it are excluded (``nodes_to_exclude``) and the format is tried again, node by node, up to
    :data:`NODE_ROUNDS` times; after that (or when no node can be named) the op types blamed are
    sent back to float as a whole.

    :param before: :func:`not_native` of the float model (what the target lacks already is not held
        against a format).
    :param trial: ``trial(format_name, format, variant, op_types, exclude_nodes) -> path`` quantizes
        and returns the result; an exception means onnxruntime could not quantize that way.
    :param facts: :func:`formats` (read again when not given).
    """
    facts = facts or formats()
    scans = {}
    present = present_op_types(model)
    names = {n.name for n in all_nodes(model, functions=False) if n.name}
    choice = Choice()
    found = []  # (bytes, order, (format, variant, op_types, path, dropped, kept_nodes)) of each clean result
    for name in facts["modes"][mode]:
        fmt = facts["formats"][name]
        wanted = [op for op in fmt["quantize"] if present[op]]
        if not wanted:
            choice.tried.append({"format": name, "variant": None, "op_types": [],
                                 "outcome": "the model has none of " + ", ".join(fmt["quantize"])})
            continue
        for variant in fmt["variants"]:
            op_types, dropped, kept_nodes, rounds = list(wanted), {}, {}, 0
            while op_types:
                excluded = sorted(kept_nodes)
                try:
                    extra = [x for op in op_types for x in fmt.get("also_request", {}).get(op, [])]
                    path = trial(name, fmt, variant, list(dict.fromkeys(op_types + extra)), excluded)
                except Exception as e:  # noqa: BLE001 - onnxruntime.quantization raises assorted types
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                         "excluded_nodes": excluded,
                                         "outcome": f"onnxruntime.quantization failed: {str(e).splitlines()[0][:200]}"
                                         if str(e) else type(e).__name__})
                    break
                if not holds_int8(path):
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                         "excluded_nodes": excluded,
                                         "outcome": "quantized nothing (no INT8 tensor in the result: what is left "
                                                    "quantizes only after a quantized input)"})
                    break
                scans[path] = scan_report(path, profile)
                nodes = scan_nodes(path, profile, scans[path])
                new = {k: v for k, v in not_native(path, profile, nodes).items() if k not in before}
                if not new:
                    size = model_bytes(path)
                    choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                         "excluded_nodes": excluded, "outcome": "ok", "bytes": size})
                    found.append((size, len(found), (name, variant, op_types, path, dropped, kept_nodes)))
                    break
                lacks = "; ".join(f"{k} x{n} ({why})" for k, (n, why) in sorted(new.items()))
                choice.tried.append({"format": name, "variant": variant, "op_types": op_types,
                                     "excluded_nodes": excluded, "outcome": f"{profile.name} lacks {lacks}"})
                blamed = blame(nodes, set(new), fmt, op_types)
                fresh = {n: (op, lacked) for op, by in blamed.items() for n, lacked in by.items()
                         if n in names and n not in kept_nodes}
                rounds += 1
                if fresh and rounds <= NODE_ROUNDS:
                    for n, (op, lacked) in fresh.items():
                        kept_nodes[n] = {"op_type": op, "reason": f"{profile.name} does not run its {name} form "
                                         "natively: " + "; ".join(f"{k}: {new[k][1]}" for k in sorted(lacked))}
                    continue
                by_type = {op: set().union(*by.values()) for op, by in blamed.items()} or \
                    {op: set(new) for op in op_types}
                for op, lacked in by_type.items():
                    dropped[op] = (f"{profile.name} does not run its {name} form natively: "
                                   + "; ".join(f"{k}: {new[k][1]}" for k in sorted(lacked)))
                op_types = [op for op in op_types if op not in by_type]
                kept_nodes = {n: k for n, k in kept_nodes.items() if k["op_type"] in op_types}
            if found and found[-1][2][0] == name:
                break
            for op, why in dropped.items():
                choice.kept_float.setdefault(op, why)
        if found and not found[-1][2][4] and not found[-1][2][5]:
            break  # everything asked for is quantized: no later format can do better
    theirs = facts.get("onnxruntime_default", {}).get(mode)
    if default is not None and theirs and any(f[2][0] == theirs["format"] for f in found):
        _try_default(choice, found, scans, default, theirs, facts["formats"][theirs["format"]], present, profile,
                     before)
    if found:
        kept = dict(choice.kept_float)
        (choice.format, choice.variant, choice.op_types, choice.path, dropped, choice.kept_nodes) = min(found)[2]
        choice.kept_float = {**{k: v for k, v in kept.items() if k not in choice.op_types}, **dropped}
        choice.scan = scans.get(choice.path)
        choice.default_won = choice.path == choice.default_path
    return choice


def _try_default(choice: Choice, found: list, scans: dict, default: Callable[[], Path], theirs: dict, fmt: dict,
                 present: Counter, profile: SupportProfile, before: dict) -> None:
    """Make onnxruntime's default result and, when it is smaller than the best of *found*, scan it and add it
    to *found* if *profile* runs it natively."""
    entry = {"format": theirs["format"], "variant": theirs["variant"],
             "op_types": [op for op in registry_op_types(fmt["registry"]) if present[op]], "excluded_nodes": [],
             "call": "onnxruntime's default"}
    try:
        path = default()
    except Exception as e:  # noqa: BLE001 - onnxruntime.quantization raises assorted types
        choice.default_error = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        choice.tried.append({**entry, "outcome": f"onnxruntime.quantization failed: {choice.default_error}"})
        return
    choice.default_path = path
    size, best = model_bytes(path), min(f[0] for f in found)
    if size >= best:  # it cannot win: no scan
        choice.tried.append({**entry, "outcome": f"not smaller than the best result ({best} bytes)", "bytes": size})
        return
    scans[path] = scan_report(path, profile)
    new = {k: v for k, v in not_native(path, profile, scan_nodes(path, profile, scans[path])).items()
           if k not in before}
    if new:
        lacks = "; ".join(f"{k} x{n} ({why})" for k, (n, why) in sorted(new.items()))
        choice.tried.append({**entry, "outcome": f"{profile.name} lacks {lacks}"})
        return
    choice.tried.append({**entry, "outcome": "ok", "bytes": size})
    found.append((size, len(found), (theirs["format"], theirs["variant"], entry["op_types"], path, {}, {})))
