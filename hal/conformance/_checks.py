"""The backend contract, one check per function.  A check raises :class:`Fail` (or an
AssertionError) with a reason a vendor can act on, :class:`Skip` with the reason a feature
is absent, or returns a short note on success."""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from hal._errors import NotSupported
from hal.plugin.spec import BackendSpec, ProbeResult, Status


class Fail(Exception):
    """The backend breaks the contract; the message says how."""


class Skip(Exception):
    """The check does not apply; the message says why."""


@dataclass
class Context:
    """What every check sees: the registry, the candidate and the loaded backend."""

    name: str
    registry: object
    candidate: object
    env: Dict[str, str]
    tmpdir: str
    ccl_ops: Tuple[str, ...] = ()   # run only these ops of the ccl check (default: all)
    ops: list = dataclasses.field(default_factory=list)  # the ccl check's per-op rows

    @property
    def backend(self):
        return self.candidate.backend

    @property
    def spec(self) -> BackendSpec:
        return self.candidate.spec


def _optional(fn, feature: str):
    try:
        return fn()
    except NotSupported as exc:
        raise Skip(f"{feature}: {exc}") from None


# -- registry ----------------------------------------------------------------------------
def check_metadata(ctx: Context) -> str:
    spec = ctx.spec
    assert dataclasses.is_dataclass(spec) and spec.__dataclass_params__.frozen, \
        "spec must be a frozen hal.plugin.spec.BackendSpec"
    missing = [f for f in ("name", "vendor", "device_type") if not getattr(spec, f)]
    if missing:
        raise Fail(f"spec fields {', '.join(missing)} are empty; set them in the plugin's BackendSpec")
    if spec.device_type != "cpu" and not spec.dist_backend:
        raise Fail("spec.dist_backend is empty: name the collective library (e.g. hccl, cncl, nccl)")
    json.dumps(spec.to_dict())
    same = [c for c in ctx.registry.candidates() if c.name == spec.name]
    if len(same) != 1:
        raise Fail(f"{len(same)} plugins declare a backend named {spec.name!r}; names must be unique")
    return f"{spec.vendor} {spec.device_type}, collective {spec.dist_backend}"


