"""FSDP2 + a sharded (DCP) checkpoint through hal on one device, saved, resumed in a fresh process, compared.

World size 1: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so on a single
CUDA device the job is one rank (``cpu:gloo,cuda:nccl`` from ``hal.dist.init``), and the
parameters are DTensors on a 1-device mesh -- hal.checkpoint still takes its DCP path
(``dcp.async_save`` with the host copy, shards, sha256, manifest) and resumes through DCP.

1. an uninterrupted run to ``--steps``, saving asynchronously at ``--save-at`` (``Checkpointer``);
2. a fresh process resumes from that step and trains on to ``--steps``;
3. the resumed losses must equal the uninterrupted run's within rtol 1e-5 (same device, same
   kernels, the same batches: in practice bit-equal), and ``hal checkpoint consolidate`` of the
   step must equal the parameters gathered at the save.

    HAL_BACKEND=cuda python scripts/gpu_check.d/fsdp_dcp.py       # scripts/gpu_check.d/parallel.sh
    HAL_BACKEND=cpu  python scripts/gpu_check.d/fsdp_dcp.py --json # the same on the CPU (gloo)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DIM, BLOCKS, BATCH = 256, 3, 16
RTOL = 1e-5


def _model():
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import hal

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(DIM, 2 * DIM), torch.nn.GELU(),
                                                      torch.nn.Linear(2 * DIM, DIM)) for _ in range(BLOCKS)])
    model.to(hal.device())
    mesh = init_device_mesh(hal.device_type(), (1,), mesh_dim_names=("dp",))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _batch(step: int):
    import torch

    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)


def train(root: str, steps: int, save_at: int) -> dict:
    """One rank: resume from ``root`` if it holds a step, train to ``steps``; losses per step."""
    import torch
    import torch.distributed as dist

    import hal
    import hal.checkpoint as ckpt

    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt, keep_last=2)
    ck = saver.resume()
    step = ck.step if ck else 0
    losses, saved, stall = {}, None, None
    with saver:
        while step < steps:
            x, y = (t.to(hal.device()) for t in _batch(step))
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
            losses[step] = loss.item()
            if step == save_at:
                saved = {k: v.full_tensor().cpu().tolist() for k, v in model.state_dict().items()}
                saver.save(step)
                stall = saver.last_stall_s
    manifest = json.loads((ckpt.latest(root) / "manifest.json").read_text())
    return {"losses": losses, "resumed_from": ck.step if ck else None, "saved": saved, "stall_s": stall,
            "mode": manifest["mode"], "world_size": dist.get_world_size(), "backend": dist.get_backend(),
            "device": str(hal.device())}


def _run(root: Path, steps: int, save_at: int, timeout: float) -> dict:
    from hal.dist.launch import spawn

    res = spawn(f"{__file__}:train", 1, kwargs={"root": str(root), "steps": steps, "save_at": save_at},
                timeout=timeout)
    if not res.ok:
        raise SystemExit(f"the one-rank FSDP2 job failed: {res.first_error()}\n{res.ranks[0].stderr_tail[-3000:]}")
    return res.ranks[0].result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--save-at", type=int, default=4)
    p.add_argument("--timeout", type=float, default=240, help="seconds one job may take (default 240)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hal-gpu-fsdp-dcp-") as tmp:
        whole = _run(Path(tmp) / "whole", args.steps, args.save_at, args.timeout)
        # the only step the uninterrupted run saved; a fresh process resumes from it
        resumed_root = Path(tmp) / "whole"
        step_dir = f"step-{args.save_at:08d}"
        resumed = _run(resumed_root, args.steps, -1, args.timeout)  # -1: saves nothing
        out = Path(tmp) / "model.safetensors"
        cons = subprocess.run([sys.executable, "-m", "hal", "checkpoint", "consolidate", str(resumed_root / step_dir),
                               "-o", str(out)], capture_output=True, text=True)
        info = subprocess.run([sys.executable, "-m", "hal", "checkpoint", "info", str(resumed_root / step_dir),
                               "--json", "--verify"], capture_output=True, text=True)
        problems = []
        if cons.returncode != 0:
            problems.append(f"hal checkpoint consolidate failed: {cons.stderr.strip()[-500:]}")
        else:
            from safetensors.torch import load_file
            import torch

            full = load_file(str(out))
            for k, v in whole["saved"].items():
                if k not in full or not torch.equal(full[k], torch.tensor(v, dtype=full[k].dtype)):
                    problems.append(f"consolidated {k} differs from the parameter gathered at the save")
        if info.returncode != 0:
            problems.append(f"hal checkpoint info --verify failed: {info.stderr.strip()[-500:]}")
    if resumed["resumed_from"] != args.save_at:
        problems.append(f"the fresh job resumed from {resumed['resumed_from']}, not step {args.save_at}")
    if whole["mode"] != "dcp":
        problems.append(f"the checkpoint's mode is {whole['mode']!r}, not 'dcp' (the sharded path)")
    diffs = {}
    for s in range(args.save_at + 1, args.steps + 1):
        a, b = whole["losses"][str(s)], resumed["losses"].get(str(s))
        diffs[s] = None if b is None else abs(a - b)
        if b is None or not math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0):
            problems.append(f"step {s}: resumed loss {b} vs uninterrupted {a} (rtol {RTOL})")
    report = {"backend": os.environ.get("HAL_BACKEND"), "process_group": whole["backend"],
              "device": whole["device"], "world_size": whole["world_size"], "save_at": args.save_at,
              "steps": args.steps, "async_stall_s": whole["stall_s"], "loss_abs_diff": diffs,
              "ok": not problems, "problems": problems}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"FSDP2 on {whole['device']} ({whole['backend']}, world size {whole['world_size']}): saved at "
              f"step {args.save_at} (async stall {whole['stall_s'] * 1e3:.1f} ms), resumed in a fresh process "
              f"to step {args.steps}")
        print("largest |loss difference| after the resume:",
              max((d for d in diffs.values() if d is not None), default=None))
        print("consolidate + info --verify:", "ok" if cons.returncode == 0 and info.returncode == 0 else "FAILED")
        for line in problems:
            print("PROBLEM:", line)
        print("OK" if not problems else "FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
