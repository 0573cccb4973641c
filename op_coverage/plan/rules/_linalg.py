"""Gemm and Einsum as MatMul, Transpose, Mul, Add and ReduceSum."""
from __future__ import annotations

import numpy as np

from op_coverage.plan.rules.base import NUMERIC, Builder, Decline, Rule, attr, only_attrs, reduce, squeeze, unsqueeze


def _gemm(b: Builder, node) -> None:
    only_attrs(node, "gemm.matmul", {"alpha": None, "beta": None, "transA": {0, 1}, "transB": {0, 1},
                                      "broadcast": {0, 1}})
    a, w = node.input[0], node.input[1]
    c = node.input[2] if len(node.input) > 2 and node.input[2] else None
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    if attr(node, "transA", 0):
        a = b.op("Transpose", a, perm=[1, 0])
    if attr(node, "transB", 0):
        w = b.op("Transpose", w, perm=[1, 0])
    out = node.output[0]
    has_c = c is not None and beta != 0.0
    y = b.op("MatMul", a, w, outputs=None if (alpha != 1.0 or has_c) else [out])
    if alpha != 1.0:
        y = b.op("Mul", y, b.const(alpha, like=node.input[0]), outputs=None if has_c else [out])
    if has_c:
        if beta != 1.0:
            c = b.op("Mul", c, b.const(beta, like=c))
        b.op("Add", y, c, outputs=[out])


def _expand_ellipsis(b: Builder, node, eq: str) -> str:
    """Replace '...' by explicit letters (right-aligned broadcast dims), using the operands' ranks."""
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    widths = []
    for name, t in zip(node.input, terms):
        if "..." not in t:
            widths.append(0)
            continue
        r = b.rank(name)
        if r is None:
            raise Decline(f"einsum: '...' needs the rank of {name!r}, which is unknown")
        widths.append(r - (len(t) - 3))
    m = max(widths, default=0)
    if m > len(free):
        raise Decline("einsum: too many '...' dimensions")
    letters = "".join(free[:m])
    terms = [t.replace("...", letters[m - w:]) for t, w in zip(terms, widths)]
    if arrow:
        out = out.replace("...", letters)
    else:
        singles = "".join(sorted(c for c in set("".join(terms)) if "".join(terms).count(c) == 1 and c not in letters))
        out = letters + singles
    return ",".join(terms) + "->" + out


def _take_diagonals(b: Builder, x: str, t: str) -> tuple[str, str]:
    """For each index repeated in one operand ('ii'), keep the diagonal: Mul by an identity mask, ReduceSum."""
    while len(set(t)) != len(t):
        c = next(ch for ch in t if t.count(ch) > 1)
        p = t.index(c)
        q = t.index(c, p + 1)
        shape = b.shape(x)
        n = shape[p] if shape is not None and len(shape) == len(t) else None
        if not isinstance(n, int) or n <= 0:
            raise Decline(f"einsum: diagonal over {c!r} needs a static size for that dimension")
        mask = np.eye(n).reshape([n if i in (p, q) else 1 for i in range(len(t))])
        x = reduce(b, "ReduceSum", b.op("Mul", x, b.const(mask, like=x)), [q], keepdims=0)
        shape = [d for i, d in enumerate(shape) if i != q]
        b.shapes[x] = shape
        t = t[:q] + t[q + 1:]
    return x, t


def _parse_equation(eq: str, n_inputs: int, b: Builder | None = None, node=None, diagonals: bool = False):
    eq = eq.replace(" ", "")
    if "..." in eq:
        if b is None:
            raise Decline("einsum: equations with '...' are not handled")
        eq = _expand_ellipsis(b, node, eq)
    if "->" not in eq:  # implicit output: the indices that occur once, in alphabetical order
        letters = eq.replace(",", "")
        eq = eq + "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise Decline(f"einsum: equation has {len(terms)} operands, node has {n_inputs} inputs")
    for t in (terms if not diagonals else []) + [out]:
        if len(set(t)) != len(t):
            raise Decline(f"einsum: repeated index in {t!r} (diagonal) is not handled")
    return terms, out


