"""Fold what is constant in the nodes a rewrite emitted.

ONNX's function bodies type their constants at run time: ``CastLike(Constant(0.5), X)``.
Inlined as they are, a HardSwish costs two extra nodes per constant, and onnxruntime does
not fold them: it inlines functions after its constant folding, so the casts run on every
call (MobileNetV3-small for musa: 112 Cast nodes in onnxruntime's optimised graph). Once
the rewrite has planned a graph, the types are known, and this pass folds:

* ``CastLike(c, like)`` with ``c`` a constant and ``like``'s type known: a ``Constant`` of
  ``c`` cast to that type;
* ``CastLike(x, like)`` otherwise, with ``like``'s type known: ``Cast(x, to=type)``;
* ``Cast(c)`` with ``c`` a constant: a ``Constant``;
* a ``Constant`` that nothing reads any more after the above is dropped.

Each new node is kept only where the target runs it natively. Only nodes the rewrite
emitted are touched, and the original model's nodes stay as they were. A cast is folded
only where numpy's ``astype`` is the ONNX cast: float, integer and bool types. NaN, ±inf
or out-of-range values going to an integer type are left alone, and so are bfloat16,
float8, int4 and strings.

No library is used. onnxruntime does not fold the casts (see above). onnxscript's
optimizer folds them, but it is an optional test dependency and rewrites much more than
constants, so ops the target lacks could come back.
"""
from __future__ import annotations

import warnings
from collections import Counter
from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from op_coverage.onnx.walk import graphs, subgraphs
from op_coverage.plan.rules.base import dtype_name, dtype_enum

#: constants up to this many elements are folded (the bodies' constants are scalars)
MAX_ELEMENTS = 4096
_NUMERIC = {"float", "double", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
            "uint64", "bool"}


def constant_value(node: onnx.NodeProto):
    """The value of a ``Constant`` node as a numpy array, or None (sparse, strings, odd attributes)."""
    for a in node.attribute:
        if a.name == "value" and a.HasField("t"):
            if a.t.data_type == onnx.TensorProto.STRING:
                return None
            try:
                return numpy_helper.to_array(a.t)
            except Exception:  # noqa: BLE001 - an exotic dtype: not a constant for folding
                return None
        if a.name == "value_float":
            return np.asarray(a.f, np.float32)
        if a.name == "value_floats":
            return np.asarray(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.asarray(a.i, np.int64)
        if a.name == "value_ints":
            return np.asarray(list(a.ints), np.int64)
    return None


def cast_exactly(value: np.ndarray, to: str):
    """*value* cast to ONNX type *to* where numpy's cast is ONNX's, else None."""
    src = dtype_name(helper.np_dtype_to_tensor_dtype(value.dtype)) if value.dtype != object else ""
    if to not in _NUMERIC or src not in _NUMERIC or value.size > MAX_ELEMENTS:
        return None
    target = helper.tensor_dtype_to_np_dtype(dtype_enum(to))
    if value.dtype.kind == "f" and target.kind in "iub" and target.kind != "b":
        if not np.all(np.isfinite(value)):
            return None
        info = np.iinfo(target)
        if value.size and (value.min() < info.min or value.max() > info.max):
            return None
    if value.dtype.kind in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        if value.size and (int(value.min()) < info.min or int(value.max()) > info.max):
            return None  # wraps: ONNX leaves it unspecified
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return value.astype(target)


def _subgraph_inputs(nodes: Iterable[onnx.NodeProto]) -> set:
    """Every value name read by a node inside the subgraphs of *nodes* (any depth)."""
    used: set = set()
    for n in nodes:
        for _attribute, _k, body in subgraphs(n):
            for scope in graphs(body):
                used.update(x for m in scope.graph.node for x in m.input)
                used.update(o.name for o in scope.graph.output)
    return used


def fold(nodes: list, emitted: set, types: dict, consts: dict,
         native: Callable[[onnx.NodeProto], bool], keep: set) -> tuple[list, Counter]:
    """Fold the casts among *nodes* whose names are in *emitted*; returns the new node list and
    what was folded (``{"CastLike->Cast": n, "CastLike->Constant": n, "Cast->Constant": n,
    "Constant dropped": n}``).

    :param types: value name -> ONNX dtype name, for every value whose type is known here.
    :param consts: value name -> numpy array, for the small constants visible here.
    :param native: whether the target runs a node natively (its input types are in *types*).
    :param keep: values read from outside *nodes* (the graph's outputs).
    """
    consts = dict(consts)
    done: Counter = Counter()
    out: list = []
    fed: set = set()  # constants that a folded node read
    for n in nodes:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
            v = constant_value(n)
            if v is not None:
                consts[n.output[0]] = v
        if n.name not in emitted or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            out.append(n)
            continue
        to = None
        if n.op_type == "CastLike" and len(n.input) == 2:
            to = types.get(n.input[1])
        elif n.op_type == "Cast":
            a = next((a for a in n.attribute if a.name == "to"), None)
            to = dtype_name(a.i) if a is not None else None
        if to is None:
            out.append(n)
            continue
        new = None
        src = consts.get(n.input[0])
        if src is not None:
            value = cast_exactly(np.asarray(src), to)
            if value is not None:
                new = helper.make_node("Constant", [], list(n.output), name=n.name,
                                       value=numpy_helper.from_array(value, n.output[0]))
                kind = f"{n.op_type}->Constant"
        if new is None and n.op_type == "CastLike":
            new = helper.make_node("Cast", [n.input[0]], list(n.output), name=n.name, to=dtype_enum(to))
            kind = "CastLike->Cast"
        if new is None or not native(new):
            out.append(n)
            continue
        if new.op_type == "Constant":
            consts[n.output[0]] = value
            fed.add(n.input[0])
        types[n.output[0]] = to
        done[kind] += 1
        out.append(new)
    if fed:
        used = {x for n in out for x in n.input} | _subgraph_inputs(out) | set(keep)
        kept = [n for n in out if not (n.op_type == "Constant" and n.name in emitted and n.output
                                       and n.output[0] in fed and n.output[0] not in used)]
        if len(kept) != len(out):
            done["Constant dropped"] += len(out) - len(kept)
        out = kept
    return out, done
