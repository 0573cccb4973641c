"""Reductions and scans: ReduceL1/L2/LogSum/LogSumExp/SumSquare/Prod/Mean, ArgMax/ArgMin, CumSum,
global pooling."""
from __future__ import annotations

import numpy as np

from op_coverage.plan.rules.base import (FLOATS, NUMERIC, Builder, Decline, Rule, attr, dim, dtype_enum, float_only, need_rank, only_attrs,
                    reduce)


def _axes(b: Builder, node, rule: str):
    """Reduction axes from the attribute (opset < 18) or the constant second input; None = all."""
    if len(node.input) > 1 and node.input[1]:
        v = b.const_value(node.input[1])
        if v is None:
            raise Decline(f"{rule}: axes input {node.input[1]!r} is not a constant")
        axes = [int(a) for a in np.asarray(v).reshape(-1)]
        if not axes and attr(node, "noop_with_empty_axes", 0):
            return "noop"
        return axes or None
    axes = attr(node, "axes")
    if axes is None and attr(node, "noop_with_empty_axes", 0):
        return "noop"
    return list(axes) if axes is not None else None


def _reduction(kind: str):
    def build(b: Builder, node) -> None:
        rule = f"{kind.lower()}.compose"
        only_attrs(node, rule, {"axes": None, "keepdims": {0, 1}, "noop_with_empty_axes": {0, 1}})
        x, out = node.input[0], node.output[0]
        axes = _axes(b, node, rule)
        keep = attr(node, "keepdims", 1)
        if axes == "noop":
            raise Decline(f"{rule}: noop_with_empty_axes with empty axes is not handled")
        if kind == "ReduceL1":
            reduce(b, "ReduceSum", b.op("Abs", x), axes, keep, outputs=[out])
        elif kind == "ReduceL2":
            b.op("Sqrt", reduce(b, "ReduceSum", b.op("Mul", x, x), axes, keep), outputs=[out])
        elif kind == "ReduceSumSquare":
            reduce(b, "ReduceSum", b.op("Mul", x, x), axes, keep, outputs=[out])
        elif kind == "ReduceLogSum":
            b.op("Log", reduce(b, "ReduceSum", x, axes, keep), outputs=[out])
        elif kind == "ReduceLogSumExp":
            # max-shifted, so large inputs do not overflow: m + log(sum(exp(x - m)))
            m = reduce(b, "ReduceMax", x, axes, 1)
            s = reduce(b, "ReduceSum", b.op("Exp", b.op("Sub", x, m)), axes, keep)
            mk = m if keep else reduce(b, "ReduceMax", x, axes, 0)
            b.op("Add", b.op("Log", s), mk, outputs=[out])
    return build


def _arg(kind: str):
    """ArgMax/ArgMin: the extreme by ReduceMax/ReduceMin, Equal to find it, and the first (or last)
    position holding it by index arithmetic: ReduceMin(pos + n * miss) (ReduceMax(hit * (pos + 1)) - 1)."""
    def build(b: Builder, node) -> None:
        rule = f"{kind.lower()}.reduce"
        only_attrs(node, rule, {"axis": None, "keepdims": {0, 1}, "select_last_index": {0, 1}})
        x = node.input[0]
        d = b.dtype(x)
        if d not in NUMERIC:
            raise Decline(f"{rule}: dtype {d or 'unknown'} not handled")
        r = need_rank(b, x, rule)
        axis = attr(node, "axis", 0) % r
        m = reduce(b, "ReduceMax" if kind == "ArgMax" else "ReduceMin", x, [axis], 1)
        hit = b.op("Equal", x, m)
        if d in FLOATS:  # where the extreme is NaN (onnxruntime's reductions may give it), the first NaN
            nan_x = b.op("Not", b.op("Equal", x, x))
            nan_m = b.op("Not", b.op("Equal", m, m))
            hit = b.op("Or", hit, b.op("And", nan_x, nan_m))
        i64 = dtype_enum("int64")
        hit = b.op("Cast", hit, to=i64)
        n = b.op("Reshape", dim(b, x, axis), b.ints([]))
        pos = b.op("Reshape", b.op("Range", b.scalar_int(0), n, b.scalar_int(1)),
                   b.ints([-1 if k == axis else 1 for k in range(r)]))
        keep = attr(node, "keepdims", 1)
        if attr(node, "select_last_index", 0):
            last = reduce(b, "ReduceMax", b.op("Mul", hit, b.op("Add", pos, b.scalar_int(1))), [axis], keep)
            b.op("Sub", last, b.scalar_int(1), outputs=[node.output[0]])
        else:
            miss = b.op("Sub", b.scalar_int(1), hit)
            reduce(b, "ReduceMin", b.op("Add", pos, b.op("Mul", miss, n)), [axis], keep, outputs=[node.output[0]])
    return build


