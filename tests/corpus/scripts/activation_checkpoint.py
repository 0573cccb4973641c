"""Activation checkpointing in a small pre-norm transformer-style encoder.

Each block runs through `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`
when `--grad-ckpt` is on; the MLP head is an `nn.Sequential` run with
`checkpoint_sequential(..., segments, x, use_reentrant=False)`. AdamW uses `fused=True`.
No dropout, so recomputation is exact.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.ln2(x))
        return x


class Encoder(nn.Module):
    def __init__(self, vocab, dim=32, heads=4, depth=2, n_classes=3, grad_ckpt=True, segments=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.Tanh(),
                                  nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, n_classes))
        self.grad_ckpt = grad_ckpt
        self.segments = segments
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[:, :tokens.size(1)]
        for block in self.blocks:
            if self.grad_ckpt and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        pooled = x.mean(dim=1)
        if self.grad_ckpt and self.training:
            return checkpoint_sequential(self.head, self.segments, pooled, use_reentrant=False)
        return self.head(pooled)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--no-grad-ckpt", dest="grad_ckpt", action="store_false")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    # task: which of three token ranges is most frequent in the sequence
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 30, (384, 16), generator=g)
    labels = torch.stack([(tokens // 10 == k).sum(1) for k in range(3)], 1).argmax(1)

    model = Encoder(30, grad_ckpt=args.grad_ckpt).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)

    steps_per_epoch = tokens.size(0) // args.batch_size
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(tokens.size(0), generator=g)
        epoch_loss = 0.0
        for i in range(steps_per_epoch):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            x, y = tokens[idx].to(device), labels[idx].to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            if i % 4 == 0:
                print(f"epoch {epoch} iter {i:2d} loss {loss.item():.6f}")
        model.eval()
        with torch.no_grad():
            acc = (model(tokens.to(device)).argmax(1) == labels.to(device)).float().mean().item()
        print(f"epoch {epoch} mean loss {epoch_loss / steps_per_epoch:.6f} acc {acc:.4f} "
              f"ppl-ish {math.exp(epoch_loss / steps_per_epoch):.3f}")


if __name__ == "__main__":
    main()
