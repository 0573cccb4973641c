"""Every graph of an ONNX model: the main graph, the bodies of If/Loop/Scan (any graph attribute,
at any depth) and model-local function bodies, each with the path that reaches it.

Paths are the ones a scan reports: ``main`` for the main graph, ``function:<domain>.<name>`` for a
local function, and ``<parent>/<node>.<attribute>`` (a ``GRAPH`` attribute) or
``<parent>/<node>.<attribute>[k]`` (the *k*-th graph of a ``GRAPHS`` attribute) for a body, where
``<node>`` is the node's name or, for an unnamed node, ``<op_type>_<index in its graph>``.

The walk is depth first in file order: a node, then the graphs of its attributes (attribute
order; a ``GRAPH`` before the ``GRAPHS`` of the same attribute), then the next node; the main
graph before the functions.  The walk only reads; a pass that rewrites a graph while it goes
(``op_coverage.plan.apply``) recurses on its own, with :func:`subgraphs` for one level.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union

import onnx

Root = Union[onnx.ModelProto, onnx.GraphProto, onnx.FunctionProto]
Body = Union[onnx.GraphProto, onnx.FunctionProto]


@dataclass(frozen=True, eq=False)
class Scope:
    """One graph and where it sits (scopes compare and hash by identity)."""

    graph: Body
    path: str
    parent: "Scope | None" = None          # the scope of the node that holds this graph (None: a root)
    node: onnx.NodeProto | None = None     # that node
    attribute: str | None = None           # the name of its attribute that holds this graph
    index: int | None = None               # position in a GRAPHS attribute (None: a GRAPH attribute)
    function: onnx.FunctionProto | None = None  # the local function this graph belongs to (None: main)


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, int | None, onnx.GraphProto]]:
    """``(attribute name, index or None, graph)`` for every graph attribute of *node*, not deeper.

    The index is None for a ``GRAPH`` attribute (``then_branch``, ``body``) and the position for
    each graph of a ``GRAPHS`` attribute.
    """
    for a in node.attribute:
        for k, sub in attribute_graphs(a):
            yield a.name, k, sub


def attribute_graphs(a: onnx.AttributeProto) -> Iterator[tuple[int | None, onnx.GraphProto]]:
    """``(index or None, graph)`` for the graphs one attribute holds: its ``g``, then its ``graphs``."""
    if a.HasField("g"):
        yield None, a.g
    yield from enumerate(a.graphs)


def has_subgraphs(node: onnx.NodeProto) -> bool:
    """Whether any attribute of *node* holds a graph."""
    return next(subgraphs(node), None) is not None


def node_step(node: onnx.NodeProto, index: int) -> str:
    """How a path names *node*, the *index*-th node of its graph: its name, else ``<op_type>_<index>``."""
    return node.name or f"{node.op_type}_{index}"


def subgraph_path(path: str, node: onnx.NodeProto, index: int, attribute: str, k: int | None) -> str:
    """The path of the graph that attribute *attribute* (position *k*) of *node* holds, *node*
    being the *index*-th node of the graph at *path*."""
    at = f"{path}/{node_step(node, index)}.{attribute}"
    return at if k is None else f"{at}[{k}]"


def roots(root: Root, functions: bool = True) -> list[Scope]:
    """The top-level scopes of *root*: a model's main graph, then its local functions unless
    ``functions=False``; a graph or a function on its own."""
    if isinstance(root, onnx.ModelProto):
        out = [Scope(root.graph, "main")]
        if functions:
            out += [_function_scope(f) for f in root.functions]
        return out
    if isinstance(root, onnx.FunctionProto):
        return [_function_scope(root)]
    if isinstance(root, onnx.GraphProto):
        return [Scope(root, "main")]
    raise TypeError(f"walk: cannot walk a {type(root).__name__}; pass an onnx ModelProto, GraphProto or FunctionProto")


def _function_scope(f: onnx.FunctionProto) -> Scope:
    return Scope(f, f"function:{f.domain}.{f.name}", function=f)


def _children(scope: Scope, index: int, node: onnx.NodeProto) -> Iterator[Scope]:
    for attribute, k, sub in subgraphs(node):
        yield Scope(sub, subgraph_path(scope.path, node, index, attribute, k), scope, node, attribute, k,
                    scope.function)


def graphs(root: Root, functions: bool = True) -> Iterator[Scope]:
    """Every graph of *root* as a :class:`Scope`, parents before the bodies they hold."""
    for scope in roots(root, functions):
        yield from _graphs(scope)


def _graphs(scope: Scope) -> Iterator[Scope]:
    yield scope
    for i, n in enumerate(scope.graph.node):
        for child in _children(scope, i, n):
            yield from _graphs(child)


def nodes(root: Root, functions: bool = True) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
    """``(scope, index in its graph, node)`` for every node of *root*; a node comes right before
    the nodes of its own bodies."""
    for scope in roots(root, functions):
        yield from _nodes(scope)


def _nodes(scope: Scope) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
    for i, n in enumerate(scope.graph.node):
        yield scope, i, n
        for child in _children(scope, i, n):
            yield from _nodes(child)