def check_probe(ctx: Context) -> str:
    res = ctx.candidate.result
    if not isinstance(res, ProbeResult):
        raise Fail(f"probe returned {type(res).__name__}, not hal.plugin.spec.ProbeResult")
    if res.status is not Status.AVAILABLE:
        raise Fail(f"probe says {res.status.value}: {res.reason}")
    if not res.reason or not res.evidence:
        raise Fail("probe result must carry a reason and the evidence that decided it")
    module = ctx.spec.module
    if not module:
        return "no vendor module to keep unimported"
    code = ("import sys, hal.plugin.registry as r; reg = r.Registry(); reg.candidates(); "
            f"print({module!r} in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=ctx.env, capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise Fail(f"probing in a fresh process failed: {out.stderr.strip().splitlines()[-1:]}")
    if out.stdout.strip().endswith("True"):
        raise Fail(f"probing imported {module}; a probe must only look (find_spec, device nodes, env)")
    return f"{res.reason}; {module} stays unimported while probing"


def check_load(ctx: Context) -> str:
    b = ctx.backend
    if b is None:
        raise Fail(f"load returned nothing ({ctx.candidate.load_error})")
    if getattr(b, "spec", None) != ctx.spec or b.device_type != ctx.spec.device_type:
        raise Fail("the loaded backend's spec/device_type differ from the declared spec")
    return repr(b)


# -- device facet ------------------------------------------------------------------------
def check_device(ctx: Context) -> str:
    b = ctx.backend
    n = b.device_count()
    if not isinstance(n, int) or n < 1:
        raise Fail(f"device_count() returned {n!r}; a loaded backend must see at least one device")
    cur = b.current_device()
    if not 0 <= cur < n:
        raise Fail(f"current_device() is {cur}, outside 0..{n - 1}")
    dev = b.device()
    if dev.type != ctx.spec.device_type:
        raise Fail(f"device() is {dev}, not of device type {ctx.spec.device_type!r}")
    b.set_device(cur)
    try:
        b.set_device(n)
    except ValueError:
        pass
    else:
        raise Fail(f"set_device({n}) succeeded with only {n} device(s); it must raise ValueError")
    b.synchronize()
    x = torch.randn(17, 5)
    y = x.to(dev)
    if y.device.type != dev.type:
        raise Fail(f"a tensor moved to {dev} reports device {y.device}")
    if not torch.equal(y.cpu(), x):
        raise Fail("host -> device -> host round trip changed the values")
    if torch.float32 not in b.supported_dtypes():
        raise Fail("float32 is not among supported_dtypes()")
    return f"{n} device(s), {dev}, dtypes {len(b.supported_dtypes())}"


def check_streams_events(ctx: Context) -> str:
    b = ctx.backend
    s = _optional(lambda: b.Stream(), "streams")
    start = _optional(lambda: b.Event(enable_timing=True), "events")
    end = b.Event(enable_timing=True)
    with b.stream(s):
        start.record()
        (torch.ones(64, 64, device=b.device()) @ torch.ones(64, 64, device=b.device())).sum()
        end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    if not ms >= 0:
        raise Fail(f"elapsed_time returned {ms!r}")
    return f"stream + timed events ({ms:.3f} ms)"


def check_memory_stats(ctx: Context) -> str:
    b = ctx.backend
    before = _optional(b.memory_allocated, "memory statistics")
    t = torch.empty(1 << 20, device=b.device())
    grown = b.memory_allocated() - before
    if grown < t.numel() * 4:
        raise Fail(f"memory_allocated() grew by {grown} bytes after a 4 MiB allocation")
    if b.max_memory_allocated() < b.memory_allocated():
        raise Fail("max_memory_allocated() is below memory_allocated()")
    del t
    return f"+{grown} bytes for a 4 MiB tensor"


def check_rng_round_trip(ctx: Context) -> str:
    b = ctx.backend
    dev = b.device()
    b.manual_seed(1234)
    state = b.get_rng_state()
    a = torch.randn(16, device=dev).cpu()
    b.set_rng_state(state)
    again = torch.randn(16, device=dev).cpu()
    if not torch.equal(a, again):
        raise Fail("set_rng_state(get_rng_state()) did not replay the same random numbers")
    b.manual_seed(1235)
    if torch.equal(torch.randn(16, device=dev).cpu(), a):
        raise Fail("different seeds gave the same random numbers")
    b.manual_seed(7)
    with b.fork_rng():
        torch.randn(8, device=dev)
    after_fork = torch.randn(4, device=dev).cpu()
    b.manual_seed(7)
    if not torch.equal(torch.randn(4, device=dev).cpu(), after_fork):
        raise Fail("draws inside fork_rng() changed the generator outside it")
    return "seed, get/set state and fork_rng replay exactly"


def check_autocast(ctx: Context) -> str:
    b = ctx.backend
    dt = _optional(b.low_precision_dtype, "autocast")
    if dt not in (torch.bfloat16, torch.float16):
        raise Fail(f"low_precision_dtype() is {dt}; expected bfloat16 or float16")
    lin = torch.nn.Linear(8, 8).to(b.device())
    x = torch.randn(4, 8, device=b.device())
    with _optional(b.autocast, "autocast"):
        y = lin(x)
    if y.dtype != dt:
        raise Fail(f"inside autocast() a linear layer returned {y.dtype}, expected {dt}")
    if lin(x).dtype != torch.float32:
        raise Fail("outside autocast() a linear layer no longer returns float32")
    return f"linear runs in {str(dt).replace('torch.', '')}"


def check_checkpoint_round_trip(ctx: Context) -> str:
    b = ctx.backend
    dev = b.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 6, device=dev)).sum().backward()
    opt.step()
    b.manual_seed(99)
    path = os.path.join(ctx.tmpdir, "ckpt.pt")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                "rng": b.get_rng_state().cpu()}, path)
    expected_draw = torch.randn(6, device=dev).cpu()
    state = torch.load(path, map_location="cpu", weights_only=True)
    fresh = torch.nn.Linear(6, 3).to(dev)
    fresh.load_state_dict(state["model"])
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh_opt.load_state_dict(state["optim"])
    b.set_rng_state(state["rng"])
    for p, q in zip(model.parameters(), fresh.parameters()):
        if q.device.type != dev.type or not torch.equal(p.detach().cpu(), q.detach().cpu()):
            raise Fail("parameters differ after saving and loading a checkpoint")
    if not torch.equal(torch.randn(6, device=dev).cpu(), expected_draw):
        raise Fail("the restored RNG state does not replay the draws after the checkpoint")
    x = torch.randn(5, 6, device=dev)
    for m, o in ((model, opt), (fresh, fresh_opt)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    if not torch.equal(model.weight.detach().cpu(), fresh.weight.detach().cpu()):
        raise Fail("the next optimizer step after resuming differs from the uninterrupted run")
    return "model, optimizer and device RNG resume exactly"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks_possible(ctx: Context) -> None:
    import torch.distributed as dist
    if not dist.is_available():
        raise Skip("this torch build has no torch.distributed")
    b = ctx.backend
    if not b.processes_share_devices() and b.device_count() < 2:
        raise Skip(f"2 ranks of {ctx.spec.dist_backend} need 2 devices; this machine shows "
                   f"{b.device_count()} (run the kit on a machine with 2 or more)")


def _run_two_ranks(ctx: Context, module: str, outs, args=(), timeout: float = 180.0,
                   extra_env: Optional[dict] = None) -> Tuple[bool, str]:
    """Run ``python -m module OUT ARGS...`` as ranks 0 and 1.  Returns (hung, why): whether the
    ranks were stopped at ``timeout``, and the first rank that exited badly with its last line."""
    env = {**ctx.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           **(extra_env or {})}
    procs = [subprocess.Popen([sys.executable, "-m", module, outs[r], *args],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    errs = []
    for p in procs:
        try:
            errs.append(p.communicate(timeout=timeout)[1])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.communicate()
            return True, ""
    for r, (p, err) in enumerate(zip(procs, errs)):
        if p.returncode != 0:
            last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
            return False, f"rank {r} exited with {p.returncode}: {last[0][:300]}"
    return False, ""


def check_collectives(ctx: Context) -> str:
    _two_ranks_possible(ctx)
    outs = [os.path.join(ctx.tmpdir, f"rank{r}.json") for r in range(2)]
    hung, died = _run_two_ranks(ctx, "hal.conformance._collective_worker", outs)
    if hung:
        raise Fail("collectives at 2 ranks did not finish within 180 s (a hung collective)")
    if died:
        raise Fail(died)
    res = []
    for o in outs:
        with open(o) as f:
            res.append(json.load(f))
    for r in res:
        if r["all_reduce"] != [3.0] * 3:
            raise Fail(f"all_reduce on rank {r['rank']} gave {r['all_reduce']}, expected [3.0, 3.0, 3.0]")
        if r["broadcast"] != [10.0, 11.0, 12.0]:
            raise Fail(f"broadcast from rank 1 gave {r['broadcast']} on rank {r['rank']}")
        if r["all_gather"] != [[0.0, 0.0], [1.0, 1.0]]:
            raise Fail(f"all_gather gave {r['all_gather']} on rank {r['rank']}")
        for part, v in r.get("c10d", {}).items():
            if not v["ok"]:
                raise Fail(f"c10d's {part} fails on rank {r['rank']} ({v['value']}): DeviceMesh, DTensor and "
                           f"FSDP2 read it; register the CCL's backend on its group for the device type "
                           f"(ProcessGroup._register_backend) so c10d can name and look it up")
        if r.get("c10d", {}).get("new_group", {}).get("value") != 2.0:
            raise Fail(f"all_reduce over new_group on rank {r['rank']} gave {r['c10d']['new_group']['value']}, expected 2.0")
    return f"all_reduce, broadcast, all_gather, barrier, group name, _get_backend, new_group over {res[0]['backend']}"


def check_ccl_ops(ctx: Context) -> str:
    """Every op of :data:`hal.conformance._ccl_ops.CCL_OPS` at 2 ranks, compared with gloo."""
    from hal.conformance._ccl_ops import CCL_OPS
    from hal.conformance._ccl_worker import ENV_OP_TIMEOUT

    _two_ranks_possible(ctx)
    outs = [os.path.join(ctx.tmpdir, f"ccl{r}.jsonl") for r in range(2)]
    ids = [o[0] for o in CCL_OPS if not ctx.ccl_ops or o[0] in ctx.ccl_ops]
    op_timeout = float(ctx.env.get(ENV_OP_TIMEOUT, "60"))
    limit = 120 + op_timeout * len(ids) / 2
    hung, died = _run_two_ranks(ctx, "hal.conformance._ccl_worker", outs, [",".join(ids)], timeout=limit,
                                extra_env={ENV_OP_TIMEOUT: str(op_timeout)})
    seen = []
    for o in outs:
        rows = []
        if os.path.exists(o):
            with open(o) as f:
                rows = [json.loads(line) for line in f if line.strip()][1:]
        seen.append({r["id"]: r for r in rows})
    ctx.ops = ops = []
    used = {o[0]: o[1] for o in CCL_OPS}
    for oid in ids:
        per_rank = [s.get(oid) for s in seen]
        bad = next((r for r in per_rank if r is not None and r["status"] == "failed"), None)
        if bad is not None:
            rank = per_rank.index(bad)
            row = {"status": "failed", "error": f"rank {rank}: {bad['error']}"}
        elif any(r is None for r in per_rank):
            row = {"status": "failed", "error": f"did not finish within {limit:.0f} s: the ranks were stopped"
                   if hung else f"did not finish: {died or 'a rank stopped before it'}"}
        elif any(r["status"] == "skipped" for r in per_rank):
            row = {"status": "skipped", "error": next(r["error"] for r in per_rank if r["status"] == "skipped")}
        else:
            row = {"status": "ok", "error": ""}
        note = next((r.get("note") for r in per_rank if r and r.get("note")), "")
        ops.append({"id": oid, "used_by": used[oid], **row, **({"note": note} if note else {})})
        if row["error"].startswith("did not finish"):
            break  # the first op that did not finish is the one that hung or crashed; the rest never ran
    failed = [o for o in ops if o["status"] == "failed"]
    if died and not failed:
        raise Fail(f"every op agrees with gloo, but {died}")
    if failed:
        raise Fail(f"{len(failed)} of {len(ids)} ops fail against gloo: "
                   + "; ".join(f"{o['id']}: {o['error']}" for o in failed))
    skipped = [o["id"] for o in ops if o["status"] == "skipped"]
    return (f"{len(ops) - len(skipped)} of {len(ids)} ops agree with gloo"
            + (f" ({', '.join(skipped)} skipped: see ops)" if skipped else ""))


def check_op_profile(ctx: Context) -> str:
    from hal.op_support.observe import probe_ops
    reg, c = ctx.registry, ctx.candidate
    declared = [p for p in reg.call_for(c, "hal_torch_op_profile") if p]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observed = probe_ops(ctx.backend)
    failing = {k: v["detail"] for k, v in observed["ops"].items() if v["status"] == "failing"}
    if failing:
        raise Fail("ops fail on the device: " + "; ".join(f"{k}: {v}" for k, v in failing.items()))
    s = observed["summary"]
    if not declared:
        return (f"observed {s['native']} native, {s['fallback']} fallback; the plugin ships no profile "
                f"(write one with `hal probe --out` and return it from hal_torch_op_profile)")
    prof = declared[0]
    # hal.op_profile/1 maps ops to {status}; op_coverage.torch_profile/1 keeps the probe's statuses in "probe"
    statuses = prof.get("probe", {}) if prof.get("schema") == "op_coverage.torch_profile/1" else prof.get("ops", {})
    wrong = [f"{op}: declared {d['status']}, observed {observed['ops'][op]['status']}"
             for op, d in statuses.items()
             if op in observed["ops"] and observed["ops"][op]["status"] != d["status"]]
    if wrong:
        raise Fail("shipped op profile disagrees with the device: " + "; ".join(wrong))
    return f"shipped profile matches the device ({s['native']} native, {s['fallback']} fallback)"


def check_deepspeed(ctx: Context) -> str:
    """The DeepSpeed accelerator hal installs for the backend (:mod:`hal.stacks.deepspeed`), in a fresh
    process: names, CCL, RNG, streams, memory, FusedAdam against torch's AdamW."""
    import importlib.util
    if importlib.util.find_spec("deepspeed") is None:
        raise Skip("DeepSpeed is not installed here (pip install --no-build-isolation deepspeed)")
    out = os.path.join(ctx.tmpdir, "deepspeed.json")
    p = subprocess.run([sys.executable, "-m", "hal.conformance._deepspeed_worker", out], env=ctx.env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or not os.path.exists(out):
        last = [ln for ln in p.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        raise Fail(f"the DeepSpeed worker exited with {p.returncode}: {last[0][:300]}")
    with open(out) as f:
        res = json.load(f)
    bad = [r for r in res["parts"] if not r["ok"]]
    if bad:
        raise Fail("; ".join(f"{r['part']}: {r['detail']}" for r in bad) +
                   " (DeepSpeed's switches: DS_ACCELERATOR=<name> picks its own accelerator, "
                   "\"torch_adam\": true avoids its fused optimizer)")
    return f"{res['choice']}: " + ", ".join(r["part"] for r in res["parts"])


#: (id, title, function) in the order they run
CHECKS: Tuple[Tuple[str, str, Callable[[Context], Optional[str]]], ...] = (
    ("metadata", "registry metadata (spec)", check_metadata),
    ("probe", "probe: status, evidence, vendor module untouched", check_probe),
    ("load", "load returns the backend", check_load),
    ("device", "device facet: count, selection, sync, round trip", check_device),
    ("streams", "streams and timed events", check_streams_events),
    ("memory", "memory statistics", check_memory_stats),
    ("rng", "RNG: seed, state round trip, fork", check_rng_round_trip),
    ("autocast", "autocast dtype", check_autocast),
    ("checkpoint", "checkpoint round trip (model, optimizer, RNG)", check_checkpoint_round_trip),
    ("collectives", "collectives at 2 ranks", check_collectives),
    ("ccl", "every c10d op a CCL must serve, against gloo, at 2 ranks", check_ccl_ops),
    ("op_profile", "op profile consistency (hal probe)", check_op_profile),
    ("deepspeed", "DeepSpeed accelerator: names, CCL, RNG, streams, memory, FusedAdam", check_deepspeed),
)
