"""What hal.metrics' communication timing costs a training step: ``metrics.watch(model)`` vs the same job without it.

DDP (default): a 2-rank job (hal.dist.launch.spawn, gloo on cpu or the selected backend's CCL)
holds two identical DDP models (a stack of ``Linear(d, d)`` + ReLU layers, SGD, one batch per
rank), each with its own ``MetricsLogger`` that logs every step; one logger also watches its
model.  The job runs their steps alternately, so the machine's load hits both alike (a barrier
before each step, untimed, so that neither absorbs the ranks' skew), and gives each
contender's median step time (the slowest rank's) and median CPU time per step
(``time.process_time``: every thread of the process, gloo's included; less sensitive than wall
time to other work on the machine).  Each repeat is a fresh job; the contender stepped first
alternates.

FSDP2 (``--kind fsdp2``): ``fully_shard`` per layer and at the root, the same two contenders in
one job.  The watch wraps the ``torch.distributed`` functions FSDP2 issues its collectives
through, for every model of the process, so it is paused (``metrics.comm.pause()``: the
wrappers removed) around each step of the plain model, outside the timed step.

Baseline: the model without the watch.  Ratio: median of the per-repeat ratios (min-max).
Goal: <= 1.02x.

    python bench/bench_comm_overhead.py                     # DDP, 5 repeats, d=1024, 8 layers, batch 64
    HAL_BACKEND=emu python bench/bench_comm_overhead.py --repeat 3 --json
    python bench/bench_comm_overhead.py --kind fsdp2 --repeat 6
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def step_job(folder: str, first: str, dim: int, layers: int, batch: int, steps: int, warmup: int,
             plain_hook: bool = False, kind: str = "ddp") -> dict:
    """One rank: the watched and the plain model (DDP or FSDP2) stepped alternately; each one's
    median step and CPU time per step."""
    import torch
    import torch.distributed as dist

    import hal
    import hal.metrics

    rank = dist.get_rank()
    x = torch.randn(batch, dim, generator=torch.Generator().manual_seed(1 + rank)).to(hal.device())
    jobs = {}
    for key in ("watch", "plain"):
        torch.manual_seed(0)
        body = [torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU()) for _ in range(layers)]
        model = torch.nn.Sequential(*body).to(hal.device())
        if kind == "fsdp2":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh(hal.device_type(), (dist.get_world_size(),))
            for block in model:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
        else:
            model = torch.nn.parallel.DistributedDataParallel(model)
        metrics = hal.metrics.MetricsLogger(folder, key, straggler_factor=None)
        if key == "watch":
            metrics.watch(model)
        elif plain_hook:  # torch's own all-reduce comm hook: what any comm hook costs DDP
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            model.register_comm_hook(None, allreduce_hook)
        jobs[key] = (model, torch.optim.SGD(model.parameters(), lr=1e-4), metrics, [], [], [])
    order = (first, "plain" if first == "watch" else "watch")
    watch = jobs["watch"][2].comm
    for i in range(warmup + steps):
        for key in order:
            model, opt, metrics, times, comm, cpu = jobs[key]
            if kind == "fsdp2":  # the watch's wrappers would see the plain model's collectives too
                watch.resume() if key == "watch" else watch.pause()
            dist.barrier()  # both ranks start the step together: neither contender absorbs the other's skew
            c0, t0 = time.process_time(), time.perf_counter()
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            rec = metrics.log_step(i, samples=batch)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                comm.append(rec["comm_time_s"] or 0.0)
    out = {"backend": dist.get_backend(), "device": str(hal.device())}
    for key, (_, _, metrics, times, comm, cpu) in jobs.items():
        metrics.close()
        t = torch.tensor([statistics.median(times), statistics.median(cpu)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[key] = {"step_s": t[0].item(), "cpu_s": t[1].item(), "comm_s": statistics.median(comm)}
    return out


def _spawn(kwargs: dict, timeout: float) -> dict:
    from hal.dist.launch import spawn

    # one intra-op thread per rank unless the caller chose, as torchrun sets for several ranks a node
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    res = spawn(f"{__file__}:step_job", 2, kwargs=kwargs, timeout=timeout, env=env)
    if not res.ok:
        raise SystemExit(f"the 2-rank job failed: {res.first_error()}\n"
                         + "".join(r.stderr_tail[-1500:] for r in res.ranks))
    return res.ranks[0].result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=1024, help="layer width (default 1024)")
    p.add_argument("--layers", type=int, default=8, help="Linear layers (default 8: 8.4 M parameters, 2 buckets)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank (default 64)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per contender and job (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--repeat", type=int, default=5, help="fresh jobs (default 5)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one job may take (default 600)")
    p.add_argument("--kind", choices=("ddp", "fsdp2"), default="ddp",
                   help="ddp (default) or fsdp2 (fully_shard per layer and root)")
    p.add_argument("--plain-hook", action="store_true",
                   help="the baseline registers torch's own allreduce_hook (what any DDP comm hook costs)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.plain_hook and args.kind != "ddp":
        p.error("--plain-hook is a DDP comm hook: use it with --kind ddp")
    kw = {k: getattr(args, k) for k in ("dim", "layers", "batch", "steps", "warmup", "plain_hook", "kind")}
    got = {"watch": [], "plain": []}
    ratios, cpu_ratios, comm, name = [], [], [], ""
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            job = {"folder": os.path.join(tmp, f"{r}"), "first": "watch" if r % 2 == 0 else "plain", **kw}
            out = _spawn(job, args.timeout)
            for key in got:
                got[key].append(out[key]["step_s"])
            comm.append(out["watch"]["comm_s"])
            name = f"{out['backend']} on {out['device']}"
            ratios.append(out["watch"]["step_s"] / out["plain"]["step_s"])
            cpu_ratios.append(out["watch"]["cpu_s"] / out["plain"]["cpu_s"])
            print(f"repeat {r + 1}/{args.repeat}: watch {out['watch']['step_s'] * 1e3:.1f} ms, plain "
                  f"{out['plain']['step_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    params = args.layers * (args.dim * args.dim + args.dim)
    load = os.getloadavg()
    report = {**kw, "parameters": params, "repeat": args.repeat, "cpus": os.cpu_count(), "loadavg": load,
              "process_group": name, "step_s": {k: (statistics.median(v), min(v), max(v)) for k, v in got.items()},
              "comm_s_median": statistics.median(comm),
              "ratio": (statistics.median(ratios), min(ratios), max(ratios)),
              "cpu_ratio": (statistics.median(cpu_ratios), min(cpu_ratios), max(cpu_ratios)), "goal": 1.02}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    how = "DDP" if args.kind == "ddp" else "FSDP2 (fully_shard per layer and root)"
    print(f"{how} step, 2 ranks ({name}): {args.layers} x Linear({args.dim}, {args.dim}) ({params / 1e6:.1f} M "
          f"parameters), batch {args.batch} per rank, SGD, log_step every step; median of {args.steps} steps per "
          f"job and contender, {args.repeat} jobs; {os.cpu_count()} CPU(s), load average {load[0]:.1f}")
    base = "torch's allreduce_hook (baseline)" if args.plain_hook else "without watch (baseline)"
    for k, label in (("plain", base), ("watch", "metrics.watch(model)")):
        m, lo, hi = report["step_s"][k]
        tail = "" if k == "plain" else "   ratio {:.3f}x ({:.3f}-{:.3f}), goal <= 1.02x".format(*report["ratio"])
        print(f"  {label:34} {m * 1e3:9.1f} ms ({lo * 1e3:.1f}-{hi * 1e3:.1f}){tail}")
    print("  CPU time per step (the process's threads, gloo's included): ratio {:.3f}x ({:.3f}-{:.3f})".format(
        *report["cpu_ratio"]))
    print(f"  communication time recorded per step: {report['comm_s_median'] * 1e3:.1f} ms (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
