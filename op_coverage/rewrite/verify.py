"""Run the original and the rewritten model in onnxruntime and compare every output.

Inputs come from the user (``.npz`` with one array per input name, or ``.pb`` TensorProto
files named after the inputs or in input order) or are generated from the input dtypes and
shapes (symbolic dims take ``dims[name]`` or 2).  Each output passes when
``|rewritten - original| <= atol + rtol * |original|`` everywhere, with tolerances chosen by
dtype (``TOLERANCES``); integers and booleans must match exactly; NaN must match NaN.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from op_coverage.errors import ScanError

#: (atol, rtol) per output dtype; decompositions reorder float arithmetic, so float32 gets
#: a few ulp of headroom per op on the path; float16/bfloat16 have 11/8 significant bits.
TOLERANCES = {"float": (1e-4, 1e-3), "double": (1e-8, 1e-6), "float16": (1e-2, 1e-2),
              "bfloat16": (5e-2, 5e-2)}


class BadInputs(ScanError):
    """The ``--inputs`` file is missing, unreadable or does not match the model's inputs."""

    exit_code = 18
    kind = "bad-inputs"


class CannotVerify(ScanError):
    """onnxruntime cannot run the original model, so there is nothing to compare with."""

    exit_code = 6
    kind = "cannot-verify"


@dataclass
class OutputCheck:
    name: str
    dtype: str
    shape: list
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    ok: bool
    note: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Verification:
    """Per-output comparison of the rewritten model against the original."""

    outputs: list = field(default_factory=list)
    inputs: str = "generated"
    seed: int | None = 0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "inputs": self.inputs, "seed": self.seed,
                "outputs": [o.to_dict() for o in self.outputs]}


