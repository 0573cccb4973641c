"""What is known about the values visible in one scope of a graph: dtypes, shapes, constants.

:class:`Env` holds it; :func:`infer_into` learns it for a list of nodes (onnx shape inference
over those nodes alone), and :func:`node_info` gives a node the scan's view (the
:class:`~op_coverage.onnx.inventory.NodeInfo` a profile judges).
"""
from __future__ import annotations

import warnings
from collections import ChainMap, Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from op_coverage.onnx import walk
from op_coverage.onnx.builder import dtype_enum
from op_coverage.onnx.inventory import NodeInfo, _schema, _type_params, _typed_inputs, dtype_name, norm_domain


@dataclass
class Env:
    """What the planner knows about values visible in one scope."""

    types: dict = field(default_factory=dict)    # value -> dtype name
    shapes: dict = field(default_factory=dict)   # value -> [int | str | None]
    consts: dict = field(default_factory=dict)   # value -> numpy array
    opsets: dict = field(default_factory=dict)   # domain -> version ("ai.onnx" for the default domain)

    def child(self) -> "Env":
        return Env(ChainMap({}, self.types), ChainMap({}, self.shapes), ChainMap({}, self.consts), self.opsets)



def node_info(node: onnx.NodeProto, env: Env, path: str = "main") -> NodeInfo:
    """The scan's view of a node the planner made or is about to replace (for the profile's judge)."""
    dom = norm_domain(node.domain)
    opset = env.opsets.get(dom)
    schema = _schema(node.op_type, dom, opset)
    return NodeInfo(name=node.name or node.op_type, op_type=node.op_type, domain=dom, opset=opset,
                    version=schema.since_version if schema is not None else None, path=path,
                    input_dtypes=[env.types.get(x) if x else None for x in node.input],
                    input_shapes=[env.shapes.get(x) if x else None for x in node.input],
                    inputs=list(node.input), outputs=list(node.output),
                    typed_inputs=_typed_inputs(schema, len(node.input)),
                    type_params=_type_params(schema, len(node.input)), attributes=list(node.attribute),
                    opsets=env.opsets)



def _record_tensor_type(env: Env, name: str, tt: onnx.TypeProto.Tensor) -> None:
    """Note a value's dtype and (partly symbolic) shape in ``env``."""
    d = dtype_name(tt.elem_type)
    if d:
        env.types[name] = d
    if tt.HasField("shape"):
        env.shapes[name] = [x.dim_value if x.HasField("dim_value") else (x.dim_param or None) for x in tt.shape.dim]



def infer_into(nodes: list, env: Env) -> None:
    """Run onnx shape inference over *nodes* alone and record the types/shapes of their outputs."""
    produced = {o for n in nodes for o in n.output if o}
    needed = list(dict.fromkeys(x for n in nodes for x in n.input if x and x not in produced))
    inputs = []
    for x in needed:
        d = env.types.get(x)
        if d is None:
            continue
        inputs.append(helper.make_tensor_value_info(x, dtype_enum(d), env.shapes.get(x)))
    known = {i.name for i in inputs}
    if len(known) != len(needed):
        # unknown outer value: give onnx an untyped input so the rest still infers
        inputs += [helper.make_value_info(x, onnx.TypeProto()) for x in needed if x not in known]
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in produced]
    g = helper.make_graph(nodes, "plan", inputs, outputs)
    opsets = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in env.opsets.items()]
    m = helper.make_model(g, opset_imports=opsets)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - types stay unknown; rules that need them decline
        return
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.name in produced:
            _record_tensor_type(env, vi.name, vi.type.tensor_type)
    # subgraphs (a Loop brought in by an expansion): keep what inference learnt about their values.
    # Not op_coverage.onnx.walk: each body is paired with its inferred twin, one level down only
    for n, inf in zip(nodes, inferred.graph.node):
        for a, ia in zip(n.attribute, inf.attribute):
            subs = [(a.g, ia.g)] if a.type == onnx.AttributeProto.GRAPH else list(zip(a.graphs, ia.graphs))
            for g, ig in subs:
                del g.value_info[:]
                g.value_info.extend(ig.value_info)
                for v, iv in zip(list(g.input) + list(g.output), list(ig.input) + list(ig.output)):
                    if not v.type.HasField("tensor_type") or not v.type.tensor_type.elem_type:
                        v.type.CopyFrom(iv.type)
    for n in nodes:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    env.consts[n.output[0]] = numpy_helper.to_array(a.t)


def name_generator(model: onnx.ModelProto) -> Callable[[str], str]:
    """A ``fresh(prefix)`` that never returns a name already used anywhere in *model*."""
    used: set = set()
    for scope in walk.graphs(model):
        g = scope.graph
        for x in list(g.input) + list(g.output) + list(g.value_info):
            used.add(x if isinstance(x, str) else x.name)
        for t in getattr(g, "initializer", ()):
            used.add(t.name)
        for n in g.node:
            used.add(n.name)
            used.update(n.input)
            used.update(n.output)
    counter = Counter()

    def fresh(prefix: str) -> str:
        base = "".join(c if c.isalnum() or c in "_/.-" else "_" for c in prefix)[:80] or "v"
        while True:
            counter[base] += 1
            name = f"{base}_{counter[base]}"
            if name not in used:
                used.add(name)
                return name

    return fresh



def scope_env(graph, outer: Env | None, opsets: dict) -> Env:
    """Types, shapes and constants of one graph (initializers included), over the outer scope's."""
    env = outer.child() if outer is not None else Env(opsets=opsets)
    env.opsets = opsets
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not isinstance(vi, str) and vi.type.HasField("tensor_type"):
            _record_tensor_type(env, vi.name, vi.type.tensor_type)
    for t in getattr(graph, "initializer", ()):
        env.types[t.name] = dtype_name(t.data_type)
        env.shapes[t.name] = list(t.dims)
        if t.data_location != onnx.TensorProto.EXTERNAL and _small(t):
            try:
                env.consts[t.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - elided or odd tensors are simply not constants here
                pass
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    try:
                        env.consts[n.output[0]] = numpy_helper.to_array(a.t)
                    except Exception:  # noqa: BLE001
                        pass
                elif a.name in ("value_int", "value_ints", "value_float", "value_floats"):
                    env.consts[n.output[0]] = np.asarray(helper.get_attribute_value(a))
    return env



def _small(t: onnx.TensorProto) -> bool:
    n = 1
    for d in t.dims:
        n *= d
    return n <= 4096
