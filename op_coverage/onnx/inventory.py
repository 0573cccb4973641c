"""Every node of a model, with where it sits, its opset, its input types and its weights.

Control-flow bodies (If/Loop/Scan and any other graph attribute) and model-local function
bodies are walked; each node carries the *path* that reaches it, e.g.
``main/If_3.then_branch/Loop_0.body``.  Nodes without names get stable generated ones
(``<op_type>_<index in its graph>``, prefixed by the path), so two scans of the same file name
the same node the same way.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain

import onnx

from op_coverage.onnx import walk
from op_coverage.onnx.load import LoadedModel, tensor_bytes

ONNX_DOMAIN = "ai.onnx"


def norm_domain(domain: str) -> str:
    """``""`` and ``ai.onnx`` are the same domain; profiles and reports use ``ai.onnx``."""
    return ONNX_DOMAIN if domain in ("", ONNX_DOMAIN) else domain


def dtype_name(elem_type: int) -> str | None:
    if not elem_type:
        return None
    try:
        return onnx.helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
    except (KeyError, ValueError):
        return None


@dataclass
class NodeInfo:
    """One node as the scan sees it."""

    name: str
    op_type: str
    domain: str
    opset: int | None
    version: int | None  # since_version of the schema that applies (None: unknown to onnx)
    path: str
    input_dtypes: list[str | None]
    input_shapes: list[list | None]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    weight_bytes: int = 0
    generated_name: bool = False
    function: str | None = None  # set when this node calls a model-local function

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)

    typed_inputs: list[bool] | None = None  # which inputs a schema type parameter constrains
    type_params: list[str | None] | None = None  # that parameter's name per input ("T1", "T2"; None: fixed)
    attributes: list | None = None  # the node's AttributeProtos (a function body may depend on them)
    opsets: dict | None = None  # domain -> version in the node's scope (a function body needs ai.onnx's)

    @property
    def known_dtypes(self) -> list[str]:
        """Element types of the inputs that the op's type constraints govern.

        Inputs of a fixed type (``axes: tensor(int64)`` of ReduceMean) are left out: kernel
        tables list types per type constraint, so counting them would invent a dtype problem.
        """
        mask = self.typed_inputs or [True] * len(self.input_dtypes)
        return sorted({d for d, m in zip(self.input_dtypes, mask) if d and m})


@dataclass
class Inventory:
    """All nodes of a model, and what a migration engineer asks about them first."""

    nodes: list[NodeInfo]
    opsets: dict[str, int]
    functions: dict[str, list[str]] = field(default_factory=dict)  # "domain.name" -> call paths
    weight_bytes: int = 0
    shape_inference: str = "ok"

    def op_counts(self) -> Counter:
        """``{(domain, op_type): count}`` over every node, subgraphs and function bodies included."""
        return Counter(n.key for n in self.nodes)

    def weight_bytes_by_op(self) -> Counter:
        c: Counter = Counter()
        for n in self.nodes:
            if n.weight_bytes:
                c[n.key] += n.weight_bytes
        return c


def _schema(op_type: str, domain: str, opset: int | None):
    if opset is None:
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == ONNX_DOMAIN else domain)
    except onnx.defs.SchemaError:
        return None


def all_nodes(model: onnx.ModelProto, functions: bool = True):
    """Every node of *model*, subgraph bodies included, in the order :func:`build_inventory`
    visits them; then the nodes of its local functions unless ``functions=False``."""
    return (n for _scope, _i, n in walk.nodes(model, functions))


def _type_params(schema, n_inputs: int) -> list[str | None] | None:
    """Per input, the schema type parameter that governs it (None for a fixed type)."""
    if schema is None or not schema.inputs:
        return None
    # a constraint that admits one type only (Where's ``B: tensor(bool)``) is as fixed as a concrete type
    params = {c.type_param_str for c in schema.type_constraints if len(c.allowed_type_strs) > 1}
    formal = list(schema.inputs)
    out = []
    for i in range(n_inputs):
        f = formal[min(i, len(formal) - 1)]
        out.append(f.type_str if f.type_str in params else None)
    return out


def _typed_inputs(schema, n_inputs: int) -> list[bool] | None:
    params = _type_params(schema, n_inputs)
    return None if params is None else [p is not None for p in params]


def _value_types(g: onnx.GraphProto) -> dict[str, tuple[str | None, list | None]]:
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if isinstance(vi, str):  # FunctionProto inputs/outputs are bare names
            continue
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None:
            continue
        shape = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        out[vi.name] = (dtype_name(tt.elem_type), shape)
    for t in getattr(g, "initializer", ()):
        out[t.name] = (dtype_name(t.data_type), list(t.dims))
    return out


def build_inventory(loaded: LoadedModel) -> Inventory:
    """Walk every node of *loaded* (main graph, subgraphs, function bodies)."""
    model = loaded.model
    status = "ok"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
    except Exception as e:  # noqa: BLE001 - inference is a best effort, the scan goes on without it
        inferred = model
        status = f"failed: {str(e).splitlines()[0][:200]}"
    opsets = {norm_domain(i.domain): i.version for i in model.opset_import}
    local = {(f.domain, f.name): f for f in model.functions}
    inv = Inventory(nodes=[], opsets=opsets, shape_inference=status)
    seen_weights: set[str] = set()

    # (scope, facts) from a root down to the scope of the node at hand; facts are the value types,
    # the weight bytes by initializer name, the opsets and the function key a body inherits
    open_scopes: list = []

    def scope_facts(scope):
        while open_scopes and open_scopes[-1][0] is not scope and open_scopes[-1][0] is not scope.parent:
            open_scopes.pop()  # the walk has left those bodies
        if open_scopes and open_scopes[-1][0] is scope:
            return open_scopes[-1][1]
        if scope.parent is not None:  # a body sees its parent's values, weights and opsets
            types, weights, fops, in_function = open_scopes[-1][1]
            types, weights = dict(types), dict(weights)
        elif scope.function is not None:
            f = scope.function
            fops = dict(opsets)
            fops.update({norm_domain(i.domain): i.version for i in f.opset_import})
            types, weights, in_function = {}, {}, f"{f.domain}.{f.name}"
        else:
            types, weights, fops, in_function = {}, {}, opsets, None
        types.update(_value_types(scope.graph))
        for t in getattr(scope.graph, "initializer", ()):
            weights[t.name] = tensor_bytes(t)
        open_scopes.append((scope, (types, weights, fops, in_function)))
        return open_scopes[-1][1]

    # the main graph as shape inference typed it; the functions as the file has them
    every = chain(walk.nodes(inferred.graph), *(walk.nodes(f) for f in model.functions))
    for scope, i, n in every:
        types, local_weights, opsets_here, in_function = scope_facts(scope)
        path = scope.path
        generated = not n.name
        name = n.name or (f"{path}/{n.op_type}_{i}" if path != "main" else f"{n.op_type}_{i}")
        dom = norm_domain(n.domain)
        wbytes = 0
        for inp in n.input:
            if inp in local_weights and (in_function, inp) not in seen_weights:
                seen_weights.add((in_function, inp))
                wbytes += local_weights[inp]
        for a in n.attribute:
            if a.HasField("t"):
                wbytes += tensor_bytes(a.t)
            for t in a.tensors:
                wbytes += tensor_bytes(t)
        fn = local.get((n.domain, n.op_type))
        schema = _schema(n.op_type, dom, opsets_here.get(dom)) if fn is None else None
        info = NodeInfo(
            name=name, op_type=n.op_type, domain=dom, opset=opsets_here.get(dom),
            version=schema.since_version if schema is not None else None, path=path,
            input_dtypes=[types.get(x, (None, None))[0] if x else None for x in n.input],
            input_shapes=[types.get(x, (None, None))[1] if x else None for x in n.input],
            inputs=list(n.input), outputs=list(n.output), weight_bytes=wbytes, generated_name=generated,
            function=f"{fn.domain}.{fn.name}" if fn is not None else None,
            typed_inputs=_typed_inputs(schema, len(n.input)),
            type_params=_type_params(schema, len(n.input)), attributes=list(n.attribute), opsets=opsets_here)
        inv.nodes.append(info)
        if fn is not None:
            inv.functions.setdefault(info.function, []).append(f"{path}/{name}")
    inv.weight_bytes = sum(n.weight_bytes for n in inv.nodes)
    return inv
