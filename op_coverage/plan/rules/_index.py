"""Indexing ops: GatherElements, GatherND, ScatterElements and ScatterND through flat indices;
TopK; Resize."""
from __future__ import annotations

import numpy as np

from op_coverage.plan.rules.base import Builder, Decline, Rule, attr, dim, dtype_enum, need_rank, only_attrs, reduce, squeeze, unsqueeze


def _static_shape(b: Builder, x: str, rule: str) -> list[int]:
    s = b.shape(x)
    if s is None or not all(isinstance(d, int) and d > 0 for d in s):
        raise Decline(f"{rule}: needs a static shape for {x!r} (has {s})")
    return s


def _strides(shape: list[int]) -> list[int]:
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


def _wrap_negative(b: Builder, idx: str, size: str) -> str:
    """idx + size * (idx < 0): negative indices count from the end."""
    neg = b.op("Cast", b.op("Less", idx, b.scalar_int(0)), to=dtype_enum("int64"))
    return b.op("Add", idx, b.op("Mul", neg, size))


def _gather_elements(b: Builder, node) -> None:
    only_attrs(node, "gatherelements.gather", {"axis": None})
    data, ind = node.input
    shape = _static_shape(b, data, "gatherelements.gather")
    r = len(shape)
    if need_rank(b, ind, "gatherelements.gather") != r:
        raise Decline("gatherelements.gather: indices rank differs from data rank")
    axis = attr(node, "axis", 0) % r
    st = _strides(shape)
    idx = _wrap_negative(b, b.op("Cast", ind, to=dtype_enum("int64")), b.scalar_int(shape[axis]))
    flat = b.op("Mul", idx, b.scalar_int(st[axis]))
    for d in range(r):
        if d == axis:
            continue
        n = b.op("Reshape", dim(b, ind, d), b.ints([]))
        rng = b.op("Range", b.scalar_int(0), n, b.scalar_int(1))
        rng = b.op("Reshape", rng, b.ints([-1 if k == d else 1 for k in range(r)]))
        flat = b.op("Add", flat, b.op("Mul", rng, b.scalar_int(st[d])))
    b.op("Gather", b.op("Reshape", data, b.ints([-1])), flat, axis=0, outputs=[node.output[0]])


def _gather_nd(b: Builder, node) -> None:
    """Gather on the data reshaped to [batch * prod(indexed dims), slice] with one flat index per
    index tuple: sum(index_k * stride_k), negative indices wrapped, batch offsets added."""
    rule = "gathernd.gather"
    only_attrs(node, rule, {"batch_dims": None})
    data, ind = node.input
    shape = _static_shape(b, data, rule)
    ishape = _static_shape(b, ind, rule)
    bd, q = attr(node, "batch_dims", 0), ishape[-1]
    if bd + q > len(shape) or ishape[:bd] != shape[:bd]:
        raise Decline(f"{rule}: batch_dims {bd} and index length {q} do not fit data {shape} / indices {ishape}")
    lead, rest = shape[bd:bd + q], shape[bd + q:]
    nb, nl = int(np.prod(shape[:bd], dtype=np.int64)), int(np.prod(lead, dtype=np.int64))
    ns = int(np.prod(rest, dtype=np.int64))
    flat_data = b.op("Reshape", data, b.ints([nb * nl, ns]))
    idx = _wrap_negative(b, b.op("Cast", ind, to=dtype_enum("int64")), b.ints(lead))
    flat = reduce(b, "ReduceSum", b.op("Mul", idx, b.ints(_strides(lead))), [len(ishape) - 1], keepdims=0)
    if bd:
        offsets = np.arange(nb, dtype=np.int64).reshape(shape[:bd] + [1] * (len(ishape) - 1 - bd)) * nl
        flat = b.op("Add", flat, b.const(offsets, "int64"))
    got = b.op("Gather", flat_data, flat, axis=0)  # indices.shape[:-1] + [slice]
    b.op("Reshape", got, b.ints(ishape[:-1] + rest), outputs=[node.output[0]])