def _reduce_mean(b: Builder, node) -> None:
    """ReduceSum / n with n the static count of reduced elements (ReduceMean-18 takes its axes as an
    input, and targets that registered ReduceMean up to 17 often have ReduceSum-13, which does too)."""
    rule = "reducemean.reducesum"
    only_attrs(node, rule, {"axes": None, "keepdims": {0, 1}, "noop_with_empty_axes": {0, 1}})
    x = node.input[0]
    d = float_only(b, x, rule)
    shape = b.shape(x)
    axes = _axes(b, node, rule)
    if axes == "noop":
        b.op("Identity", x, outputs=[node.output[0]])
        return
    if shape is None:
        raise Decline(f"{rule}: rank of {x!r} unknown")
    r = len(shape)
    reduced = [shape[a % r] for a in (axes if axes is not None else range(r))]
    if not all(isinstance(v, int) and v > 0 for v in reduced):
        raise Decline(f"{rule}: the reduced dims of {x!r} are not static ({reduced})")
    n = int(np.prod(reduced, dtype=np.int64))
    total = reduce(b, "ReduceSum", x, axes, attr(node, "keepdims", 1))
    b.op("Div", total, b.const(float(n), d), outputs=[node.output[0]])


def _reduce_prod(b: Builder, node) -> None:
    """Products taken pairwise along the flattened reduced axes: log2(n) rounds of Slice and Mul."""
    rule = "reduceprod.mul-tree"
    only_attrs(node, rule, {"axes": None, "keepdims": {0, 1}, "noop_with_empty_axes": {0, 1}})
    if b.opset < 10:
        raise Decline(f"{rule}: handles opset 10+ (Slice with inputs)")
    x, out = node.input[0], node.output[0]
    shape = b.shape(x)
    if shape is None or not all(isinstance(v, int) and v >= 0 for v in shape):
        raise Decline(f"{rule}: needs a static shape for {x!r} (has {shape})")
    axes = _axes(b, node, rule)
    if axes == "noop":
        b.op("Identity", x, outputs=[out])
        return
    r = len(shape)
    axes = sorted({a % r for a in axes}) if axes is not None else list(range(r))
    kept = [i for i in range(r) if i not in axes]
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    keepdims = attr(node, "keepdims", 1)
    final = [1 if i in axes else shape[i] for i in range(r)] if keepdims else [shape[i] for i in kept]
    if n == 0:  # the product of nothing is 1
        b.op("Expand", b.const(1, like=x), b.ints(final), outputs=[out])
        return
    perm = kept + axes
    y = b.op("Transpose", x, perm=perm) if perm != list(range(r)) else x
    y = b.op("Reshape", y, b.ints([shape[i] for i in kept] + [n]))
    last = b.ints([-1])
    while n > 1:
        h = n // 2
        prod = b.op("Mul", b.op("Slice", y, b.ints([0]), b.ints([h]), last),
                    b.op("Slice", y, b.ints([h]), b.ints([2 * h]), last))
        if n % 2:
            prod = b.op("Concat", prod, b.op("Slice", y, b.ints([2 * h]), b.ints([n]), last), axis=-1)
        y, n = prod, h + n % 2
    b.op("Reshape", y, b.ints(final), outputs=[out])


def _cumsum(b: Builder, node) -> None:
    only_attrs(node, "cumsum.matmul", {"exclusive": {0, 1}, "reverse": {0, 1}})
    x, axis_in = node.input
    d = b.dtype(x)
    if d not in FLOATS | {"int32", "int64"}:
        raise Decline(f"cumsum.matmul: dtype {d or 'unknown'} not handled (float types, int32, int64)")
    a = b.const_value(axis_in)
    r = need_rank(b, x, "cumsum.matmul")
    exclusive, reverse = attr(node, "exclusive", 0), attr(node, "reverse", 0)
    if a is None:
        if r == 1:
            _cumsum_along(b, x, 0, r, d, exclusive, reverse, node.output[0])
            return
        # axis known only at run time: one scan per axis, the right one picked with Where
        ax = b.op("Reshape", b.op("Cast", axis_in, to=dtype_enum("int64")), b.ints([]))
        ax = b.op("Mod", b.op("Add", ax, b.scalar_int(r)), b.scalar_int(r))
        acc = None
        for k in range(r):
            yk = _cumsum_along(b, x, k, r, d, exclusive, reverse, None)
            acc = yk if acc is None else b.op("Where", b.op("Equal", ax, b.scalar_int(k)), yk, acc,
                                               outputs=[node.output[0]] if k == r - 1 else None)
        return
    axis = int(np.asarray(a).reshape(-1)[0]) % r
    _cumsum_along(b, x, axis, r, d, exclusive, reverse, node.output[0])


