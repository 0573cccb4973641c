"""Replacements for the aten ops a torch target lacks (issue 12, item 5).

For an op that a :class:`~hal.op_support.torch_profile.TorchProfile` judges *missing*, :func:`plan_op`
finds, in this order:

1. ``decomposition``: torch's aten-level decomposition table (``torch._decomp.decomposition_table``;
   the ``torch._refs`` entries that rewrite into ``prims`` are left out, as the emulator does, since no
   device implements prims).  The decomposition is *run* once on small CPU tensors built from the op's
   schema (:mod:`hal.op_support.observe_inputs`) under a ``TorchDispatchMode`` that records every aten op it calls,
   at the level a device kernel receives them (after CompositeImplicitAutograd).  Each piece is judged
   against the target; a missing piece is planned again, recursively (depth-bounded, cycles refused).
   The plan holds when every piece, all the way down, is native or composite on the target.
2. ``fused_op``: a ``hal.ops`` fused operator the target's hal backend declares a kernel for
   (in its folder's ``backend.json``, see :mod:`hal.plugin.facts`), e.g. ``native_layer_norm`` -> ``hal.ops.layer_norm``.
3. ``cpu_fallback``: the vendor's own CPU fallback (its ``unimplemented`` behaviour is ``cpu_fallback``,
   or ``error_unless_env`` with the env var set), with the bytes it moves per call: every tensor input
   and output copied device -> host -> device.  Without shapes that is a rate per element, from the
   trace's dtypes; with ``shapes`` (the tensor inputs', in schema order) it is bytes per call.
4. ``none``: nothing works; ``blocking`` names the ops that stop it.

Exactness is stated conservatively: a decomposition is ``exact`` only when every piece, recursively,
is a data-movement op (views, copies, casts, fills, indexing, comparisons, ``neg``/``abs``/``max``...)
or another overload of the op itself (the ``.out`` wrappers: ``gelu_backward.grad_input`` ->
``gelu_backward`` + ``copy_``).  Anything that does arithmetic in a different order from the fused
kernel it replaces (reductions, norms, matmul + add, upcasts) is ``approximate``: values then differ
at float rounding, which training can amplify.

Tracing a decomposition is the slow part (tens of milliseconds); traces are cached per op in the
process and on disk (``~/.cache/hal/op_coverage/decomp-<torch version>.json``, ``HAL_PLAN_CACHE=0``
turns the disk cache off).
"""
from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import List, Optional, Sequence

from hal.op_support.torch_profile import TorchProfile, Verdict

KINDS = ("decomposition", "fused_op", "cpu_fallback", "none", "native")
MAX_DEPTH = 6

