"""Sharded checkpoints of an FSDP2 job (cpu/gloo) through hal.checkpoint (DCP), against named baselines.

Every repeat starts fresh processes (hal.dist.launch.spawn): one 4-rank job that saves, then a
4-rank and a 2-rank job that load what it saved, in alternating order.  The model is an FSDP2
``fully_shard`` stack of ``Linear(2048, 2048)`` layers (``--mb`` of float32 weights) with AdamW
state (two more tensors per weight), so each rank's shards are ``3 * mb / 4`` MiB.

* a. save at 4 ranks: ``hal.checkpoint`` synchronous save (DCP shards, sha256, fsync, manifest)
  vs the baseline ``torch.save`` of the full state gathered on rank 0 (``get_state_dict`` with
  ``full_state_dict=True, cpu_offload=True``) + fsync; ``dcp.save`` alone is shown beside it;
* b. stall per save: ``Checkpointer.save`` with async saving (the time the training loop is
  blocked) vs the same with ``async_save=False`` (goal <= 0.1x); the host copy of the shards alone
  (``torch.clone`` of every local shard into fresh memory) is the floor of a snapshot;
* c. load: resharding (saved at 4 ranks, resumed at 2) vs same-size (4 -> 4) ``Checkpointer.resume``
  (goal <= 1.5x).

Saves within a job run round-robin, each after ``os.sync()``; times are of the whole job (a barrier
before, the slowest rank's time).  Ratios: median of the per-repeat ratios (min-max).

    python bench/bench_sharded_checkpoint.py                 # 3 repeats, 128 MiB of weights
    python bench/bench_sharded_checkpoint.py --mb 256 --repeat 5 --dir /scratch --json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

WIDTH = 2048


def _model(mb: int):
    """The FSDP2 stack on this process group, and AdamW after one step (its state exists)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import hal

    torch.manual_seed(0)
    layers = max(1, mb * 2**20 // (4 * WIDTH * WIDTH))
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])
    mesh = init_device_mesh(hal.device_type(), (dist.get_world_size(),), mesh_dim_names=("dp",))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).sum().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def _timed(fn):
    """Seconds of ``fn()`` for the whole job: a barrier before, the slowest rank's time after."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    fn()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _slowest(seconds: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_job(root: str, mb: int, rounds: int) -> dict:
    """One rank of the 4-rank saving job: every contender ``rounds`` times, round-robin."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    import hal.checkpoint as ckpt
    from hal.checkpoint._dcp import local_tensors

    rank = dist.get_rank()
    model, opt = _model(mb)
    root = Path(root)
    sync_saver = ckpt.Checkpointer(root / "sync", model=model, optimizer=opt, async_save=False, keep_last=1)
    async_saver = ckpt.Checkpointer(root / "async", model=model, optimizer=opt, keep_last=1)

    def torch_save():
        full = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            f = root / "full.pt"
            torch.save({"model": full[0], "optimizer": full[1]}, f)
            _fsync(f)

    def dcp_save():
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=str(root / "dcp"))

    def host_copy():
        msd, osd = get_state_dict(model, opt)
        return [t.clone() for t in local_tensors({"model": msd, "optimizer": osd})]

    times = {k: [] for k in ("torch_save", "dcp_save", "hal_sync", "sync_stall", "async_stall",
                             "async_commit", "host_copy")}
    step = 0
    for _ in range(rounds):
        for key in ("torch_save", "dcp_save", "hal_sync", "async", "host_copy"):
            if rank == 0:
                os.sync()
            step += 1
            if key == "torch_save":
                times[key].append(_timed(torch_save))
            elif key == "dcp_save":
                times[key].append(_timed(dcp_save))
            elif key == "hal_sync":
                times[key].append(_timed(lambda: sync_saver.save(step)))
                times["sync_stall"].append(_slowest(sync_saver.last_stall_s))
            elif key == "async":
                times["async_commit"].append(_timed(lambda: (async_saver.save(step), async_saver.wait())))
                times["async_stall"].append(_slowest(async_saver.last_stall_s))
            else:
                times[key].append(_timed(host_copy))
    shard_bytes = sum(t.numel() * t.element_size()   # this rank's shards (and the optimizer's step counts)
                      for t in local_tensors(dict(zip(("model", "optimizer"), get_state_dict(model, opt)))))
    return {"times": times, "shard_bytes": shard_bytes, "last": str(async_saver.last_path)}


def load_job(root: str, mb: int) -> dict:
    """One rank of a loading job: ``Checkpointer.resume`` of the 4-rank save, at this world size."""
    import hal.checkpoint as ckpt

    model, opt = _model(mb)
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt)
    got = {}
    t = _timed(lambda: got.setdefault("ck", saver.resume()))
    return {"load": t, "step": got["ck"].step if got["ck"] else None}


