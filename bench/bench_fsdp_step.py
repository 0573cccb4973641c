"""An FSDP2 training step at 2 ranks on the emulator (HAL_BACKEND=emu, emuccl) vs the same on cpu/gloo.

The job is written once with hal's API (``hal.device()``, ``init_device_mesh(hal.device_type(), ...)``):
``fully_shard`` per block and at the root of a stack of MLP blocks (``Linear(d, 4d)``, GELU,
``Linear(4d, d)``, residual), AdamW, one global batch split over the ranks.  Each repeat starts
two fresh 2-rank jobs (hal.dist.launch.spawn), emu and cpu in alternating order; a job times
``--steps`` steps after ``--warmup`` (forward, backward, optimizer step, the loss all-reduced),
the slowest rank's median step.  Baseline: cpu/gloo.  Ratio: median of the per-repeat ratios (min-max).

    python bench/bench_fsdp_step.py                      # 3 repeats, d=512, 4 blocks, batch 64 x 128
    python bench/bench_fsdp_step.py --dim 1024 --blocks 8 --repeat 5 --json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def step_job(dim: int, blocks: int, batch: int, seq: int, steps: int, warmup: int) -> dict:
    """One rank: FSDP2 over every rank of this job, ``warmup + steps`` steps; the median step time."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import hal

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(blocks)]).to(hal.device())
    mesh = init_device_mesh(hal.device_type(), (world,), mesh_dim_names=("dp",))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, dim, generator=g).chunk(world)[rank].to(hal.device())
    y = torch.randn(batch, seq, dim, generator=g).chunk(world)[rank].to(hal.device())
    times, losses = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss = loss.detach()
        dist.all_reduce(loss)
        losses.append(loss.item() / world)  # .item() waits for the device
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # on cpu (gloo) and emu (emuccl) alike: a host tensor
    return {"step_s": t.item(), "losses": losses, "backend": dist.get_backend(),
            "device": str(hal.device())}


def _spawn(backend: str, kwargs: dict, timeout: float) -> dict:
    from hal.dist.launch import spawn

    res = spawn(f"{__file__}:step_job", 2, kwargs=kwargs, env={"HAL_BACKEND": backend}, timeout=timeout)
    if not res.ok:
        raise SystemExit(f"the 2-rank FSDP2 job on {backend} failed: {res.first_error()}\n"
                         + "".join(r.stderr_tail[-1500:] for r in res.ranks))
    return res.ranks[0].result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=512, help="model width (default 512)")
    p.add_argument("--blocks", type=int, default=4, help="MLP blocks, each fully_shard-ed (default 4)")
    p.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    p.add_argument("--seq", type=int, default=128, help="tokens per sample (default 128)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per job (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--repeat", type=int, default=3, help="fresh job pairs (default 3)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one job may take (default 600)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    kw = {k: getattr(args, k) for k in ("dim", "blocks", "batch", "seq", "steps", "warmup")}
    got = {"emu": [], "cpu": []}
    ratios, loss_diff, names = [], 0.0, {}
    for r in range(args.repeat):
        out = {}
        for backend in (("emu", "cpu") if r % 2 == 0 else ("cpu", "emu")):
            out[backend] = _spawn(backend, kw, args.timeout)
            got[backend].append(out[backend]["step_s"])
            names[backend] = f"{out[backend]['backend']} on {out[backend]['device']}"
        ratios.append(out["emu"]["step_s"] / out["cpu"]["step_s"])
        loss_diff = max([loss_diff, *(abs(a - b) for a, b in zip(out["emu"]["losses"], out["cpu"]["losses"]))])
        print(f"repeat {r + 1}/{args.repeat}: emu {out['emu']['step_s'] * 1e3:.1f} ms, cpu "
              f"{out['cpu']['step_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    params = args.blocks * (8 * args.dim * args.dim + 5 * args.dim)
    load = os.getloadavg()
    report = {**kw, "parameters": params, "repeat": args.repeat, "cpus": os.cpu_count(), "loadavg": load,
              "step_s": {k: (statistics.median(v), min(v), max(v)) for k, v in got.items()},
              "ratio": (statistics.median(ratios), min(ratios), max(ratios)),
              "max_loss_difference": loss_diff, "process_groups": names}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"FSDP2 step, 2 ranks: {args.blocks} blocks of d={args.dim} ({params / 1e6:.1f} M parameters), "
          f"global batch {args.batch} x {args.seq}, AdamW; median of {args.steps} steps per job, "
          f"{args.repeat} job pairs; {os.cpu_count()} CPU(s), load average {load[0]:.1f}")
    for k, label in (("cpu", "cpu/gloo (baseline)"), ("emu", "emu/emuccl")):
        m, lo, hi = report["step_s"][k]
        tail = "" if k == "cpu" else "   ratio {:.2f}x ({:.2f}-{:.2f})".format(*report["ratio"])
        print(f"  {label:22} {names[k]:22} {m * 1e3:9.1f} ms ({lo * 1e3:.1f}-{hi * 1e3:.1f}){tail}")
    print(f"  largest loss difference emu vs cpu over all steps: {loss_diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