def _scatter_elements_positions(b: Builder, node, rule: str):
    """For ScatterElements: the flat position in the data of every update element ([K]), the updates
    flattened ([K]), the data shape and K."""
    data, ind, upd = node.input
    shape = _static_shape(b, data, rule)
    ishape = _static_shape(b, ind, rule)
    r = len(shape)
    if len(ishape) != r:
        raise Decline(f"{rule}: indices rank differs from data rank")
    axis = attr(node, "axis", 0) % r
    st = _strides(shape)
    idx = _wrap_negative(b, b.op("Cast", ind, to=dtype_enum("int64")), b.scalar_int(shape[axis]))
    flat = b.op("Mul", idx, b.scalar_int(st[axis]))
    for d in range(r):
        if d != axis and ishape[d] > 1:
            grid = np.arange(ishape[d], dtype=np.int64).reshape([-1 if k == d else 1 for k in range(r)]) * st[d]
            flat = b.op("Add", flat, b.const(grid, "int64"))
    k = int(np.prod(ishape, dtype=np.int64))
    return shape, b.op("Reshape", flat, b.ints([k])), b.op("Reshape", upd, b.ints([k])), k


def _scatter_elements_nd(b: Builder, node) -> None:
    rule = "scatterelements.scatternd"
    only_attrs(node, rule, {"axis": None, "reduction": None})
    red = attr(node, "reduction", b"none")
    red = red.decode() if isinstance(red, bytes) else red
    need = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}.get(red)
    if need is None or b.opset < need:
        raise Decline(f"{rule}: reduction={red!r} needs ScatterND of opset {need or '?'}")
    shape, pos, upd, k = _scatter_elements_positions(b, node, rule)
    flat = b.op("Reshape", node.input[0], b.ints([-1]))
    out = b.op("ScatterND", flat, b.op("Reshape", pos, b.ints([k, 1])), upd,
               reduction=None if red == "none" else red)
    b.op("Reshape", out, b.ints(shape), outputs=[node.output[0]])


def _scatter_flat_positions(b: Builder, node, rule: str, reductions: bool = False):
    """Flat positions [M, S] each update element writes to, and the updates as [M, S]."""
    only_attrs(node, rule, {"reduction": None if reductions else {"none"}})
    data, ind, upd = node.input
    shape = _static_shape(b, data, rule)
    ishape = _static_shape(b, ind, rule)
    q = ishape[-1]
    st = _strides(shape)
    m = int(np.prod(ishape[:-1], dtype=np.int64))
    slice_size = int(np.prod(shape[q:], dtype=np.int64))
    idx = b.op("Reshape", b.op("Cast", ind, to=dtype_enum("int64")), b.ints([m, q]))
    idx = _wrap_negative(b, idx, b.ints(shape[:q]))
    base = reduce(b, "ReduceSum", b.op("Mul", idx, b.ints(st[:q])), [1], keepdims=1)  # [M, 1]
    pos = b.op("Add", base, b.ints(list(range(slice_size))))  # [M, S]
    return data, shape, pos, b.op("Reshape", upd, b.ints([m, slice_size])), m * slice_size


def _scatternd_elements(b: Builder, node) -> None:
    red = attr(node, "reduction", b"none")
    red = red.decode() if isinstance(red, bytes) else red
    need = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}.get(red)
    if need is None or b.opset < need:
        raise Decline(f"scatternd.scatterelements: reduction={red!r} needs ScatterElements of opset {need or '?'}")
    data, shape, pos, upd, _ = _scatter_flat_positions(b, node, "scatternd.scatterelements", reductions=True)
    flat = b.op("Reshape", data, b.ints([-1]))
    out = b.op("ScatterElements", flat, b.op("Reshape", pos, b.ints([-1])), b.op("Reshape", upd, b.ints([-1])),
               axis=0, reduction=None if red == "none" else red)
    b.op("Reshape", out, b.ints(shape), outputs=[node.output[0]])


