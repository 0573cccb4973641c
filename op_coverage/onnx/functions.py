"""ONNX's own function bodies: find the body of a node's schema and inline it.

onnx 1.23 defines a body for 48 ``ai.onnx`` operators.  Expanding one node means: pick the
body for the model's opset, fill in attribute defaults the node leaves out (the body refers to
them by ``ref_attr_name`` and would otherwise drop them), give every internal value a fresh
model-wide name (so a body inlined inside a Loop/Scan body cannot shadow an outer value it
reads), and map the formal inputs/outputs to the node's own names.  Context-dependent bodies
(Softmax-13, CastLike, ...) need the input types; they come from initializers as well as
value_info, because exporters often leave initializers out of value_info.  The expansion is
one level: whoever expands re-checks every emitted node and expands again where needed.
Subgraphs inside a body (Range's Loop) are copied with their own values renamed the same way.
"""
from __future__ import annotations

from functools import lru_cache

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, defs, helper

from op_coverage.onnx import walk
from op_coverage.onnx.builder import Builder, Decline, dtype_enum

ONNX = "ai.onnx"


def _schema(op: str, domain: str, opset: int):
    try:
        return defs.get_schema(op, opset, "" if domain == ONNX else domain)
    except defs.SchemaError:
        return None



@lru_cache(maxsize=None)
def has_body(domain: str, op: str) -> bool:
    """Whether any version of ``domain::op`` has a function body in the installed onnx."""
    d = "" if domain == ONNX else domain
    return any(s.name == op and s.domain == d and (s.has_function or s.has_context_dependent_function)
               for s in defs.get_all_schemas_with_history())



def _pick(versions, opset: int):
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None



def function_body(node: NodeProto, opset: int, input_types: list) -> FunctionProto:
    """The body of *node*'s schema at *opset*; raises :class:`Decline` when there is none."""
    domain = node.domain or ONNX
    s = _schema(node.op_type, domain, opset)
    if s is None:
        raise Decline(f"{node.op_type}: no schema at opset {opset}")
    fp = FunctionProto()
    v = _pick(s.function_opset_versions, opset) if s.has_function else None
    if v is not None:
        fp.ParseFromString(s.get_function_with_opset_version(v))
        return fp
    v = _pick(s.context_dependent_function_opset_versions, opset) if s.has_context_dependent_function else None
    if v is None:
        raise Decline(f"{node.op_type}-{s.since_version}: onnx defines no function body for this version")
    if any(t is None for t in input_types):
        raise Decline(f"{node.op_type}: its body depends on input types, which are unknown here")
    filled = NodeProto()
    filled.CopyFrom(node)
    _fill_defaults(filled, s)
    try:
        raw = s.get_context_dependent_function_with_opset_version(
            v, filled.SerializeToString(), [t.SerializeToString() for t in input_types])
    except Exception as e:  # noqa: BLE001 - onnx raises plain errors for unsupported attribute combinations
        raise Decline(f"{node.op_type}: onnx cannot build its body here ({str(e).splitlines()[0][:120]})") from None
    if not raw:
        raise Decline(f"{node.op_type}: onnx builds no body for these attributes/types")
    fp.ParseFromString(raw)
    return fp



def _fill_defaults(node: NodeProto, schema) -> None:
    have = {a.name for a in node.attribute}
    for name, a in schema.attributes.items():
        if name not in have and a.default_value is not None and a.default_value.type != AttributeProto.UNDEFINED:
            dv = AttributeProto()
            dv.CopyFrom(a.default_value)
            dv.name = name
            node.attribute.append(dv)



