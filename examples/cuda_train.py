"""A small training script written for CUDA, unchanged: run it with `hal run`.

    hal run examples/cuda_train.py --out losses.json
    HAL_BACKEND=emu hal run --nproc-per-node 2 examples/cuda_train.py --out losses.json
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out")
    args = p.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
    else:
        rank, world, local = 0, 1, 0
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).cuda()
    if distributed:
        model = DDP(model, device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x_all, y_all = torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g)
    losses = []
    for _ in range(args.steps):
        xb = x_all[rank::world].cuda(non_blocking=True)
        yb = y_all[rank::world].to("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(xb)
        loss = nn.functional.mse_loss(out.float(), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        if distributed:
            dist.all_reduce(mean)
            mean /= world
        losses.append(mean.item())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    if rank == 0:
        print(f"losses {losses} peak_bytes {peak}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"losses": losses, "world_size": world}, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