#: packets whose result is bit-identical however they are composed: they move, cast, select or compare
#: values without arithmetic that rounds
DATA_MOVEMENT = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full full_like
new_zeros new_ones new_full fill fill_ zero zero_ scalar_tensor arange lift_fresh lift_fresh_copy
view _unsafe_view reshape _reshape_alias as_strided as_strided_ expand expand_as permute transpose transpose_
t t_ squeeze squeeze_ unsqueeze unsqueeze_ slice select narrow split split_with_sizes unbind alias detach
view_as clone copy copy_ _copy_from _copy_from_and_resize _to_copy to contiguous resize_ resize_as_
_local_scalar_dense cat stack index index_select gather scatter index_put index_put_ _unsafe_index
_unsafe_index_put masked_fill masked_fill_ where eq ne lt le gt ge logical_and logical_or logical_not
logical_xor bitwise_and bitwise_or bitwise_not bitwise_xor flip roll repeat constant_pad_nd neg abs
maximum minimum clamp clamp_min clamp_max relu sign select_scatter slice_scatter diagonal diagonal_scatter
movedim narrow_copy unfold isnan isinf any all _unsafe_view sym_size sym_stride sym_numel
""".split())

#: hal.ops fused operators, and the aten ops (overload names) each can stand in for
FUSED_FOR = {
    "_fused_rms_norm": "rms_norm", "_fused_rms_norm_backward": "rms_norm_backward",
    "native_layer_norm": "layer_norm", "native_layer_norm_backward": "layer_norm_backward",
    "gelu": "gelu", "gelu.out": "gelu", "gelu_backward": "gelu_backward", "gelu_backward.grad_input": "gelu_backward",
    "_softmax": "softmax", "_softmax.out": "softmax", "_softmax_backward_data": "softmax_backward",
    "_softmax_backward_data.out": "softmax_backward", "_safe_softmax": "softmax",
    "_fused_adamw_": "fused_adamw_", "_fused_adamw_.tensor_lr": "fused_adamw_",
}

#: torch profile vendor -> hal backend name (whose backend.json declares its fused kernels)
VENDOR_BACKEND = {"ascend": "ascend", "npu": "ascend", "mlu": "cambricon", "cambricon": "cambricon",
                  "musa": "musa", "gcu": "enflame", "enflame": "enflame", "metax": "metax", "maca": "metax",
                  "cuda": "cuda", "kunlunxin": "kunlunxin", "iluvatar": "iluvatar", "hygon": "hygon"}

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


@dataclass
class OpPlan:
    """What replaces one missing op on one target.

    ``kind``: decomposition / fused_op / cpu_fallback / none (``native`` when the op is not missing).
    ``exact``: the replacement computes the vendor-kernel-equivalent bits (see the module docstring).
    ``pieces``: the ops the replacement runs on the device, as the target receives them (for a
    decomposition, the leaves after recursive planning; for a fused op, ``hal.ops.<name>``).
    ``blocking``: ops (missing, without a replacement) that stop every route.
    ``bytes_per_call`` / ``bytes_per_element``: host traffic of a CPU fallback (when known).
    """

    op: str
    kind: str
    exact: bool
    pieces: List[str] = field(default_factory=list)
    blocking: List[str] = field(default_factory=list)
    detail: str = ""
    behaviour: Optional[str] = None
    decomposed: List[str] = field(default_factory=list)   # missing ops the decomposition decomposed again
    bytes_per_call: Optional[int] = None
    bytes_per_element: Optional[int] = None

    def to_dict(self) -> dict:
        return asdict(self)


# -- decomposition traces ----------------------------------------------------------------------------
def op_name(func) -> str:
    """``aten::add.Tensor`` OpOverload -> ``add.Tensor`` (``addmm`` for the default overload)."""
    name = func._schema.name.split("::", 1)[1]
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


def resolve(op: str):
    """The ``torch.ops.aten`` OpOverload of ``op``, or None when this torch lacks it."""
    import torch
    packet, _, overload = op.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, packet), overload or "default")
    except (AttributeError, RuntimeError):
        return None


@lru_cache(maxsize=None)
def _table() -> dict:
    """``op name -> decomposition`` of torch's aten-level table (no torch._refs / prims entries)."""
    import torch
    from torch._decomp import decomposition_table
    out = {}
    for func, fn in decomposition_table.items():
        if not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten":
            continue
        if getattr(fn, "__module__", "").startswith("torch._refs"):
            continue
        out[op_name(func)] = fn
    return out


def decomposition_for(op: str):
    """torch's aten-level decomposition of ``op`` (an overload name), or None."""
    return _table().get(op)


_cache_lock = threading.Lock()
_traces: dict = {}
_disk_loaded = False


def _cache_path() -> Optional[str]:
    if os.environ.get("HAL_PLAN_CACHE", "1") == "0":
        return None
    import torch
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "hal", "op_coverage", f"decomp-{torch.__version__.split('+')[0]}.json")


def _load_disk() -> None:
    global _disk_loaded
    if _disk_loaded:
        return
    _disk_loaded = True
    path = _cache_path()
    if path and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            for k, v in (data.get("traces") or {}).items():
                _traces.setdefault(k, v)
        except (OSError, ValueError):
            pass


def _save_disk() -> None:
    path = _cache_path()
    if not path:
        return
    from hal.util.io import atomic_write
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps({"schema": "op_coverage.decomp_traces/1", "traces": _traces}, sort_keys=True))
    except OSError:
        pass


def trace_decomposition(op: str, dtype: str = "float32") -> dict:
    """The aten ops ``op``'s decomposition calls: ``{"pieces": [...], "error": str|None, "how": ...}``.

    Runs the decomposition on small meta tensors built from the schema (the first input configuration
    the op's meta kernel accepts; CPU tensors of those shapes when the decomposition needs values) under a dispatch mode that records
    each call.  Cached (process and disk).
    """
    key = f"{op}|{dtype}"
    with _cache_lock:
        _load_disk()
        hit = _traces.get(key)
    if hit is not None:
        return hit
    result = _trace_uncached(op, dtype)
    with _cache_lock:
        _traces[key] = result
        _save_disk()
    return result