def graph_inputs(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def generate_inputs(model: onnx.ModelProto, seed: int = 0, dims: dict | None = None) -> dict:
    """Random feeds for *model*'s inputs respecting dtype and shape (dim names from *dims*, else 2)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise BadInputs(f"input {vi.name!r} is not a tensor; pass its value with --inputs FILE.npz")
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 2)
                 for d in tt.shape.dim]
        np_dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(np_dtype, np.floating):
            a = rng.standard_normal(shape).astype(np_dtype)
        elif np_dtype == np.bool_:
            a = np.asarray(rng.random(shape) < 0.5)  # a 0-d comparison is a numpy scalar, which onnxruntime refuses
        elif np.issubdtype(np_dtype, np.integer):
            a = rng.integers(0, 4, size=shape).astype(np_dtype)
        else:
            raise BadInputs(f"input {vi.name!r} has dtype {np_dtype}, which cannot be generated; "
                            "pass its value with --inputs FILE.npz")
        feeds[vi.name] = np.asarray(a, dtype=np_dtype)
    return feeds


def load_inputs(paths: list[str], model: onnx.ModelProto) -> dict:
    """Feeds from ``.npz`` files and/or ``.pb`` TensorProto files (name, or position, decides the input)."""
    names = [i.name for i in graph_inputs(model)]
    feeds: dict = {}
    pbs = 0
    for raw in paths:
        p = Path(raw)
        if not p.is_file():
            raise BadInputs(f"--inputs {p}: no such file; pass an .npz or .pb file")
        try:
            if p.suffix == ".npz":
                with np.load(p, allow_pickle=False) as z:
                    feeds.update({k: z[k] for k in z.files})
            elif p.suffix == ".pb":
                t = onnx.TensorProto()
                t.ParseFromString(p.read_bytes())
                name = t.name if t.name in names else (names[pbs] if pbs < len(names) else None)
                if name is None:
                    raise BadInputs(f"--inputs {p}: more .pb files than model inputs ({len(names)})")
                feeds[name] = numpy_helper.to_array(t)
                pbs += 1
            else:
                raise BadInputs(f"--inputs {p}: unknown kind {p.suffix!r}; use .npz (np.savez) or .pb (TensorProto)")
        except (ValueError, OSError) as e:
            raise BadInputs(f"--inputs {p}: cannot read it ({e}); write it with np.savez or onnx.numpy_helper") from None
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise BadInputs(f"--inputs: {', '.join(unknown)} is not an input of the model (inputs: {', '.join(names)})")
    missing = [n for n in names if n not in feeds]
    if missing:
        raise BadInputs(f"--inputs: no value for {', '.join(missing)}; add it to the .npz")
    return feeds


def _session(model_path_or_bytes):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model_path_or_bytes, so, providers=["CPUExecutionProvider"])


def compare(name: str, want: np.ndarray, got: np.ndarray, atol: float | None = None,
            rtol: float | None = None) -> OutputCheck:
    """Compare one output; tolerances default by dtype (exact for integers and booleans)."""
    want, got = np.asarray(want), np.asarray(got)
    dname = helper.tensor_dtype_to_string(helper.np_dtype_to_tensor_dtype(want.dtype)).split(".")[-1].lower() \
        if want.dtype != object else "object"
    da, dr = TOLERANCES.get(dname, (0.0, 0.0))
    atol = da if atol is None else atol
    rtol = dr if rtol is None else rtol
    if want.shape != got.shape:
        return OutputCheck(name, dname, list(want.shape), float("inf"), float("inf"), atol, rtol, False,
                           f"shape {list(got.shape)} instead of {list(want.shape)}")
    if want.dtype != got.dtype:
        return OutputCheck(name, dname, list(want.shape), float("inf"), float("inf"), atol, rtol, False,
                           f"dtype {got.dtype} instead of {want.dtype}")
    if want.size == 0:
        return OutputCheck(name, dname, list(want.shape), 0.0, 0.0, atol, rtol, True)
    if not np.issubdtype(want.dtype, np.number) and want.dtype != np.bool_:
        ok = bool(np.array_equal(want, got))
        return OutputCheck(name, dname, list(want.shape), 0.0 if ok else float("inf"), 0.0, atol, rtol, ok)
    w, g = want.astype(np.float64), got.astype(np.float64)
    nan_w, nan_g = np.isnan(w), np.isnan(g)
    same_inf = (w == g)
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity: masked out below
        diff = np.where(same_inf | (nan_w & nan_g), 0.0, np.abs(w - g))
    diff = np.where(nan_w ^ nan_g, np.inf, diff)
    rel = diff / np.maximum(np.abs(w), np.finfo(np.float64).tiny)
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(np.isfinite(w), w, 0))))
    note = ""
    if not ok:
        how = reordered_only(w, g, atol, rtol)
        if how:
            ok, note = True, f"differs only by the order of tied elements ({how})"
    return OutputCheck(name, dname, list(want.shape), float(diff.max()), float(np.where(diff == 0, 0, rel).max()),
                       atol, rtol, ok, note)


def _close(w: np.ndarray, g: np.ndarray, atol: float, rtol: float) -> bool:
    both_nan = np.isnan(w) & np.isnan(g)
    with np.errstate(invalid="ignore"):
        d = np.where((w == g) | both_nan, 0.0, np.abs(w - g))
    return bool(np.all(d <= atol + rtol * np.abs(np.where(np.isfinite(w), w, 0))))


def reordered_only(w: np.ndarray, g: np.ndarray, atol: float, rtol: float) -> str:
    """How *g* is *w* with tied elements in another order, or ``""`` when it is not.

    Sorting is stable and total, so rows (slices along axis 0) that compare as a multiset, or every
    slice along the last axis as a multiset, are the same values in another order: what a sort, TopK
    or NMS gives for equal scores when a rewrite changes the last bits or the evaluation order.
    """
    if w.ndim == 0 or w.shape[0] < 2 and w.shape[-1] < 2:
        return ""
    rows_w, rows_g = w.reshape(w.shape[0], -1), g.reshape(g.shape[0], -1)
    order_w = np.lexsort(rows_w.T[::-1]) if rows_w.shape[1] else np.arange(len(rows_w))
    order_g = np.lexsort(rows_g.T[::-1]) if rows_g.shape[1] else np.arange(len(rows_g))
    if w.shape[0] > 1 and _close(rows_w[order_w], rows_g[order_g], atol, rtol):
        moved = int(np.count_nonzero(np.any(rows_w != rows_g, axis=1)))
        return f"the same {w.shape[0]} rows as a multiset; {moved} in other places"
    if w.ndim > 1 and w.shape[-1] > 1 and _close(np.sort(w, axis=-1), np.sort(g, axis=-1), atol, rtol):
        return "every slice along the last axis holds the same values in another order"
    return ""


def verify(original, rewritten, feeds: dict, *, atol: float | None = None, rtol: float | None = None,
           inputs_label: str = "generated", seed: int | None = 0) -> Verification:
    """Run both models (paths or serialized bytes) on *feeds* and compare every output.

    :raises CannotVerify: onnxruntime cannot load or run the original model.
    """
    try:
        orig = _session(original)
        want = orig.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise CannotVerify(f"onnxruntime cannot run the original model ({str(e).splitlines()[0][:300]}); "
                           "pass --no-verify to skip verification, or --inputs with valid values") from None
    sess = None
    try:
        sess = _session(rewritten)
        got = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        out = [o.name for o in (sess.get_outputs() if sess else [])] or ["(model)"]
        return Verification([OutputCheck(n, "?", [], float("inf"), float("inf"), 0, 0, False,
                                         f"onnxruntime cannot run the rewritten model: {str(e).splitlines()[0][:300]}")
                             for n in out], inputs_label, seed)
    names = [o.name for o in orig.get_outputs()]
    return Verification([compare(n, w, g, atol, rtol) for n, w, g in zip(names, want, got)], inputs_label, seed)