def _einsum_matmul(b: Builder, node) -> None:
    """Two operands, at most one free index per side and exactly one contracted index: MatMul."""
    terms, out = _parse_equation(attr(node, "equation").decode(), len(node.input), b, node)
    if len(terms) != 2:
        raise Decline("einsum.matmul: needs exactly two operands")
    ta, tb = terms
    summed_a = [c for c in ta if c not in tb and c not in out]
    summed_b = [c for c in tb if c not in ta and c not in out]
    x, y = node.input
    if summed_a:
        x = reduce(b, "ReduceSum", x, [ta.index(c) for c in summed_a], keepdims=0)
        ta = "".join(c for c in ta if c not in summed_a)
    if summed_b:
        y = reduce(b, "ReduceSum", y, [tb.index(c) for c in summed_b], keepdims=0)
        tb = "".join(c for c in tb if c not in summed_b)
    batch = [c for c in ta if c in tb and c in out]
    contracted = [c for c in ta if c in tb and c not in out]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    if len(contracted) != 1 or len(left) > 1 or len(right) > 1:
        raise Decline(f"einsum.matmul: {ta},{tb}->{out} is not one batched matrix product "
                      "(needs one contracted index and at most one free index per operand)")
    k = contracted[0]
    order_a = batch + left + [k]
    order_b = batch + [k] + right
    if list(ta) != order_a:
        x = b.op("Transpose", x, perm=[ta.index(c) for c in order_a])
    if list(tb) != order_b:
        y = b.op("Transpose", y, perm=[tb.index(c) for c in order_b])
    nb = len(batch)
    if not left:
        x = unsqueeze(b, x, [nb])
    if not right:
        y = unsqueeze(b, y, [nb + 1])
    z = b.op("MatMul", x, y)
    produced = batch + left + right
    drop = ([nb] if not left else []) + ([nb + 1] if not right else [])  # MatMul output: [B..., L|1, R|1]
    final_order = [produced.index(c) for c in out]
    if drop:
        z = squeeze(b, z, drop, outputs=None if final_order != list(range(len(out))) else [node.output[0]])
    if final_order != list(range(len(out))):
        b.op("Transpose", z, perm=final_order, outputs=[node.output[0]])
    elif not drop:
        b.op("Identity", z, outputs=[node.output[0]])


def _einsum_mul_reduce(b: Builder, node) -> None:
    """Any explicit equation without diagonals: align operands, multiply, ReduceSum summed indices."""
    terms, out = _parse_equation(attr(node, "equation").decode(), len(node.input), b, node, diagonals=True)
    inputs = list(node.input)
    for k, (name, t) in enumerate(zip(inputs, terms)):
        if len(set(t)) != len(t):
            inputs[k], terms[k] = _take_diagonals(b, name, t)
    letters = list(out) + sorted({c for t in terms for c in t} - set(out))
    aligned = []
    for name, t in zip(inputs, terms):
        present = [c for c in letters if c in t]
        x = name
        if list(t) != present:
            x = b.op("Transpose", x, perm=[t.index(c) for c in present])
        missing = [i for i, c in enumerate(letters) if c not in t]
        if missing:
            x = unsqueeze(b, x, missing)
        aligned.append(x)
    prod = aligned[0]
    for x in aligned[1:]:
        prod = b.op("Mul", prod, x)
    summed = list(range(len(out), len(letters)))
    if summed:
        reduce(b, "ReduceSum", prod, summed, keepdims=0, outputs=[node.output[0]])
    else:
        b.op("Identity", prod, outputs=[node.output[0]])


RULES = (
    Rule("gemm.matmul", "Gemm", _gemm, since=7, dtypes=NUMERIC,
         note="Transpose (transA/transB) + MatMul, Mul by alpha, Add beta*C; exact"),
    Rule("einsum.matmul", "Einsum", _einsum_matmul, since=12, dtypes=NUMERIC,
         note="batched matrix products (bij,bjk->bik, bhqd,bhkd->bhqk, ...ij,...jk->...ik, ij,j->i) as one MatMul"),
    Rule("einsum.mul-reducesum", "Einsum", _einsum_mul_reduce, since=12, dtypes=NUMERIC,
         note="any equation ('...' and diagonals too): diagonals by an identity mask, broadcast Mul, ReduceSum "
              "(materialises the outer product: memory grows with every index)", penalty=10.0),
)