def inline(b: Builder, node: NodeProto, fp: FunctionProto) -> None:
    """Append *fp*'s nodes to *b* as the replacement of *node* (fresh names, attributes bound)."""
    s = _schema(node.op_type, node.domain or ONNX, b.opset_of(node.domain or ONNX) or 1)
    filled = NodeProto()
    filled.CopyFrom(node)
    if s is not None:
        _fill_defaults(filled, s)
    attrs = {a.name: a for a in filled.attribute}
    names: dict[str, str] = {}
    for i, formal in enumerate(fp.input):
        names[formal] = node.input[i] if i < len(node.input) else ""
    for i, formal in enumerate(fp.output):
        if i < len(node.output) and node.output[i]:
            names[formal] = node.output[i]

    def rename(n: str) -> str:
        if not n:
            return ""
        if n not in names:
            names[n] = b.fresh(f"{b.prefix}_{n}")
        return names[n]

    def copy_node(inner: NodeProto, lookup) -> NodeProto:
        new = NodeProto()
        new.CopyFrom(inner)
        new.ClearField("input")
        new.ClearField("output")
        new.ClearField("attribute")
        new.input.extend(lookup(x) for x in inner.input)
        new.output.extend(lookup(x) for x in inner.output)
        new.name = b.fresh(f"{b.prefix}/{inner.op_type}")
        for a in inner.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:
                    bound = AttributeProto()
                    bound.CopyFrom(attrs[a.ref_attr_name])
                    bound.name = a.name
                    new.attribute.append(bound)
                continue  # optional attribute the node does not set: leave it out, as the spec says
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                # a recursion through copy_node, not walk.graphs: each body renames its values over
                # the lookup of the scope around it
                g = AttributeProto()
                g.CopyFrom(a)
                for _k, sub in walk.attribute_graphs(g):
                    copy_graph(sub, lookup)
                new.attribute.append(g)
                continue
            new.attribute.append(a)
        if new.domain in ("", ONNX):
            new.domain = ""
        return new

    def copy_graph(g, outer) -> None:
        """Rename a body's subgraph in place: its own values fresh, outer values as the body maps them."""
        local: dict[str, str] = {}
        for v in list(g.input) + list(g.output) + list(g.value_info):
            local.setdefault(v.name, b.fresh(f"{b.prefix}_{v.name}"))
        for t in g.initializer:
            local.setdefault(t.name, b.fresh(f"{b.prefix}_{t.name}"))
        for n in g.node:
            for o in n.output:
                if o:
                    local.setdefault(o, b.fresh(f"{b.prefix}_{o}"))

        def lookup(x: str) -> str:
            return "" if not x else local[x] if x in local else outer(x)

        for v in list(g.input) + list(g.output) + list(g.value_info):
            v.name = local[v.name]
        for t in g.initializer:
            t.name = local[t.name]
        nodes = [copy_node(n, lookup) for n in g.node]
        del g.node[:]
        g.node.extend(nodes)

    for inner in fp.node:
        b.nodes.append(copy_node(inner, rename))
    # a formal output that the body only copies from an input still needs a node producing it
    produced = {o for n in b.nodes for o in n.output}
    for i, formal in enumerate(fp.output):
        if i < len(node.output) and node.output[i] and node.output[i] not in produced:
            b.nodes.append(helper.make_node("Identity", [names.get(formal, formal)], [node.output[i]],
                                            name=b.fresh(f"{b.prefix}/Identity")))



def _type_proto(b: Builder, name: str):
    if not name:
        return onnx.TypeProto()
    d = b.dtype(name)
    if d is None:
        return None
    shape = b.shape(name)
    return helper.make_tensor_type_proto(dtype_enum(d), shape)


def expand_body(b: Builder, node: NodeProto, domain: str) -> None:
    """Append to *b* the body of *node* (an op of *domain*) at the model's opset, inlined.

    :raises Decline: no body for this version, types or attributes, or the body needs a domain
        the model does not import.
    """
    opset = b.opset_of(domain) or 1
    types = [_type_proto(b, x) for x in node.input]
    fp = function_body(node, opset, types)
    for d in {i.domain or ONNX for i in fp.opset_import}:
        if (d if d != "" else ONNX) not in b.opsets:
            raise Decline(f"{node.op_type}: its body uses domain {d}, which the model does not import")
    inline(b, node, fp)