def _scatternd_onehot(b: Builder, node) -> None:
    rule = "scatternd.onehot-matmul"
    d = b.dtype(node.input[0])
    if d not in ("float", "double"):
        raise Decline(f"{rule}: needs float or double data (MatMul carries the values), has {d or 'unknown'}")
    data, shape, pos, upd, k = _scatter_flat_positions(b, node, rule)
    n = int(np.prod(shape, dtype=np.int64))
    pos = b.op("Reshape", pos, b.ints([k, 1]))
    hot = b.op("Cast", b.op("Equal", pos, b.ints(list(range(n)))), to=dtype_enum(d))  # [K, N]
    written = reduce(b, "ReduceMax", hot, [0], keepdims=1)  # [1, N]
    keep = b.op("Mul", b.op("Reshape", data, b.ints([1, n])), b.op("Sub", b.const(1, d), written))
    new = b.op("MatMul", b.op("Reshape", upd, b.ints([1, k])), hot)
    b.op("Reshape", b.op("Add", keep, new), b.ints(shape), outputs=[node.output[0]])


def _topk1(b: Builder, node) -> None:
    only_attrs(node, "topk.k1-reduce", {"axis": None, "largest": {0, 1}, "sorted": {0, 1}})
    x, k = node.input
    kv = b.const_value(k)
    if kv is None or int(np.asarray(kv).reshape(-1)[0]) != 1:
        raise Decline("topk.k1-reduce: handles only a constant k = 1")
    axis = attr(node, "axis", -1)
    largest = attr(node, "largest", 1)
    vals, idx = (list(node.output) + ["", ""])[:2]
    if vals:
        reduce(b, "ReduceMax" if largest else "ReduceMin", x, [axis], 1, outputs=[vals])
    if idx:
        b.op("ArgMax" if largest else "ArgMin", x, axis=axis, keepdims=1, outputs=[idx])


def _topk_rank(b: Builder, node) -> None:
    """Stable rank of every element (greater ones, then equal ones before it), one-hot to k slots;
    the indices come out of a MatMul with Range, the values out of GatherElements (exact for any dtype)."""
    rule = "topk.rank-onehot"
    only_attrs(node, rule, {"axis": None, "largest": {0, 1}, "sorted": {0, 1}})
    x, k = node.input
    kv = b.const_value(k)
    if kv is None:
        raise Decline(f"{rule}: k is not a constant")
    kk = int(np.asarray(kv).reshape(-1)[0])
    shape = _static_shape(b, x, rule)
    r = len(shape)
    axis = attr(node, "axis", -1) % r
    n = shape[axis]
    if n > 4096:
        raise Decline(f"{rule}: axis length {n} > 4096 (the comparison matrix is n x n)")
    perm = list(range(r))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    xt = b.op("Transpose", x, perm=perm) if axis != r - 1 else x
    xi, xj = unsqueeze(b, xt, [r]), unsqueeze(b, xt, [r - 1])  # [..., n, 1], [..., 1, n]
    before = b.op("Greater" if attr(node, "largest", 1) else "Less", xj, xi)
    earlier = np.tril(np.ones((n, n), bool), -1)  # j < i
    tie = b.op("And", b.op("Equal", xj, xi), b.const(earlier, "bool"))
    rank = reduce(b, "ReduceSum", b.op("Cast", b.op("Or", before, tie), to=dtype_enum("float")), [r], keepdims=0)
    hot = b.op("Cast", b.op("Equal", unsqueeze(b, rank, [r]), b.const(np.arange(kk), "float")),
               to=dtype_enum("float"))  # [..., n, k]
    idx = b.op("MatMul", b.const(np.arange(n).reshape(1, n), "float"), hot)  # [..., 1, k]; exact below 2^24
    idx = b.op("Cast", squeeze(b, idx, [r - 1]), to=dtype_enum("int64"))
    vals = b.op("GatherElements", xt, idx, axis=r - 1)
    outs = (list(node.output) + ["", ""])[:2]
    for y, o in zip((vals, idx), outs):
        if not o:
            continue
        if axis != r - 1:
            b.op("Transpose", y, perm=perm, outputs=[o])
        else:
            b.op("Identity", y, outputs=[o])


