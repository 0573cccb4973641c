"""Observed op support of a device: run each op of a list, compare with the CPU, classify.

``native``   ran on the device, matched the CPU, no fallback was signalled;
``fallback`` matched the CPU but the stack signalled a fallback while running it (the
             emulator's :class:`hal.emu.FallbackWarning`, or a vendor warning such as
             MPS's "will fall back to run on the CPU");
``failing``  raised, or gave a result that differs from the CPU beyond tolerance.

The same call a vendor runs on real hardware to produce its profile (``hal probe``).
"""
from __future__ import annotations

import datetime
import re
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

#: float32 tolerance against the CPU: loose enough for TF32 convolutions and reordered
#: reductions on accelerators, tight enough to catch a wrong kernel
RTOL, ATOL = 1e-3, 1e-4
_FALLBACK_RE = re.compile(r"fall(s|ing)?[ -]?back|fallback|run on the CPU", re.IGNORECASE)


def _x(*shape, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g)
    return t.abs() + 0.1 if positive else t


#: name -> (inputs on the CPU, function of those inputs); names are the user-facing ops
CASES: Dict[str, Tuple[Callable[[], tuple], Callable]] = {
    "add": (lambda: (_x(4, 5), _x(4, 5, seed=1)), torch.add),
    "mul": (lambda: (_x(4, 5), _x(4, 5, seed=1)), torch.mul),
    "div": (lambda: (_x(4, 5), _x(4, 5, seed=1, positive=True)), torch.div),
    "exp": (lambda: (_x(4, 5),), torch.exp),
    "rsqrt": (lambda: (_x(4, 5, positive=True),), torch.rsqrt),
    "erf": (lambda: (_x(4, 5),), torch.erf),
    "lgamma": (lambda: (_x(4, 5, positive=True),), torch.lgamma),
    "sum": (lambda: (_x(4, 5),), lambda a: a.sum(dim=1)),
    "mean": (lambda: (_x(4, 5),), lambda a: a.mean()),
    "amax": (lambda: (_x(4, 5),), lambda a: a.amax(dim=0)),
    "cumsum": (lambda: (_x(4, 5),), lambda a: a.cumsum(1)),
    "matmul": (lambda: (_x(4, 8), _x(8, 3, seed=1)), torch.matmul),
    "bmm": (lambda: (_x(2, 4, 8), _x(2, 8, 3, seed=1)), torch.bmm),
    "linear": (lambda: (_x(4, 8), _x(3, 8, seed=1), _x(3, seed=2)), F.linear),
    "relu": (lambda: (_x(4, 5),), F.relu),
    "gelu": (lambda: (_x(4, 5),), F.gelu),
    "silu": (lambda: (_x(4, 5),), F.silu),
    "softmax": (lambda: (_x(4, 5),), lambda a: F.softmax(a, dim=-1)),
    "log_softmax": (lambda: (_x(4, 5),), lambda a: F.log_softmax(a, dim=-1)),
    "layer_norm": (lambda: (_x(4, 8),), lambda a: F.layer_norm(a, (8,))),
    "conv2d": (lambda: (_x(1, 2, 6, 6), _x(3, 2, 3, 3, seed=1)), F.conv2d),
    "max_pool2d": (lambda: (_x(1, 2, 6, 6),), lambda a: F.max_pool2d(a, 2)),
    "embedding": (lambda: (torch.tensor([0, 2, 1]), _x(4, 3)), F.embedding),
    "cross_entropy": (lambda: (_x(4, 5), torch.tensor([0, 1, 4, 2])), F.cross_entropy),
    "sort": (lambda: (_x(4, 5),), lambda a: torch.sort(a, dim=1).values),
    "topk": (lambda: (_x(4, 5),), lambda a: torch.topk(a, 2).values),
    "index_select": (lambda: (_x(4, 5), torch.tensor([0, 3])), lambda a, i: a.index_select(0, i)),
    "where": (lambda: (_x(4, 5), _x(4, 5, seed=1)), lambda a, b: torch.where(a > 0, a, b)),
    "scaled_dot_product_attention": (lambda: (_x(1, 2, 4, 8), _x(1, 2, 4, 8, seed=1), _x(1, 2, 4, 8, seed=2)),
                                     F.scaled_dot_product_attention),
}


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    return obj


def _cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_cpu(o) for o in obj)
    return obj