def _trace_uncached(op: str, dtype: str) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from hal.op_support.observe_inputs import CannotBuild, configs

    func = resolve(op)
    fn = decomposition_for(op)
    if func is None or fn is None:
        return {"pieces": [], "error": "no decomposition", "how": None}

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list = []

        def __torch_dispatch__(self, f, types, args=(), kwargs=None):
            name = op_name(f)
            if name not in self.ops:
                self.ops.append(name)
            return f(*args, **(kwargs or {}))

    dt = getattr(torch, dtype, torch.float32)
    if not isinstance(dt, torch.dtype):
        dt = torch.float32
    from hal.op_support.observe_inputs import move
    errors = []
    for cfg, fill in [(c, f) for c in configs(dt) for f in (True, False)]:
        try:
            args, kwargs = _build(func, cfg, fill)
        except CannotBuild as e:
            return {"pieces": [], "error": f"cannot build inputs: {e}", "how": None}
        # inputs the op itself accepts, checked on meta tensors (shape rules only: a CPU kernel given
        # inconsistent heuristic inputs may crash the process)
        try:
            func(*move(args, "meta"), **move(kwargs, "meta"))
        except Exception as e:  # noqa: BLE001 - the next configuration
            errors.append(f"{cfg.describe()}: {type(e).__name__}")
            continue
        for device in ("meta", "cpu"):  # meta first; a data-dependent decomposition needs values
            rec = Record()
            try:
                with rec:
                    out = fn(*move(args, device), **move(kwargs, device))
            except Exception as e:  # noqa: BLE001
                errors.append(f"{cfg.describe()} on {device}: decomposition raised {type(e).__name__}: "
                              f"{str(e)[:120]}")
                continue
            if out is NotImplemented:
                errors.append(f"{cfg.describe()}: decomposition declined")
                break
            return {"pieces": rec.ops, "error": None, "how": f"ran on {device} tensors ({cfg.describe()})"}
    static = _static_pieces(fn)
    return {"pieces": static, "error": "; ".join(errors[:3]) or "no input configuration worked",
            "how": "source scan (could not run it)" if static else None}


_STATS = ("weight", "bias", "running_mean", "running_var", "save_mean", "save_invstd", "save_var", "mean",
          "invstd", "rstd", "var", "reserve")


def _build(func, cfg, fill_optional: bool):
    """``hal.op_support.observe_inputs.build_call``, plus what decompositions need that a probe does not: optional
    statistics tensors filled in (``fill_optional``) and the sizes of group norm (N, C, HxW, group)
    consistent with the data tensor."""
    import math

    import torch

    from hal.op_support.observe_inputs import build_call
    args, kwargs = build_call(func, cfg)
    shape = cfg.shape
    n, c = shape[0], (shape[1] if len(shape) > 1 else 1)
    sizes = {"N": n, "C": c, "HxW": math.prod(shape[2:]) if len(shape) > 2 else 1, "group": 1}
    gen = torch.Generator().manual_seed(1)
    group_norm = any(a.name == "group" for a in func._schema.arguments)
    for i, a in enumerate(func._schema.arguments):
        if a.kwarg_only:
            continue
        t = str(a.type)
        if a.name in sizes and t in ("int", "SymInt"):
            args[i] = sizes[a.name]
        elif group_norm and a.name in ("mean", "rstd"):
            args[i] = torch.rand((n, 1), generator=gen) + 0.5
        elif fill_optional and t == "Optional[Tensor]" and args[i] is None and a.name in _STATS:
            args[i] = torch.rand((c,), generator=gen).to(cfg.dtype) + 0.5
    return args, kwargs


def _static_pieces(fn) -> List[str]:
    """Aten ops named in the decomposition's source (``aten.mul.Tensor``, ``torch.ops.aten.sum``):
    a fallback when the decomposition cannot be run; packets without an overload name are given as
    their default overload."""
    import ast
    import inspect
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError, SyntaxError):
        return []
    for node in ast.walk(tree):  # @register_decomposition(aten.x) names the op itself, not a piece
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.decorator_list = []
    src = ast.unparse(tree)
    found = []
    for packet, overload in re.findall(r"\baten\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?", src):
        name = packet if not overload or overload == "default" else f"{packet}.{overload}"
        if resolve(name) is None:
            name = packet
        if name not in found:
            found.append(name)
    return found


# -- planning ----------------------------------------------------------------------------------------
def _packet(op: str) -> str:
    return op.split(".", 1)[0]


def _moves_data(op: str) -> bool:
    p = _packet(op)
    return p in DATA_MOVEMENT or (p.endswith("_") and p[:-1] in DATA_MOVEMENT)


def _fused_kernels() -> dict:
    """``{backend: {hal op: entry}}`` of the built-in backends (:func:`hal.plugin.facts.fused_kernel_facts`)."""
    from hal.plugin.facts import fused_kernel_facts
    return fused_kernel_facts()["backends"]