def _resize_nearest(b: Builder, node) -> None:
    rule = "resize.nearest-repeat"
    only_attrs(node, rule, {"mode": {"nearest"}, "coordinate_transformation_mode":
                            {"half_pixel", "pytorch_half_pixel", "asymmetric"},
                            "nearest_mode": {"round_prefer_floor", "round_prefer_ceil", "floor"},
                            "cubic_coeff_a": None, "exclude_outside": {0}, "extrapolation_value": None})
    ctm = attr(node, "coordinate_transformation_mode", b"half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    nm = attr(node, "nearest_mode", b"round_prefer_floor")
    nm = nm.decode() if isinstance(nm, bytes) else nm
    if ctm == "asymmetric" and nm != "floor":
        raise Decline(f"{rule}: asymmetric coordinates need nearest_mode=floor to be a plain repeat")
    if attr(node, "mode", b"nearest") not in (b"nearest", "nearest"):
        raise Decline(f"{rule}: only mode=nearest")
    x = node.input[0]
    shape = _static_shape(b, x, rule)
    ins = list(node.input) + [""] * 4
    scales_in, sizes_in = (ins[2], ins[3]) if b.opset >= 11 else (ins[1], "")
    scales = b.const_value(scales_in) if scales_in else None
    sizes = b.const_value(sizes_in) if sizes_in else None
    if sizes is not None and np.asarray(sizes).size:
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if any(o % i for o, i in zip(sizes, shape)):
            raise Decline(f"{rule}: sizes {sizes} are not integer multiples of {shape}")
        factors = [o // i for o, i in zip(sizes, shape)]
    elif scales is not None and np.asarray(scales).size:
        sc = [float(v) for v in np.asarray(scales).reshape(-1)]
        if any(s < 1 or s != int(s) for s in sc):
            raise Decline(f"{rule}: scales {sc} are not integer upscale factors")
        factors = [int(s) for s in sc]
    else:
        raise Decline(f"{rule}: scales/sizes must be constants")
    if len(factors) != len(shape):
        raise Decline(f"{rule}: axes attribute / partial scales not handled")
    y = x
    inter, target = [], []
    for d, (n, f) in enumerate(zip(shape, factors)):
        inter += [n, f]
        target.append(n * f)
    y = unsqueeze(b, x, [2 * d + 1 for d in range(len(shape))])  # [n0, 1, n1, 1, ...]
    y = b.op("Expand", y, b.ints(inter))
    b.op("Reshape", y, b.ints(target), outputs=[node.output[0]])


def _resize_axis_matrix(node, opset: int, n: int, scale: float | None, size: int | None) -> np.ndarray:
    """The [n, out] matrix M with resize_1d(v) = v @ M, from onnx's reference Resize on the identity.

    Resize in nearest, linear and cubic modes is linear in its input and separable per axis, so
    applying it to the identity along one axis (scale 1 on the other, which every mode maps to
    itself) yields the interpolation weights, with onnx's own coordinate transforms,
    rounding modes, cubic coefficient, exclude_outside and antialias.
    """
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    keep = {a.name: a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")}
    inits = [numpy_helper.from_array(np.array([], np.float32), "roi")]
    if size is not None:
        inits += [numpy_helper.from_array(np.array([], np.float32), "scales"),
                  numpy_helper.from_array(np.array([n, size], np.int64), "sizes")]
        ins = ["x", "roi", "scales", "sizes"]
    else:
        inits.append(numpy_helper.from_array(np.array([1.0, scale], np.float32), "scales"))
        ins = ["x", "roi", "scales"]
    rn = helper.make_node("Resize", ins, ["y"])
    rn.attribute.extend(keep.values())
    g = helper.make_graph([rn], "axis", [helper.make_tensor_value_info("x", 11, [n, n])],
                          [helper.make_tensor_value_info("y", 11, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(opset, 13))])
    return ReferenceEvaluator(m).run(None, {"x": np.eye(n, dtype=np.float64)})[0]


def _resize_matmul(b: Builder, node) -> None:
    rule = "resize.matmul"
    only_attrs(node, rule, {"mode": None, "coordinate_transformation_mode": None, "nearest_mode": None,
                            "cubic_coeff_a": None, "exclude_outside": None, "antialias": None, "axes": None,
                            "keep_aspect_ratio_policy": None, "extrapolation_value": None})
    ctm = attr(node, "coordinate_transformation_mode", b"half_pixel")
    if (ctm.decode() if isinstance(ctm, bytes) else ctm) == "tf_crop_and_resize":
        raise Decline(f"{rule}: tf_crop_and_resize extrapolates a constant, which is not a linear map")
    if b.opset < 11:
        raise Decline(f"{rule}: handles opset 11+ (roi/scales/sizes inputs)")
    x = node.input[0]
    d = b.dtype(x)
    if d not in ("float", "double"):
        raise Decline(f"{rule}: needs float or double data (MatMul carries the values), has {d or 'unknown'}")
    shape = _static_shape(b, x, rule)
    ins = list(node.input) + [""] * 4
    scales = b.const_value(ins[2]) if ins[2] else None
    sizes = b.const_value(ins[3]) if ins[3] else None
    scales = None if scales is None or not np.asarray(scales).size else [float(v) for v in np.ravel(scales)]
    sizes = None if sizes is None or not np.asarray(sizes).size else [int(v) for v in np.ravel(sizes)]
    if scales is None and sizes is None:
        raise Decline(f"{rule}: scales/sizes must be constants")
    r = len(shape)
    axes = [a % r for a in (attr(node, "axes") or range(r))]
    policy = attr(node, "keep_aspect_ratio_policy", b"stretch")
    policy = policy.decode() if isinstance(policy, bytes) else policy
    if sizes is not None and policy != "stretch":
        ratios = [sz / shape[a] for sz, a in zip(sizes, axes)]
        s = min(ratios) if policy == "not_larger" else max(ratios)
        sizes = [int(round(s * shape[a])) for a in axes]
    y = x
    for i, a in enumerate(axes):
        sc = scales[i] if scales is not None else None
        sz = sizes[i] if sizes is not None else None
        if (sc is not None and sc == 1.0) or (sz is not None and sz == shape[a]):
            continue
        mat = _resize_axis_matrix(node, b.opset, shape[a], sc, sz)
        perm = list(range(r))
        perm[a], perm[-1] = perm[-1], perm[a]
        t = b.op("Transpose", y, perm=perm) if a != r - 1 else y
        t = b.op("MatMul", t, b.const(mat.astype(np.float32 if d == "float" else np.float64), d))
        y = b.op("Transpose", t, perm=perm) if a != r - 1 else t
    b.op("Identity", y, outputs=[node.output[0]])


RULES = (
    Rule("gatherelements.gather", "GatherElements", _gather_elements, since=11,
         note="Gather on the flattened data with flat indices built from Range per axis; static data shape"),
    Rule("gathernd.gather", "GatherND", _gather_nd, since=11,
         note="Gather on the data reshaped to [batch * indexed, slice] with flat indices (index tuple . strides, "
              "negative indices wrapped, batch_dims offsets); static shapes; exact"),
    Rule("scatterelements.scatternd", "ScatterElements", _scatter_elements_nd, since=11,
         note="ScatterND on the flattened data with one flat position per update element (reductions too, from "
              "opset 16/18); static shapes; exact"),
    Rule("scatternd.scatterelements", "ScatterND", _scatternd_elements, since=11,
         note="ScatterElements on the flattened data (reductions too, from opset 16/18); static shapes"),
    Rule("scatternd.onehot-matmul", "ScatterND", _scatternd_onehot, since=11,
         note="one-hot [K, N] mask and MatMul, no scatter op at all; float data, reduction=none; O(K*N) memory",
         penalty=10.0, finite_only=True),
    Rule("topk.k1-reduce", "TopK", _topk1, since=10,
         note="k = 1 only: ReduceMax/ReduceMin for values, ArgMax/ArgMin (first occurrence) for indices"),
    Rule("topk.rank-onehot", "TopK", _topk_rank, since=10,
         note="any constant k, any dtype: stable rank by pairwise comparison (n x n), one-hot to k slots, "
              "indices by MatMul with Range, values by GatherElements; axis length <= 4096; NaN ordering may differ",
         penalty=5.0),
    Rule("resize.nearest-repeat", "Resize", _resize_nearest, since=10,
         note="nearest mode with integer upscale factors (half_pixel, pytorch_half_pixel, or asymmetric+floor): "
              "Unsqueeze-Expand-Reshape repeat; linear and fractional scales are declined"),
    Rule("resize.matmul", "Resize", _resize_matmul, since=11,
         note="any nearest/linear/cubic Resize with a static shape and constant scales/sizes: one MatMul per resized "
              "axis with interpolation weights computed by onnx's reference Resize (exact up to float rounding); "
              "float data; not tf_crop_and_resize", penalty=2.0),
)