def _cumsum_along(b: Builder, x: str, axis: int, r: int, d: str, exclusive: int, reverse: int, out):
    perm = list(range(r))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    xt = b.op("Transpose", x, perm=perm) if axis != r - 1 else x
    # T[i, j] = 1 where i contributes to j: i <= j (inclusive), i < j (exclusive); reversed: i >= j / i > j
    n = b.op("Squeeze", dim(b, x, axis), b.ints([0])) if b.opset >= 13 else \
        b.op("Squeeze", dim(b, x, axis), axes=[0])
    idx = b.op("Range", b.scalar_int(0), n, b.scalar_int(1))
    rows = b.op("Unsqueeze", idx, b.ints([1])) if b.opset >= 13 else b.op("Unsqueeze", idx, axes=[1])
    cmp = {(0, 0): "LessOrEqual", (1, 0): "Less", (0, 1): "GreaterOrEqual", (1, 1): "Greater"}[(exclusive, reverse)]
    tri = b.op("Cast", b.op(cmp, rows, idx), to=dtype_enum(d))
    outs = [out] if out else None
    y = b.op("MatMul", xt, tri, outputs=None if axis != r - 1 else outs)
    if axis != r - 1:
        y = b.op("Transpose", y, perm=perm, outputs=outs)
    return y


def _global_pool(red: str):
    def build(b: Builder, node) -> None:
        x = node.input[0]
        r = need_rank(b, x, f"global{red[6:].lower()}pool.reduce")
        reduce(b, red, x, list(range(2, r)), 1, outputs=[node.output[0]])
    return build


RULES = (
    Rule("reducel1.compose", "ReduceL1", _reduction("ReduceL1"), since=1, dtypes=NUMERIC, note="ReduceSum(Abs(x))"),
    Rule("reducel2.compose", "ReduceL2", _reduction("ReduceL2"), since=1, dtypes=NUMERIC, note="Sqrt(ReduceSum(x*x))"),
    Rule("reducesumsquare.compose", "ReduceSumSquare", _reduction("ReduceSumSquare"), since=1, dtypes=NUMERIC,
         note="ReduceSum(x*x)"),
    Rule("reducelogsum.compose", "ReduceLogSum", _reduction("ReduceLogSum"), since=1, dtypes=FLOATS,
         note="Log(ReduceSum(x))"),
    Rule("reducelogsumexp.compose", "ReduceLogSumExp", _reduction("ReduceLogSumExp"), since=1, dtypes=FLOATS,
         note="max-shifted log-sum-exp: no overflow for large inputs (ONNX's own body overflows)"),
    Rule("argmax.reduce", "ArgMax", _arg("ArgMax"), since=1, dtypes=NUMERIC,
         note="ReduceMax, Equal, then the first (select_last_index: last) position holding it by Range arithmetic "
              "and ReduceMin/ReduceMax; a NaN extreme picks the first NaN; exact"),
    Rule("argmin.reduce", "ArgMin", _arg("ArgMin"), since=1, dtypes=NUMERIC,
         note="as argmax.reduce with ReduceMin; exact"),
    Rule("reducemean.reducesum", "ReduceMean", _reduce_mean, since=1, dtypes=FLOATS,
         note="ReduceSum / n over static reduced dims; exact up to the rounding of the division"),
    Rule("reduceprod.mul-tree", "ReduceProd", _reduce_prod, since=1, dtypes=NUMERIC,
         note="pairwise products (log2(n) rounds of Slice and Mul) over the flattened reduced axes; static shape; "
              "exact for integers, floats round in another order than a sequential product (a few ulp). "
              "Exp(ReduceSum(Log(x))) is not used: it is not exact and fails for zeros and negatives"),
    Rule("cumsum.matmul", "CumSum", _cumsum, since=11, dtypes=FLOATS | {"int32", "int64"},
         note="MatMul with a triangular 0/1 matrix built from Range and a comparison; O(n^2) along the axis"),
    Rule("globalaveragepool.reduce", "GlobalAveragePool", _global_pool("ReduceMean"), since=1, dtypes=FLOATS,
         note="ReduceMean over the spatial axes, keepdims"),
    Rule("globalmaxpool.reduce", "GlobalMaxPool", _global_pool("ReduceMax"), since=1, dtypes=FLOATS,
         note="ReduceMax over the spatial axes, keepdims"),
)