def fused_op_for(op: str, profile: TorchProfile) -> Optional[str]:
    """The ``hal.ops`` operator with a kernel on ``profile``'s backend that replaces ``op``, or None."""
    name = FUSED_FOR.get(op)
    if not name:
        return None
    backend = VENDOR_BACKEND.get(profile.vendor) or VENDOR_BACKEND.get(profile.name.split("-")[0])
    if backend and name in _fused_kernels().get(backend, {}):
        return name
    return None


def _schema_tensor_counts(op: str) -> tuple[int, int]:
    """``(tensor inputs, tensor outputs)`` of ``op``'s schema (a list counts as one)."""
    func = resolve(op)
    if func is None:
        return 1, 1
    ins = sum(1 for a in func._schema.arguments if "Tensor" in str(a.type) and not (
        a.alias_info is not None and a.alias_info.is_write and a.kwarg_only))
    outs = sum(1 for r in func._schema.returns if "Tensor" in str(r.type))
    return max(ins, 1), outs


def host_traffic(op: str, dtypes: Sequence[str] = ("float32",), shapes: Optional[Sequence] = None) -> dict:
    """Bytes a CPU fallback of ``op`` copies per call: inputs device->host, outputs host->device.

    With ``shapes`` (tensor inputs' shapes, in schema order) the outputs' shapes come from running the
    op on meta tensors and the answer is ``bytes_per_call``; otherwise ``bytes_per_element``: the
    tensors' item sizes summed, for tensors of the same number of elements as the op's input.
    """
    item = max((_ITEMSIZE.get(d, 4) for d in dtypes), default=4)
    n_in, n_out = _schema_tensor_counts(op)
    out = {"bytes_per_element": (n_in + n_out) * item, "bytes_per_call": None,
           "how": f"{n_in} tensor input(s) + {n_out} output(s) x {item} B, per element"}
    if shapes:
        try:
            out.update(_bytes_with_shapes(op, shapes, dtypes))
        except Exception as e:  # noqa: BLE001
            out["how"] += f" (shapes given but the op did not run on meta tensors: {type(e).__name__})"
    return out


def _bytes_with_shapes(op: str, shapes: Sequence, dtypes: Sequence[str]) -> dict:
    import math

    import torch

    from hal.op_support.observe_inputs import Config, build_arg
    func = resolve(op)
    dt = getattr(torch, (list(dtypes) or ["float32"])[0], torch.float32)
    shapes = [tuple(s) for s in shapes]
    cfg = Config(shapes[0], "same", dt)
    gen = torch.Generator().manual_seed(0)
    args, kwargs, it = [], {}, iter(shapes)
    moved = 0
    for a in func._schema.arguments:
        if str(a.type) == "Tensor" and not (a.alias_info is not None and a.alias_info.is_write and a.kwarg_only):
            s = next(it, None)
            if s is None:
                v = build_arg(a, cfg, gen).to("meta")
            else:
                v = torch.empty(s, dtype=dt, device="meta")
            moved += v.numel() * v.element_size()
        else:
            v = build_arg(a, cfg, gen)
            if isinstance(v, torch.Tensor):
                v = v.to("meta")
        (kwargs.__setitem__(a.name, v) if a.kwarg_only else args.append(v))
    res = func(*args, **kwargs)
    res = res if isinstance(res, (tuple, list)) else (res,)
    for r in res:
        if isinstance(r, torch.Tensor):
            moved += math.prod(r.shape) * r.element_size()
    return {"bytes_per_call": int(moved), "how": f"inputs {shapes} and their outputs, {dt}"}


def _host_route(profile: TorchProfile, v: Verdict) -> Optional[str]:
    """How the vendor runs ``v.op`` on the CPU itself, or None when it raises instead."""
    if v.behaviour == "cpu_fallback":
        return f"{profile.name} runs it on the CPU through its own fallback"
    if v.behaviour == "error_unless_env":
        env = profile.unimplemented.get("env") or "the vendor's fallback variable"
        return f"{profile.name} runs it on the CPU only with {env}=1 set (it raises otherwise)"
    return None


