"""`torch.compile(model)` on a small classifier, trained and then evaluated compiled.

As in the torch.compile tutorial: build the model, `.to(device)`, `opt_model =
torch.compile(model)`, train a few steps with the compiled module (the first call
compiles), `torch.set_float32_matmul_precision("high")` for TF32 on recent GPUs.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, d_in=32, hidden=64, n_classes=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.fc2(F.gelu(self.ln(self.fc1(x))))


def timed(fn):
    if torch.cuda.is_available():
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        return result, start.elapsed_time(end) / 1000
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    g = torch.Generator().manual_seed(0)
    x_all = torch.randn(args.steps, args.batch_size, 32, generator=g)
    y_all = (x_all[..., :4] * torch.tensor([1.0, -1.0, 0.5, 2.0])).argmax(-1)

    model = Classifier().to(device)
    opt_model = torch.compile(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(opt_model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for step in range(args.steps):
        x, y = x_all[step].to(device), y_all[step].to(device)
        loss, secs = timed(lambda: train_step(x, y))
        if step == 0:
            print(f"first step (includes compilation): {secs:.2f}s")
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.6f}")

    opt_model.eval()
    with torch.no_grad():
        x, y = x_all[0].to(device), y_all[0].to(device)
        acc = (opt_model(x).argmax(-1) == y).float().mean().item()
    print(f"train-batch accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
