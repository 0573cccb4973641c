"""The checks of ``hal doctor``.  Each runs in its own subprocess (see :mod:`hal.doctor.runner`)
and returns ``{"status": OK|WARN|FAIL|SKIP, "summary": str, "details": {...}}``."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from typing import Dict, List, Sequence

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"
#: test hook: the rank named here runs its compute slowly in the all-reduce check
ENV_SLOW_RANK = "HAL_DOCTOR_TEST_SLOW_RANK"


def _result(status: str, summary: str, **details) -> dict:
    return {"status": status, "summary": summary, "details": details}


def backends() -> dict:
    """Backends found, which one is selected and why; broken stacks are a WARN."""
    from hal.plugin.registry import get_registry

    rep = get_registry().report()
    broken = [f"{b['name']}: {b['reason']}" for b in rep["backends"] if b["status"] == "broken"]
    broken += [f"plugin {f['plugin']}: {f['reason']}" for f in rep["plugin_failures"] if f["stage"] != "blocked"]
    avail = [b["name"] for b in rep["backends"] if b["status"] == "available"]
    summary = f"selected {rep['selected']} ({rep['selection_reason']}); available: {', '.join(avail)}"
    if broken:
        return _result(WARN, summary + f"; broken: {'; '.join(broken)}", report=rep)
    return _result(OK, summary, report=rep)


def devices() -> dict:
    """Device count and model of the selected backend."""
    from hal.plugin.registry import selected_backend

    b = selected_backend()
    n = b.device_count()
    if n < 1:
        return _result(FAIL, f"{b.name}: no device visible", count=0)
    names = [b.device_name(i) if b.device_type != "cpu" else b.device_name() for i in range(n)]
    extra = f", {os.cpu_count()} logical CPUs" if b.device_type == "cpu" else ""
    return _result(OK, f"{b.name}: {n} device(s): {', '.join(sorted(set(names))) or '?'}{extra}",
                   count=n, names=names, device_type=b.device_type)


def _nvidia_smi_driver() -> str:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return ""
    try:
        out = subprocess.run([tool, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def versions() -> dict:
    """driver / runtime / torch / vendor-extension versions, checked against the version matrices (hal.doctor.compat)."""
    from hal.doctor import compat
    from hal.plugin.registry import selected_backend

    b = selected_backend()
    v = dict(b.versions())
    if b.spec.module and b.vendor_module is not None:
        v[b.spec.module] = str(getattr(b.vendor_module, "__version__", "unknown"))
    if b.name == "cuda":
        branch = _nvidia_smi_driver()
        if branch:
            v["driver_branch"] = branch
    findings = compat.check(b.name, v)
    worst = FAIL if any(f["status"] == FAIL for f in findings) else WARN if any(
        f["status"] == WARN for f in findings) else OK
    shown = ", ".join(f"{k} {val}" for k, val in v.items())
    return _result(worst, f"{shown}; " + "; ".join(f["message"] for f in findings if f["status"] == worst),
                   versions=v, findings=findings)


def data(paths: Sequence[str] = ()) -> dict:
    """Each ``--data`` path exists and is readable (a file: its first bytes; a folder: its listing)."""
    if not paths:
        return _result(SKIP, "no --data paths given")
    bad, good = [], []
    for p in paths:
        try:
            if os.path.isdir(p):
                entries = os.listdir(p)
                first = next((os.path.join(p, e) for e in sorted(entries) if os.path.isfile(os.path.join(p, e))), None)
                if first:
                    with open(first, "rb") as f:
                        f.read(4096)
                good.append(f"{p} (folder, {len(entries)} entries)")
            elif os.path.exists(p):
                with open(p, "rb") as f:
                    f.read(4096)
                good.append(f"{p} ({os.path.getsize(p)} bytes)")
            else:
                bad.append(f"{p}: does not exist")
        except OSError as exc:
            bad.append(f"{p}: not readable ({exc.strerror or exc})")
    if bad:
        return _result(FAIL, "; ".join(bad) + "; fix the path or its permissions / mount", ok=good, failed=bad)
    return _result(OK, f"{len(good)} path(s) readable: {', '.join(good)}", ok=good)


def tiny_network() -> dict:
    """A small MLP forward and backward on the device, compared with the CPU, then one SGD step."""
    import torch

    from hal.device import device

    dev = device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ref.load_state_dict(model.state_dict())
    model.to(dev)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
    loss.backward()
    ref_loss = torch.nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    grads_ok = all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    diff = abs(float(loss) - float(ref_loss))
    gdiff = max(float((p.grad.cpu() - q.grad).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
    opt.step()
    with torch.no_grad():
        after = float(torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)))
    details = dict(device=str(dev), loss=float(loss), cpu_loss=float(ref_loss), loss_after_step=after,
                   max_grad_diff_vs_cpu=gdiff)
    if not grads_ok:
        return _result(FAIL, f"{dev}: gradients missing or not finite", **details)
    if diff > 1e-2 * max(1.0, abs(float(ref_loss))) or gdiff > 1e-2:
        return _result(FAIL, f"{dev}: loss {float(loss):.5f} vs CPU {float(ref_loss):.5f}, max grad "
                             f"difference {gdiff:.2e}: the device computes wrong results", **details)
    if not after < float(loss):
        return _result(WARN, f"{dev}: one SGD step did not lower the loss ({float(loss):.5f} → {after:.5f})",
                       **details)
    return _result(OK, f"{dev}: forward+backward match the CPU (grad diff {gdiff:.1e}); "
                       f"loss {float(loss):.4f} → {after:.4f} after one step", **details)


def find_stragglers(times: Sequence[float], factor: float = 2.0) -> List[int]:
    """Ranks whose time exceeds ``factor`` × the median (needs 3+ ranks to mean anything)."""
    if len(times) < 3:
        return []
    med = statistics.median(times)
    return [r for r, t in enumerate(times) if med > 0 and t > factor * med]


def allreduce_rank(nbytes: int = 1 << 20, iters: int = 5) -> dict:
    """One rank of the all-reduce check (runs under :func:`hal.dist.launch.spawn`)."""
    import torch

    from hal.device import synchronize
    from hal.dist import all_reduce
    from hal.dist import info as dist_info

    info = dist_info()
    dev = torch.device(info.device)
    a = torch.randn(128, 128, device=dev)
    t0 = time.perf_counter()
    for _ in range(20):
        a = torch.tanh(a @ a)
    synchronize() if dev.type != "cpu" else None
    if os.environ.get(ENV_SLOW_RANK) == str(info.rank):
        # slower than the others by far however loaded the machine is: the others do the same work
        time.sleep(max(1.0, 4 * (time.perf_counter() - t0)))
    compute_s = time.perf_counter() - t0
    n = max(nbytes // 4, 1)
    x = torch.full((n,), float(info.rank + 1), device=dev)
    t0 = time.perf_counter()
    all_reduce(x, timeout=info.timeout_s)
    for _ in range(iters - 1):
        torch.distributed.all_reduce(x)
    synchronize() if dev.type != "cpu" else None
    ar_s = (time.perf_counter() - t0) / iters
    w = info.world_size
    expected = float(w * (w + 1) // 2) * float(w) ** (iters - 1)
    correct = bool(torch.all(x == expected).item())
    return {"rank": info.rank, "compute_s": compute_s, "allreduce_s": ar_s, "correct": correct,
            "device": info.device, "backend": info.backend}


def _cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def all_reduce(ranks: int = 2, timeout: float = 30.0) -> dict:
    """A small all-reduce across ``ranks`` local processes, with straggler detection.

    On the CPU backend the ranks run even where the machine has fewer cores than ranks
    (oversubscribed, one thread each): the values are judged, but timings mean nothing
    there, so the summary says so and no rank is called a straggler.
    """
    from hal.dist.launch import spawn
    from hal.plugin.registry import selected_backend

    b = selected_backend()
    env: Dict[str, str] = {}
    oversubscribed = False
    if b.device_type == "cpu":
        have = _cpu_cores()
        oversubscribed = ranks > have
        if oversubscribed and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = "1"  # ranks x threads already exceed the cores
    else:
        have = b.device_count()
        if ranks > have:
            return _result(SKIP, f"{ranks} ranks need {ranks} {b.device_type} devices; {have} visible")
    cores = have if b.device_type == "cpu" else None
    res = spawn("hal.doctor.checks:allreduce_rank", ranks, timeout=max(timeout - 3, 5),
                init_timeout=max(timeout / 2, 5), env=env)
    if not res.ok:
        return _result(FAIL, f"{ranks}-rank all-reduce failed: {res.first_error()}",
                       ranks=[r.to_dict() for r in res.ranks], oversubscribed=oversubscribed, cores=cores)
    rows = [r.result for r in res.ranks]
    wrong = [r["rank"] for r in rows if not r["correct"]]
    if wrong:
        return _result(FAIL, f"{ranks}-rank all-reduce gave wrong values on rank(s) {wrong}", ranks=rows,
                       oversubscribed=oversubscribed, cores=cores)
    ar = max(r["allreduce_s"] for r in rows)
    summary = f"{ranks} ranks on {rows[0]['backend']}: correct, {ar * 1e3:.2f} ms per 1 MiB all-reduce"
    if oversubscribed:
        return _result(OK, f"{ranks} ranks on {rows[0]['backend']}: correct; {ranks} ranks share {have} CPU "
                           f"cores (oversubscribed), so timings are not meaningful and stragglers are "
                           f"not judged", ranks=rows, stragglers=[], oversubscribed=True, cores=cores)
    slow = find_stragglers([r["compute_s"] for r in rows])
    if slow:
        med = statistics.median(r["compute_s"] for r in rows)
        slow_times = ", ".join("%.3fs" % rows[r]["compute_s"] for r in slow)
        return _result(WARN, summary + f"; straggler rank(s) {slow}: compute {slow_times} vs median "
                                       f"{med:.3f}s (> 2x)", ranks=rows, stragglers=slow,
                       oversubscribed=False, cores=cores)
    note = "" if ranks >= 3 else " (straggler check needs 3+ ranks)"
    return _result(OK, summary + note, ranks=rows, stragglers=[], oversubscribed=False, cores=cores)


def transport() -> dict:
    """RDMA or TCP for the collective library, with the evidence."""
    from hal.doctor.transport import detect
    from hal.plugin.registry import get_registry

    return detect(ccl=get_registry().selected().spec.dist_backend)


def redirect() -> dict:
    """What ``hal run``'s redirection patches on this torch, held against its table of targets
    (hal/data/redirect_targets.json): OK when every target the table has on this release is present (those
    it says this torch lacks are named); WARN naming each target this torch lacks though the table
    has it here (moved or renamed: the redirection of that call silently stops)."""
    import torch

    from hal.redirect import enable, targets as redirect_targets

    with enable() as t:
        patched, missing = len(t.patched), list(t.not_patched)
        held = redirect_targets.walk(t)
    checked = redirect_targets.table()["checked_on"]
    summary = f"torch {torch.__version__}: {patched} attributes redirected"
    facts = dict(patched=patched, not_patched=missing, torch=torch.__version__, checked_on=checked, **held)
    if held["absent_moved"]:
        return _result(WARN, summary + f"; not redirected on this torch (absent): {', '.join(held['absent_moved'])}"
                       f" (hal's table of targets has them on this release; checked on torch {', '.join(checked)})",
                       **facts)
    if held["absent_expected"]:
        summary += (f"; {len(held['absent_expected'])} absent as hal's table says for this release: "
                    f"{', '.join(held['absent_expected'])}")
    else:
        summary += ", every target present"
    return _result(OK, summary, **facts)


#: check name → (function, default time limit in seconds)
CHECKS: Dict[str, tuple] = {
    "backends": (backends, 30),
    "devices": (devices, 30),
    "versions": (versions, 45),
    "redirect": (redirect, 60),
    "data": (data, 30),
    "tiny_network": (tiny_network, 60),
    "all_reduce_2": (lambda timeout=60: all_reduce(2, timeout), 60),
    "all_reduce_4": (lambda timeout=90: all_reduce(4, timeout), 90),
    "all_reduce_8": (lambda timeout=120: all_reduce(8, timeout), 120),
    "transport": (transport, 30),
}