def plan_op(op: str, profile: TorchProfile, dtypes: Sequence[str] = ("float32",),
            shapes: Optional[Sequence] = None, _stack: tuple = ()) -> OpPlan:
    """The replacement for ``op`` (an aten overload name) on ``profile``'s device; see the module docstring."""
    v = profile.judge(op)
    if v.status != "missing":
        return OpPlan(op, "native", True, [op], [], f"{v.status} on {profile.name} ({v.via}); nothing to replace")
    dtype = (list(dtypes) or ["float32"])[0]
    notes = []
    # 1. torch's decomposition, recursively
    dec = _plan_decomposition(op, profile, dtype, _stack)
    if dec is not None and not dec.blocking:
        return dec
    if dec is not None:
        notes.append(dec.detail)
    else:
        notes.append(f"torch {_torch_version()} has no aten-level decomposition of aten::{op}")
    # 2. a hal.ops fused op
    fused = fused_op_for(op, profile)
    if fused:
        return OpPlan(op, "fused_op", False, [f"hal.ops.{fused}"], [],
                      f"hal.ops.{fused} has a {profile.vendor} kernel (its hal backend's backend.json declares it); the model "
                      f"calls hal.ops.{fused} instead of the torch op (a code change; not installed by hal.fallback). "
                      + " ".join(notes), v.behaviour)
    # 3. the vendor's CPU fallback
    route = _host_route(profile, v)
    traffic = host_traffic(op, dtypes, shapes)
    if route:
        return OpPlan(op, "cpu_fallback", True, [op], [],
                      f"{route}: {traffic['how']} copied device->host->device per call. " + " ".join(notes),
                      v.behaviour, bytes_per_call=traffic["bytes_per_call"],
                      bytes_per_element=traffic["bytes_per_element"])
    # 4. nothing
    blocking = list(dec.blocking) if dec is not None else [op]
    return OpPlan(op, "none", False, [], blocking,
                  f"no replacement on {profile.name}: {v.detail}. " + " ".join(notes), v.behaviour)


def _torch_version() -> str:
    import torch
    return torch.__version__.split("+")[0]


def _plan_decomposition(op: str, profile: TorchProfile, dtype: str, stack: tuple) -> Optional[OpPlan]:
    if decomposition_for(op) is None:
        return None
    if op in stack or len(stack) >= MAX_DEPTH:
        return OpPlan(op, "none", False, [], [op], f"aten::{op}'s decomposition recurses into itself "
                      f"({' -> '.join(stack + (op,))})")
    tr = trace_decomposition(op, dtype)
    if not tr["pieces"]:
        return OpPlan(op, "none", False, [], [op],
                      f"torch's decomposition of aten::{op} could not be traced ({tr['error']})")
    leaves, blocking, decomposed, exact = [], [], [], True
    for piece in tr["pieces"]:
        if piece == op:  # it calls itself on other arguments: that call still needs a kernel
            blocking.append(op)
            continue
        pv = profile.judge(piece)
        if pv.status != "missing":
            leaves.append(piece)
            if not (_moves_data(piece) or _packet(piece) == _packet(op)):
                exact = False
            continue
        sub = _plan_decomposition(piece, profile, dtype, stack + (op,))
        if sub is None or sub.blocking:
            blocking += (sub.blocking if sub is not None else [piece])
            continue
        decomposed += [piece] + sub.decomposed
        leaves += [p for p in sub.pieces if p not in leaves]
        exact = exact and sub.exact
    leaves = list(dict.fromkeys(leaves))
    blocking = list(dict.fromkeys(blocking))
    how = tr["how"] or "?"
    if blocking:
        return OpPlan(op, "none", False, leaves, blocking,
                      f"torch's decomposition of aten::{op} needs {', '.join('aten::' + b for b in blocking)}, "
                      f"which {profile.name} lacks and which has no decomposition ({how})")
    exact_txt = ("exact: its pieces only move, cast or select data (or are other overloads of the op)" if exact else
                 "approximate: its pieces compute in a different order from a fused kernel, so values differ "
                 "at float rounding")
    sub_txt = f"; decomposed again: {', '.join(decomposed)}" if decomposed else ""
    if tr["how"] and tr["how"].startswith("source scan"):
        exact, exact_txt = False, "approximate (pieces from a source scan, not a run)"
    return OpPlan(op, "decomposition", exact, leaves, [],
                  f"torch._decomp: aten::{op} -> {', '.join(leaves)} ({how}{sub_txt}); {exact_txt}",
                  decomposed=list(dict.fromkeys(decomposed)))


def plan_trace(trace: dict, profile: TorchProfile, shapes: Optional[dict] = None) -> List[OpPlan]:
    """One :class:`OpPlan` per op of ``trace`` (format ``op_coverage.torch_trace/1``) that ``profile``
    judges missing, in the trace's order.  ``shapes`` maps op names to their tensor inputs' shapes."""
    out = []
    for row in trace.get("ops", []):
        op = row["op"]
        if profile.judge(op).status != "missing":
            continue
        out.append(plan_op(op, profile, row.get("dtypes") or ("float32",), (shapes or {}).get(op)))
    return out
