"""The small builder every decomposition writes its nodes with: fresh names, typed constants.

:class:`Builder` collects the nodes that replace one node; :class:`Decline` is what any step
raises, with the reason, when it cannot build them (the planner then tries the next way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


FLOATS = frozenset({"float", "double", "float16", "bfloat16"})



INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})



NUMERIC = FLOATS | INTS



class Decline(Exception):
    """A rule does not handle this node; the message says why (shown when no rule fits)."""



@dataclass
class Builder:
    """Collects the nodes that replace one node; gives fresh names and typed constants.

    :param types: value name -> dtype name (``"float"``...) for values visible to the node.
    :param shapes: value name -> shape list (ints, dim names or None) where known.
    :param consts: value name -> numpy array for initializers and Constant outputs.
    :param opsets: domain (``"ai.onnx"``...) -> version.
    :param fresh: returns a model-wide unique name for a prefix.
    """

    types: dict
    shapes: dict
    consts: dict
    opsets: dict
    fresh: Callable[[str], str]
    prefix: str = "n"
    nodes: list = field(default_factory=list)

    def opset_of(self, domain: str) -> int | None:
        return self.opsets.get(domain)

    @property
    def opset(self) -> int:
        return self.opsets.get("ai.onnx", 1)

    def dtype(self, name: str) -> str | None:
        return self.types.get(name)

    def shape(self, name: str):
        return self.shapes.get(name)

    def rank(self, name: str) -> int | None:
        s = self.shapes.get(name)
        return None if s is None else len(s)

    def const_value(self, name: str):
        """The numpy value of *name* when it is an initializer or a Constant output, else None."""
        return self.consts.get(name) if name else None

    def op(self, op_type: str, *inputs: str, outputs: int | list | None = None, domain: str = "", **attrs):
        """Append a node; return its output name (or names when *outputs* > 1 or a list)."""
        if isinstance(outputs, list):
            outs = outputs
        else:
            outs = [self.fresh(f"{self.prefix}_{op_type}") for _ in range(outputs or 1)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(f"{self.prefix}/{op_type}"),
                                           domain=domain, **attrs))
        out_dtype = attrs.get("to")
        for o in outs:
            if out_dtype is not None:
                self.types[o] = dtype_name(out_dtype)
        return outs[0] if len(outs) == 1 else outs

    def const(self, value, dtype: str | None = None, like: str | None = None) -> str:
        """A Constant node holding *value*, typed *dtype* or like the value *like*.

        :raises Decline: when the dtype is needed but unknown.
        """
        if dtype is None and like is not None:
            dtype = self.dtype(like)
            if dtype is None:
                raise Decline(f"dtype of {like!r} unknown, cannot type a constant")
        arr = np.asarray(value, dtype=_np_dtype(dtype) if dtype else None)
        name = self.fresh(f"{self.prefix}_const")
        t = numpy_helper.from_array(arr, name)
        if dtype == "bfloat16":
            t = helper.make_tensor(name, onnx.TensorProto.BFLOAT16, arr.shape, np.asarray(value, np.float32).ravel())
        self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh(f"{self.prefix}/Constant"),
                                           value=t))
        self.consts[name] = np.asarray(value)
        self.types[name] = dtype or dtype_name(helper.np_dtype_to_tensor_dtype(arr.dtype))
        return name

    def ints(self, values) -> str:
        """An int64 1-D constant (axes, shapes, starts...)."""
        return self.const(np.asarray(values, np.int64).reshape(-1), "int64")

    def scalar_int(self, value) -> str:
        return self.const(np.asarray(value, np.int64), "int64")



def _np_dtype(name: str):
    if name == "bfloat16":
        return np.float32
    return helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, name.upper()))



def dtype_name(elem: int) -> str:
    return helper.tensor_dtype_to_string(elem).removeprefix("TensorProto.").lower()



def dtype_enum(name: str) -> int:
    return getattr(onnx.TensorProto, name.upper())
