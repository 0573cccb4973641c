"""The backend contract as a test suite a vendor runs on its own hardware.

::

    report = hal.conformance.run_conformance("ascend")
    report["verdict"]            # "pass" or "fail"
    print(hal.conformance.to_markdown(report))   # publishable

or ``hal conformance --backend ascend --out report.json --markdown report.md``.

The ``ccl`` check runs every c10d op a collective library must serve (:data:`CCL_OPS`: the
collectives, their coalesced forms, point-to-point, groups, DeviceMesh, functional
collectives under ``torch.compile``) at 2 ranks on the backend's CCL and on gloo with the
same data; its row carries ``ops``, one ``{id, used_by, status, error}`` per op.

Each check passes, fails with a reason the plugin author can act on, or is skipped with
the reason (a feature the device lacks must raise :class:`hal.NotSupported`, which the
kit reports as a skip; anything else that goes wrong is a failure).
"""
from __future__ import annotations

import datetime
import os
import platform
import tempfile
import time
import traceback
import warnings
from typing import Iterable, Optional, Sequence

import torch

from hal.conformance._ccl_ops import CCL_OPS, op_ids
from hal.conformance._checks import CHECKS, Context, Fail, Skip

SCHEMA = "hal.conformance/1"


def check_ids() -> list:
    """Ids of every check, in the order they run."""
    return [c[0] for c in CHECKS]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, (Fail, Skip)):
        return str(exc)
    if isinstance(exc, AssertionError):
        return str(exc) or "assertion failed"
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return f"raised {type(exc).__name__}: {exc}{where}"


def run_conformance(name: str, only: Optional[Sequence[str]] = None, skip: Sequence[str] = (),
                    env: Optional[dict] = None, progress=None, ccl_ops: Sequence[str] = ()) -> dict:
    """Run the contract against backend ``name``; return the report (schema ``hal.conformance/1``).

    :param name: backend name (or device type) as ``HAL_BACKEND`` takes it.
    :param only: run just these check ids; ``skip``: leave these out (reported as skipped).
    :param env: environment for the registry and the 2-rank workers (default ``os.environ``).
    :param progress: optional callable wrapping the iterable of checks (e.g. tqdm).
    :param ccl_ops: run only these ops of the ``ccl`` check (ids of :data:`CCL_OPS`; default all).
    :raises hal.BackendUnavailable: when ``name`` cannot be loaded here (the error says why).
    """
    from hal.plugin.registry import Registry

    ids = check_ids()
    unknown = [c for c in list(only or []) + list(skip) if c not in ids]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(ids)}")
    unknown = [o for o in ccl_ops if o not in op_ids()]
    if unknown:
        raise ValueError(f"unknown ccl op(s) {', '.join(unknown)}; ops: {', '.join(op_ids())}")
    env = {**(os.environ if env is None else env), "HAL_BACKEND": name}
    reg = Registry(env=env)
    cand = reg.selected()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hal-conformance-") as tmp:
        ctx = Context(name=name, registry=reg, candidate=cand, env=env, tmpdir=tmp, ccl_ops=tuple(ccl_ops))
        todo: Iterable = CHECKS if progress is None else progress(CHECKS)
        for cid, title, fn in todo:
            row = {"id": cid, "title": title}
            if (only and cid not in only) or cid in skip:
                row.update(status="skip", reason="not selected for this run", seconds=0.0)
                rows.append(row)
                continue
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    note = fn(ctx)
                row.update(status="pass", reason=note or "")
            except Skip as exc:
                row.update(status="skip", reason=_reason(exc))
            except Exception as exc:  # every failure becomes a readable reason
                row.update(status="fail", reason=_reason(exc))
            row["seconds"] = round(time.perf_counter() - t0, 3)
            if ctx.ops:
                row["ops"], ctx.ops = ctx.ops, []
            rows.append(row)
    b = cand.backend
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("pass", "fail", "skip")}
    return {
        "schema": SCHEMA, "backend": cand.name, "spec": cand.spec.to_dict(), "plugin": cand.plugin,
        "versions": b.versions() if b is not None else {}, "torch": torch.__version__,
        "host": {"machine": platform.machine(), "system": platform.system(), "python": platform.python_version()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 2),
        "summary": counts, "verdict": "fail" if counts["fail"] else "pass", "checks": rows,
    }


def to_markdown(report: dict) -> str:
    """The report as Markdown, for a vendor to publish."""
    spec = report["spec"]
    lines = [f"# hal conformance: {report['backend']} ({spec['vendor']} {spec['product']})", "",
             f"- verdict: **{report['verdict'].upper()}** "
             f"({report['summary']['pass']} pass, {report['summary']['fail']} fail, "
             f"{report['summary']['skip']} skip)",
             f"- device type `{spec['device_type']}`, collective `{spec['dist_backend']}`, plugin `{report['plugin']}`",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
             f"- host: {report['host']['system']} {report['host']['machine']}, Python {report['host']['python']}",
             f"- date: {report['date']} ({report['seconds']} s)", "",
             "| check | status | detail |", "|---|---|---|"]
    for r in report["checks"]:
        detail = _cell(r["reason"])
        lines.append(f"| {r['title']} | {r['status']} | {detail} |")
    for r in report["checks"]:
        if r.get("ops"):
            lines += ["", f"## {r['title']}", "", "| op | used by | status | error |", "|---|---|---|---|"]
            lines += [f"| {o['id']} | {o['used_by']} | {o['status']} | {_cell(o['error'] or o.get('note', ''))} |"
                      for o in r["ops"]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


__all__ = ["CCL_OPS", "CHECKS", "SCHEMA", "check_ids", "op_ids", "run_conformance", "to_markdown"]
