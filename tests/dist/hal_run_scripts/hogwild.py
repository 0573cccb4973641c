"""Hogwild on a CUDA-written script: a share_memory() model trained by processes started
with torch.multiprocessing.spawn (which re-imports this script in each child).

    hal run hogwild.py OUT.json
"""
import json
import sys

import torch
import torch.multiprocessing as mp
import torch.nn as nn

# module level, as such scripts have it: evaluated again in every spawned child
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(rank, model, steps, results):
    torch.manual_seed(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 4).to(DEVICE)
    y = x.sum(dim=1, keepdim=True)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    results[rank] = {"available": torch.cuda.is_available(), "device": str(x.device.type),
                     "loss": loss.item()}


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(DEVICE)
    model.share_memory()
    with torch.no_grad():
        before = float(nn.functional.mse_loss(model(torch.ones(8, 4)), torch.full((8, 1), 4.0)))
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(train, args=(model, 40, results), nprocs=2, join=True)
    with torch.no_grad():
        after = float(nn.functional.mse_loss(model(torch.ones(8, 4)), torch.full((8, 1), 4.0)))
    with open(out, "w") as f:
        json.dump({"children": dict(results), "loss_before": before, "loss_after": after,
                   "parent_device": next(model.parameters()).device.type}, f)


if __name__ == "__main__":
    main()