def _spawn(target: str, nproc: int, kwargs: dict, timeout: float):
    from hal.dist.launch import spawn

    res = spawn(f"{__file__}:{target}", nproc, kwargs=kwargs, env={"HAL_BACKEND": "cpu"}, timeout=timeout)
    if not res.ok:
        raise SystemExit(f"{target} at {nproc} ranks failed: {res.first_error()}\n"
                         + "".join(r.stderr_tail[-1500:] for r in res.ranks))
    return res.ranks[0].result


def _stat(values):
    return statistics.median(values), min(values), max(values)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=128, help="float32 weights in MiB, over all ranks (default 128)")
    p.add_argument("--repeat", type=int, default=3, help="fresh jobs of each kind (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="saves of each kind per saving job (default 2)")
    p.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one job may take (default 600)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)

    rows = {k: [] for k in ("torch_save", "dcp_save", "hal_sync", "sync_stall", "async_stall",
                            "async_commit", "host_copy", "load_4_4", "load_4_2")}
    ratios = {"a": [], "a_dcp": [], "b": [], "b_copy": [], "c": []}
    shard_bytes = None
    for r in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="hal-bench-sharded-", dir=args.dir) as tmp:
            saved = _spawn("save_job", 4, {"root": tmp, "mb": args.mb, "rounds": args.rounds}, args.timeout)
            shard_bytes = saved["shard_bytes"]
            med = {k: statistics.median(v) for k, v in saved["times"].items()}
            for k, v in med.items():
                rows[k].append(v)
            order = (4, 2) if r % 2 == 0 else (2, 4)
            loads = {n: _spawn("load_job", n, {"root": str(Path(tmp) / "async"), "mb": args.mb},
                               args.timeout)["load"] for n in order}
            rows["load_4_4"].append(loads[4])
            rows["load_4_2"].append(loads[2])
            ratios["a"].append(med["hal_sync"] / med["torch_save"])
            ratios["a_dcp"].append(med["dcp_save"] / med["torch_save"])
            ratios["b"].append(med["async_stall"] / med["sync_stall"])
            ratios["b_copy"].append(med["host_copy"] / med["sync_stall"])
            ratios["c"].append(loads[2] / loads[4])
            print(f"repeat {r + 1}/{args.repeat}: torch.save {med['torch_save']:.2f} s, hal sync "
                  f"{med['hal_sync']:.2f} s, async stall {med['async_stall'] * 1e3:.0f} ms, load 4->4 "
                  f"{loads[4]:.2f} s, 4->2 {loads[2]:.2f} s", file=sys.stderr, flush=True)
    load = os.getloadavg()
    report = {"mb": args.mb, "shard_mib_per_rank": shard_bytes / 2**20, "repeat": args.repeat,
              "rounds": args.rounds, "cpus": os.cpu_count(), "loadavg": load,
              "seconds": {k: _stat(v) for k, v in rows.items()},
              "ratios": {k: _stat(v) for k, v in ratios.items()}}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    s, q = report["seconds"], report["ratios"]

    def line(label, key, ratio=None, goal=""):
        m, lo, hi = s[key]
        tail = ""
        if ratio is not None:
            rm, rlo, rhi = q[ratio]
            tail = f"   {rm:6.3f}x ({rlo:.3f}-{rhi:.3f}){goal}"
        print(f"  {label:48} {m:8.3f} s ({lo:.3f}-{hi:.3f}){tail}")

    print(f"FSDP2 on cpu/gloo: {args.mb} MiB of float32 weights + AdamW state, "
          f"{shard_bytes / 2**20:.0f} MiB of shards per rank at 4 ranks; {args.repeat} repeats x "
          f"{args.rounds} rounds; {os.cpu_count()} CPU(s), load average {load[0]:.1f}")
    print("a. save at 4 ranks (ratio vs torch.save of the gathered state):")
    line("torch.save of the full state on rank 0 (base)", "torch_save")
    line("dcp.save (DCP alone)", "dcp_save", "a_dcp")
    line("hal.checkpoint sync save (DCP + sha256)", "hal_sync", "a")
    print("b. training-loop stall per save (ratio vs the synchronous save's stall, goal <= 0.1x):")
    line("Checkpointer.save, async_save=False (base)", "sync_stall")
    line("Checkpointer.save, async stall", "async_stall", "b")
    line("  async save until committed", "async_commit")
    line("  floor: clone of every local shard", "host_copy", "b_copy")
    print("c. load (ratio vs the same-size load 4 -> 4, goal <= 1.5x):")
    line("Checkpointer.resume, saved at 4, 4 ranks (base)", "load_4_4")
    line("Checkpointer.resume, saved at 4, 2 ranks", "load_4_2", "c")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
