"""Asynchronous (Hogwild-style) regression with `torch.multiprocessing.spawn`.

A shared model (`share_memory()`) and shared counters are handed to `mp.spawn`
workers; each worker draws its own data shard, trains lock-free on the shared weights and
reports its step count and last loss through shared-memory tensors. The device is chosen as
CUDA-written code does (`"cuda" if torch.cuda.is_available() else "cpu"`).
"""
import argparse
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self, d_in=8, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


def make_data(n, seed, d_in=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.linspace(-1, 1, d_in).unsqueeze(1)
    y = torch.sin(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def worker(rank, model, counter, last_losses, args):
    torch.manual_seed(args.seed + rank)
    device = next(model.parameters()).device
    x, y = make_data(512, seed=100 + rank)
    x, y = x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    for step in range(args.steps):
        idx = torch.randint(0, x.size(0), (args.batch_size,))
        optimizer.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        counter[rank] += 1
        if step % args.log_interval == 0:
            print(f"[worker {rank}] step {step:3d} loss {loss.item():.6f}", flush=True)
    last_losses[rank] = loss.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Regressor().to(device)
    model.share_memory()

    counter = torch.zeros(args.num_processes, dtype=torch.long).share_memory_()
    last_losses = torch.zeros(args.num_processes).share_memory_()

    t0 = time.time()
    mp.spawn(worker, args=(model, counter, last_losses, args), nprocs=args.num_processes, join=True)
    print(f"{int(counter.sum())} shared updates in {time.time() - t0:.1f}s; last losses {last_losses.tolist()}")

    x, y = make_data(256, seed=7)
    model.eval()
    with torch.no_grad():
        val = nn.functional.mse_loss(model(x.to(device)), y.to(device))
    print(f"validation loss {val.item():.6f}")


if __name__ == "__main__":
    main()
