"""Layout ops: Flatten, Expand, DepthToSpace/SpaceToDepth, Trilu, OneHot; Shape and Range."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_coverage.plan.rules.base import NUMERIC, Builder, Decline, Rule, attr, dim, dtype_enum, need_rank, only_attrs, unsqueeze


def _flatten(b: Builder, node) -> None:
    x = node.input[0]
    r = need_rank(b, x, "flatten.reshape")
    axis = attr(node, "axis", 1)
    axis = axis + r if axis < 0 else axis
    shape = b.shape(x)
    head = shape[:axis]
    if all(isinstance(d, int) and d > 0 for d in head):
        target = b.ints([int(np.prod(head, dtype=np.int64)) if head else 1, -1])
    else:
        tail = shape[axis:]
        if all(isinstance(d, int) and d > 0 for d in tail):
            target = b.ints([-1, int(np.prod(tail, dtype=np.int64)) if tail else 1])
        else:
            s = b.op("Shape", x)
            def prod(lo, hi):
                if lo == hi:
                    return b.ints([1])
                part = b.op("Slice", s, b.ints([lo]), b.ints([hi]), b.ints([0]))
                return b.op("ReduceProd", part, keepdims=1) if b.opset < 18 else \
                    b.op("ReduceProd", part, b.ints([0]), keepdims=1)
            target = b.op("Concat", prod(0, axis), prod(axis, r), axis=0)
    b.op("Reshape", x, target, outputs=[node.output[0]])


def _expand(b: Builder, node) -> None:
    x, shape = node.input
    d = b.dtype(x)
    if d == "bool":
        ones = b.op("ConstantOfShape", shape, value=_tensor(False, "bool"))
        b.op("Or", x, ones, outputs=[node.output[0]])
        return
    if d not in NUMERIC:
        raise Decline(f"expand.mul: dtype {d or 'unknown'} not handled")
    ones = b.op("ConstantOfShape", shape, value=_tensor(1, d))
    b.op("Mul", x, ones, outputs=[node.output[0]])


def _tensor(v, d):
    from onnx import helper
    return helper.make_tensor("value", dtype_enum(d), [1], [v])


def _depth_space(to_space: bool):
    rule = "depthtospace.reshape" if to_space else "spacetodepth.reshape"

    def build(b: Builder, node) -> None:
        only_attrs(node, rule, {"blocksize": None, "mode": {"DCR", "CRD"}})
        x = node.input[0]
        shape = b.shape(x)
        if shape is None or len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape):
            raise Decline(f"{rule}: needs a static 4-D input shape")
        n, c, h, w = shape
        bs = attr(node, "blocksize")
        mode = attr(node, "mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if to_space:
            if mode == "DCR":
                t = b.op("Reshape", x, b.ints([n, bs, bs, c // bs // bs, h, w]))
                t = b.op("Transpose", t, perm=[0, 3, 4, 1, 5, 2])
            else:
                t = b.op("Reshape", x, b.ints([n, c // bs // bs, bs, bs, h, w]))
                t = b.op("Transpose", t, perm=[0, 1, 4, 2, 5, 3])
            b.op("Reshape", t, b.ints([n, c // bs // bs, h * bs, w * bs]), outputs=[node.output[0]])
        else:
            t = b.op("Reshape", x, b.ints([n, c, h // bs, bs, w // bs, bs]))
            t = b.op("Transpose", t, perm=[0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])
            b.op("Reshape", t, b.ints([n, c * bs * bs, h // bs, w // bs]), outputs=[node.output[0]])
    return build


def _trilu(where: bool):
    rule = "trilu.where" if where else "trilu.mul"

    def build(b: Builder, node) -> None:
        only_attrs(node, rule, {"upper": {0, 1}})
        x = node.input[0]
        r = need_rank(b, x, rule)
        d = b.dtype(x)
        if not where and d not in NUMERIC:
            raise Decline(f"{rule}: dtype {d or 'unknown'} is not numeric")
        rows = b.op("Range", b.scalar_int(0), _scalar(b, dim(b, x, r - 2)), b.scalar_int(1))
        cols = b.op("Range", b.scalar_int(0), _scalar(b, dim(b, x, r - 1)), b.scalar_int(1))
        diff = b.op("Sub", cols, unsqueeze(b, rows, [1]))  # [M, N]: j - i
        if len(node.input) > 1 and node.input[1]:
            k = b.op("Reshape", node.input[1], b.ints([]))
        else:
            k = b.scalar_int(0)
        upper = attr(node, "upper", 1)
        keep = b.op("GreaterOrEqual" if upper else "LessOrEqual", diff, k)
        if where:
            zero = b.op("Cast", b.scalar_int(0), to=dtype_enum(d)) if d else None
            if zero is None:
                raise Decline(f"{rule}: input dtype unknown")
            b.op("Where", keep, x, zero, outputs=[node.output[0]])
        else:
            b.op("Mul", x, b.op("Cast", keep, to=dtype_enum(d)), outputs=[node.output[0]])
    return build


def _scalar(b: Builder, one: str) -> str:
    return b.op("Reshape", one, b.ints([]))


def _onehot(where: bool):
    rule = "onehot.where" if where else "onehot.mul"

    def build(b: Builder, node) -> None:
        only_attrs(node, rule, {"axis": None})
        ind, depth, values = node.input
        r = need_rank(b, ind, rule)
        axis = attr(node, "axis", -1)
        axis = axis + r + 1 if axis < 0 else axis
        vd = b.dtype(values)
        if vd is None:
            raise Decline(f"{rule}: dtype of values unknown")
        if not where and vd not in NUMERIC:
            raise Decline(f"{rule}: values dtype {vd} is not numeric")
        d = b.op("Cast", b.op("Reshape", depth, b.ints([])), to=dtype_enum("int64"))
        idx = b.op("Cast", ind, to=dtype_enum("int64"))
        # negative indices count from the end: idx + depth * (idx < 0)
        idx = b.op("Add", idx, b.op("Mul", d, b.op("Cast", b.op("Less", idx, b.scalar_int(0)),
                                                   to=dtype_enum("int64"))))
        dv = b.const_value(depth)
        if dv is not None:  # the usual case (num_classes): the positions are a constant, no Range
            rng = b.ints(list(range(int(np.asarray(dv).reshape(-1)[0]))))
        else:
            rng = b.op("Range", b.scalar_int(0), d, b.scalar_int(1))
        trailing = r - axis  # dims of the output after the one-hot axis
        if trailing:
            rng = unsqueeze(b, rng, list(range(1, trailing + 1)))
        hot = b.op("Equal", unsqueeze(b, idx, [axis]), rng)
        off = b.op("Gather", values, b.scalar_int(0), axis=0)
        on = b.op("Gather", values, b.scalar_int(1), axis=0)
        if where:
            b.op("Where", hot, on, off, outputs=[node.output[0]])
        else:
            h = b.op("Cast", hot, to=dtype_enum(vd))
            b.op("Add", b.op("Mul", h, b.op("Sub", on, off)), off, outputs=[node.output[0]])
    return build


#: the types a data-movement op is widened to int32 from: every value fits, so the round trip is exact
_NARROW = {"bool", "int8", "uint8", "int16", "uint16"}


def _slice_widen(b: Builder, node) -> None:
    """Slice of a narrow type (NMS masks are bool) as Cast to int32, Slice, Cast back."""
    rule = "slice.widen"
    d = b.dtype(node.input[0])
    if d not in _NARROW:
        raise Decline(f"{rule}: handles {', '.join(sorted(_NARROW))} data (a Cast to int32 and back is exact), "
                      f"not {d or 'an unknown type'}")
    wide = b.op("Cast", node.input[0], to=dtype_enum("int32"))
    part = b.op("Slice", wide, *node.input[1:], **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    b.op("Cast", part, to=dtype_enum(d), outputs=[node.output[0]])


def _shape_constant(b: Builder, node) -> None:
    rule = "shape.constant"
    only_attrs(node, rule, {"start": None, "end": None})
    shape = b.shape(node.input[0])
    if shape is None or not all(isinstance(v, int) and v >= 0 for v in shape):
        raise Decline(f"{rule}: the shape of {node.input[0]!r} is not static ({shape})")
    r = len(shape)
    start, end = attr(node, "start", 0), attr(node, "end", r)
    start, end = (min(max(v + r if v < 0 else v, 0), r) for v in (start, end))
    b.op("Identity", b.ints(shape[start:end]), outputs=[node.output[0]])


#: Range's element types that CumSum handles too
_RANGE_TYPES = {"float", "double", "int32", "int64"}


def range_values(start, limit, delta, dtype: str) -> np.ndarray:
    """Range as onnxruntime computes it: n = ceil((limit - start) / delta) in double, each element
    the previous one plus delta in the element type (not start + i * delta: float results differ)."""
    t = helper.tensor_dtype_to_np_dtype(dtype_enum(dtype))
    start, limit, delta = (np.asarray(v).astype(t).reshape(()) for v in (start, limit, delta))
    n = max(int(np.ceil(float(limit - start) / float(delta))), 0)
    steps = np.full(n, delta, t)
    if n:
        steps[0] = start
    return np.cumsum(steps, dtype=t)


def _range_constant(b: Builder, node) -> None:
    rule = "range.constant"
    vals = [b.const_value(x) for x in node.input]
    d = b.dtype(node.input[0])
    if any(v is None for v in vals) or d is None:
        raise Decline(f"{rule}: start, limit and delta must be constants (range.cumsum handles run-time values)")
    if float(np.asarray(vals[2], np.float64)) == 0:
        raise Decline(f"{rule}: delta is 0")
    n = np.ceil((float(np.asarray(vals[1], np.float64)) - float(np.asarray(vals[0], np.float64)))
                / float(np.asarray(vals[2], np.float64)))
    if n > 1 << 20:
        raise Decline(f"{rule}: {int(n)} elements is too many for a constant")
    b.op("Identity", b.const(range_values(*vals, d), d), outputs=[node.output[0]])


def _range_cumsum(b: Builder, node) -> None:
    """n = max(ceil((limit - start) / delta), 0) in double; CumSum of [start, delta, delta, ...] sliced to
    n elements: the running sum onnxruntime's kernel computes, element for element."""
    rule = "range.cumsum"
    s, lim, delta = node.input
    d = b.dtype(s)
    if d not in _RANGE_TYPES:
        raise Decline(f"{rule}: dtype {d or 'unknown'} not handled ({', '.join(sorted(_RANGE_TYPES))}: CumSum's types)")
    f64, i64 = dtype_enum("double"), dtype_enum("int64")
    diff = b.op("Sub", lim, s)
    if d != "double":
        diff, step = b.op("Cast", diff, to=f64), b.op("Cast", delta, to=f64)
    else:
        step = delta
    n = b.op("Max", b.op("Cast", b.op("Ceil", b.op("Div", diff, step)), to=i64), b.scalar_int(0))
    rest = b.op("Max", b.op("Sub", n, b.scalar_int(1)), b.scalar_int(0))
    steps = b.op("Expand", b.op("Reshape", delta, b.ints([1])), b.op("Reshape", rest, b.ints([1])))
    seq = b.op("Concat", b.op("Reshape", s, b.ints([1])), steps, axis=0)
    acc = b.op("CumSum", seq, b.scalar_int(0))
    b.op("Slice", acc, b.ints([0]), b.op("Reshape", n, b.ints([1])), b.ints([0]), outputs=[node.output[0]])