def probe_op(name: str, device: torch.device) -> dict:
    """Run one op of :data:`CASES` on ``device``; ``{"status", "detail"}``."""
    make, fn = CASES[name]
    inputs = make()
    expected = fn(*inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = _cpu(fn(*(_to(i, device) for i in inputs)))
        except Exception as exc:  # the op failing is what we are measuring
            return {"status": "failing", "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    try:
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    except AssertionError as exc:
        return {"status": "failing", "detail": "result differs from the CPU: " + str(exc).splitlines()[0]}
    fell = [str(w.message) for w in caught if _FALLBACK_RE.search(str(w.message))]
    if fell:
        return {"status": "fallback", "detail": fell[0][:200]}
    return {"status": "native", "detail": "ran on the device and matched the CPU"}


def probe_ops(backend, names: Optional[Sequence[str]] = None, progress=None) -> dict:
    """The observed op-support profile of ``backend`` (schema ``hal.op_profile/1``).

    :param backend: a loaded :class:`hal.plugin.backend.Backend`.
    :param names: ops of :data:`CASES` to run (default: all).
    :param progress: optional callable wrapping the iterable of names (e.g. tqdm).
    """
    names = list(names or CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; known ops: {', '.join(CASES)}")
    device = backend.device()
    ops = {}
    for name in (progress(names) if progress else names):
        backend.reset_fallback_report()  # so each op's first fallback warns again
        ops[name] = probe_op(name, device)
    counts = {s: sum(1 for r in ops.values() if r["status"] == s) for s in ("native", "fallback", "failing")}
    return {
        "schema": "hal.op_profile/1", "backend": backend.name, "device_type": backend.device_type,
        "device": str(device), "torch": torch.__version__,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "provenance": "live probe (hal probe): each op run on the device and compared with the CPU",
        "summary": counts, "ops": ops,
    }


# -- hal probe --trace: every op of a trace, inputs built from the op's schema ----------------------------
TRACE_SCHEMA = "op_coverage.torch_trace/1"


def load_trace(path) -> dict:
    """Read a trace file (``op_coverage.torch_trace/1``); ValueError naming the file and the fix."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"trace {path}: no such file; record one with "
                         f"'op_coverage trace train.py -o {path}'") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"trace {path}: not readable JSON ({exc}); record it again with op_coverage trace") from None
    if not isinstance(trace, dict) or trace.get("schema") != TRACE_SCHEMA or not isinstance(trace.get("ops"), list):
        raise ValueError(f"trace {path}: not an {TRACE_SCHEMA} file (needs \"schema\" and an \"ops\" list); "
                         "record it with op_coverage trace")
    return trace


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name).replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def _compare(got, exp, meta_only: bool) -> None:
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"got {type(got).__name__}, the CPU returned a tensor")
        if got.shape != exp.shape or got.dtype != exp.dtype:
            raise AssertionError(f"got {tuple(got.shape)} {got.dtype}, the CPU {tuple(exp.shape)} {exp.dtype}")
        if not meta_only:
            torch.testing.assert_close(got, exp, rtol=RTOL, atol=ATOL, equal_nan=True)
    elif isinstance(exp, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(exp):
            raise AssertionError(f"got {got!r:.60}, the CPU {exp!r:.60}")
        for g, e in zip(got, exp):
            _compare(g, e, meta_only)
    elif isinstance(exp, float) and not meta_only:
        if abs(float(got) - exp) > ATOL + RTOL * abs(exp):
            raise AssertionError(f"got {got}, the CPU {exp}")
    elif not meta_only and got != exp:
        raise AssertionError(f"got {got!r:.60}, the CPU {exp!r:.60}")


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def probe_trace_op(name: str, dtypes: Sequence[str], device: torch.device) -> dict:
    """Probe one aten overload of a trace on ``device``: ``{"status", "detail"}``.

    status ``not_probed`` (no inputs could be built: the detail says why), else as :func:`probe_op`.
    Each dtype is probed; the op is native only when every dtype is.
    """
    from hal.op_support import observe_inputs as pin

    try:
        op = pin.resolve_overload(name)
    except pin.CannotBuild as exc:
        return {"status": "not_probed", "detail": str(exc)}
    meta = pin.metadata_only(op)
    results = []
    for dname in dtypes or ["float32"]:
        try:
            dt = _dtype(dname)
        except ValueError as exc:
            return {"status": "not_probed", "detail": str(exc)}
        results.append((dname, _probe_one_dtype(op, name, dt, device, meta)))
    order = {"failing": 0, "fallback": 1, "native": 2, "not_probed": 3}
    worst = min(results, key=lambda r: order[r[1]["status"]])
    statuses = {r["status"] for _, r in results}
    if statuses == {"not_probed"} or "not_probed" not in statuses or len(results) == 1:
        status = worst[1]["status"]
    else:  # some dtypes probed, some not: judge on the probed ones
        worst = min((r for r in results if r[1]["status"] != "not_probed"), key=lambda r: order[r[1]["status"]])
        status = worst[1]["status"]
    detail = "; ".join(f"{d}: {r['detail']}" for d, r in results) if len(results) > 1 else worst[1]["detail"]
    return {"status": status, "detail": detail}


def _probe_one_dtype(op, name: str, dt: torch.dtype, device: torch.device, meta: Optional[str]) -> dict:
    from hal.op_support import observe_inputs as pin

    errors = []
    for cfg in pin.configs(dt):
        try:
            args, kwargs = pin.build_call(op, cfg, seed=0)
        except pin.CannotBuild as exc:
            return {"status": "not_probed", "detail": str(exc)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = op(*args, **kwargs)
        except Exception as exc:  # the CPU rejects these inputs: try the next configuration
            errors.append(_short(exc))
            continue
        args, kwargs = pin.build_call(op, cfg, seed=0, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = _cpu(op(*pin.move(args, device), **pin.move(kwargs, device)))
            except Exception as exc:  # the op failing on the device is what we measure
                return {"status": "failing", "detail": _short(exc), "exception": exc}
        try:
            _compare(got, expected, bool(meta))
        except AssertionError as exc:
            return {"status": "failing", "detail": f"result differs from the CPU ({cfg.describe()}): "
                                                   + str(exc).splitlines()[0][:200]}
        fell = [str(w.message) for w in caught if _FALLBACK_RE.search(str(w.message))]
        if fell:
            return {"status": "fallback", "detail": fell[0][:200]}
        note = f"; {meta}" if meta else ""
        return {"status": "native", "detail": f"ran on the device and matched the CPU ({cfg.describe()}){note}"}
    return {"status": "not_probed",
            "detail": f"the CPU rejected all {len(errors)} input sets built from the schema (first: "
                      f"{errors[0] if errors else '?'})"}


def _error_template(name: str, exc: BaseException) -> Optional[str]:
    """The device's own error text for a missing op, with the op name replaced by ``{op}``."""
    text = str(exc).split("\n")[0].replace("{", "(").replace("}", ")")
    if not isinstance(exc, NotImplementedError) or f"aten::{name}" not in text:
        return None
    return text.replace(f"aten::{name}", "aten::{op}")


def probe_trace(backend, trace: dict, progress=None, name: Optional[str] = None, trace_path: str = "") -> dict:
    """Probe every op of ``trace`` on ``backend``'s device; a torch profile (``op_coverage.torch_profile/1``).

    ``ops`` lists the ops that ran natively and matched the CPU; every op of the trace appears in
    ``probe`` with its status (native / fallback / failing / not_probed) and ``not_probed`` says why no
    inputs could be built for the ones that were not run.
    """
    device = backend.device()
    entries = [e for e in trace.get("ops", []) if isinstance(e, dict) and e.get("op")]
    results: Dict[str, dict] = {}
    template = warning = None
    for e in (progress(entries) if progress else entries):
        backend.reset_fallback_report()  # so each op's first fallback warns again
        r = probe_trace_op(e["op"], e.get("dtypes") or ["float32"], device)
        exc = r.pop("exception", None)
        if exc is not None and template is None:
            template = _error_template(e["op"], exc)
        if r["status"] == "fallback" and warning is None and f"aten::{e['op']}" in r["detail"]:
            warning = r["detail"].replace("{", "(").replace("}", ")").replace(f"aten::{e['op']}", "aten::{op}")
        results[e["op"]] = r
    by = {s: sorted(o for o, r in results.items() if r["status"] == s)
          for s in ("native", "fallback", "failing", "not_probed")}
    tv = torch.__version__.split("+")[0]
    try:
        key = str(torch._C._dispatch_key_for_device(device.type))
    except Exception:  # noqa: BLE001 - older torch, or an unusual device
        key = "unknown"
    default = "cpu_fallback" if by["fallback"] and not by["failing"] else ("error" if template else "unknown")
    return {
        "schema": "op_coverage.torch_profile/1", "name": name or f"{backend.name}-probe", "aliases": [],
        "kind": "torch", "vendor": backend.name, "title": f"{backend.name} (observed by hal probe --trace)",
        "partial": True, "backend": backend.name, "device_type": backend.device_type, "dispatch_key": key,
        "plugin": {"name": "hal", "version": ""}, "torch_version": tv,
        "source": {"trace": str(trace_path), "trace_torch_version": str(trace.get("torch_version", "")),
                   "device": str(device)},
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "provenance": "live probe (hal probe --trace): each op of the trace run on the device with inputs built "
                      "from its schema and compared with the CPU",
        "ops": by["native"],
        "unimplemented": {
            "default": default, "env": None, "error_message": template,
            "error_message_kind": "vendor" if template else "generic", "warning_message": warning,
            "always_cpu": by["fallback"],
            "source": "observed: the first NotImplementedError the device raised and the first fallback warning "
                      "(op name replaced by {op}); ops whose run signalled a CPU fallback are always_cpu"},
        "probe": results,
        "not_probed": {o: results[o]["detail"] for o in by["not_probed"]},
        "counts": {s: len(v) for s, v in by.items()},
        "uncertain": [f"only the {len(results)} ops of the trace were probed, each with one small input set per "
                      "dtype: a native verdict does not cover every shape, layout or dtype",
                      "ops not in the trace are unknown; the profile is partial"],
    }
