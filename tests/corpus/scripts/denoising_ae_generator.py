"""Denoising / masked auto-encoder whose corruption is drawn from a device generator.

`g = torch.Generator(device="cuda")` seeded once (CPU generator without CUDA), masks
from `torch.rand(..., generator=g, device=...)`, Gaussian noise from
`torch.randn(..., generator=g, device=device)`, `torch.cuda.manual_seed_all`, a
`tensor.is_cuda` branch, and evaluation under `torch.inference_mode()`.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class DenoisingAE(nn.Module):
    def __init__(self, d=64, hidden=32, code=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, d))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def corrupt(x, g, mask_prob, sigma):
    mask = torch.rand(x.shape, generator=g, device=x.device) < mask_prob
    noise = torch.randn(x.shape, generator=g, device=x.device) * sigma
    return x.masked_fill(mask, 0.0) + noise


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mask-prob", type=float, default=0.25)
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    torch.manual_seed(args.seed)
    if use_cuda:
        torch.cuda.manual_seed_all(args.seed)
        g = torch.Generator(device="cuda")
    else:
        g = torch.Generator()
    g.manual_seed(args.seed)

    # low-rank signals: the auto-encoder can learn to undo the corruption
    basis = torch.randn(8, 64)
    clean = (torch.randn(1024, 8) @ basis) / 8 ** 0.5
    clean = clean.to(device)
    if clean.is_cuda:
        print("training on", torch.cuda.get_device_name(clean.device))
    else:
        print("training on the CPU")

    model = DenoisingAE().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    n_batches = clean.size(0) // args.batch_size
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(clean.size(0), generator=g, device=device)
        total = 0.0
        for b in range(n_batches):
            x = clean[perm[b * args.batch_size:(b + 1) * args.batch_size]]
            x_noisy = corrupt(x, g, args.mask_prob, args.sigma)
            loss = F.mse_loss(model(x_noisy), x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        with torch.inference_mode():
            x_val = clean[:256]
            val = F.mse_loss(model(corrupt(x_val, g, args.mask_prob, args.sigma)), x_val)
        print(f"epoch {epoch} train loss {total / n_batches:.6f} val loss {val.item():.6f}")


if __name__ == "__main__":
    main()