RULES = (
    Rule("slice.widen", "Slice", _slice_widen, since=1,
         note="bool and 8/16-bit data: Cast to int32, Slice, Cast back; exact"),
    Rule("shape.constant", "Shape", _shape_constant, since=1,
         note="a static shape (start/end applied) as a constant; exact"),
    Rule("range.constant", "Range", _range_constant, since=11,
         note="constant start, limit and delta: the values as onnxruntime computes them (a running sum), as a "
              "constant; exact"),
    Rule("range.cumsum", "Range", _range_cumsum, since=11, dtypes=frozenset(_RANGE_TYPES),
         note="n = ceil((limit - start) / delta) in double, CumSum of [start, delta, ...] sliced to n: the running "
              "sum onnxruntime computes (float Range is not start + i*delta there); exact"),
    Rule("flatten.reshape", "Flatten", _flatten, since=1, note="Reshape to [prod(dims[:axis]), prod(dims[axis:])]"),
    Rule("expand.mul", "Expand", _expand, since=8, note="x * ConstantOfShape(shape, 1) (Or with false for bool)"),
    Rule("depthtospace.reshape", "DepthToSpace", _depth_space(True), since=1,
         note="Reshape-Transpose-Reshape with a static NCHW shape, DCR and CRD"),
    Rule("spacetodepth.reshape", "SpaceToDepth", _depth_space(False), since=1,
         note="Reshape-Transpose-Reshape with a static NCHW shape"),
    Rule("trilu.where", "Trilu", _trilu(True), since=14, note="mask from Range(j) - Range(i) compared with k; Where"),
    Rule("trilu.mul", "Trilu", _trilu(False), since=14, dtypes=NUMERIC,
         note="same mask, multiplied in (no Where); inf/NaN in the dropped triangle become NaN", finite_only=True),
    Rule("onehot.where", "OneHot", _onehot(True), since=9, note="Equal(indices, Range(depth)) then Where(on, off)"),
    Rule("onehot.mul", "OneHot", _onehot(False), since=9, note="Equal(indices, Range(depth)) blended arithmetically",
         finite_only=True),
)
