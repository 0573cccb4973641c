"""Reproducible 1-D CNN on synthetic signals: a Kaggle-style `seed_everything`, cudnn
flags, and the explicit-CUDA habits of older training code.

`torch.backends.cudnn.deterministic = True` / `benchmark = False`,
`torch.cuda.manual_seed(_all)`, `model.cuda()` and `x.cuda(non_blocking=True)` inside
`if use_cuda:` branches, buffers made with `torch.zeros(..., device="cuda")` there,
`next(model.parameters()).is_cuda` checks, `torch.cuda.empty_cache()` after each epoch,
ReduceLROnPlateau, and `torch.inference_mode()` evaluation.
"""
import argparse
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def seed_everything(seed=42):
    random.seed(seed)
    os.environ['PYTHONHASHSEED'] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


class SignalCNN(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, kernel_size=7, padding=3)
        self.bn1 = nn.BatchNorm1d(8)
        self.conv2 = nn.Conv1d(8, 16, kernel_size=5, padding=2)
        self.bn2 = nn.BatchNorm1d(16)
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(16, n_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = x.mean(-1)
        return self.fc(x)


def make_signals(n, rng):
    t = np.linspace(0, 1, 64)
    labels = rng.randint(0, 3, size=n)
    freqs = np.array([3.0, 7.0, 13.0])[labels]
    x = np.sin(2 * np.pi * freqs[:, None] * t[None, :] + rng.uniform(0, 6.28, size=(n, 1)))
    x = x + 1.5 * rng.randn(n, 64)
    return torch.tensor(x, dtype=torch.float32).unsqueeze(1), torch.tensor(labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=4)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--lr', type=float, default=1e-2)
    parser.add_argument('--seed', type=int, default=2024)
    parser.add_argument('--no-cuda', action='store_true', default=False)
    args = parser.parse_args()

    seed_everything(args.seed)
    use_cuda = not args.no_cuda and torch.cuda.is_available()

    rng = np.random.RandomState(args.seed)
    x_train, y_train = make_signals(384, rng)
    x_val, y_val = make_signals(128, rng)
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=64)

    model = SignalCNN()
    if use_cuda:
        model.cuda()
    print('model on GPU' if next(model.parameters()).is_cuda else 'model on CPU')

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=0)

    # running confusion matrix kept next to the model
    if use_cuda:
        confusion = torch.zeros(3, 3, dtype=torch.long, device="cuda")
    else:
        confusion = torch.zeros(3, 3, dtype=torch.long)

    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for i, (x, y) in enumerate(train_loader):
            if use_cuda:
                x = x.cuda(non_blocking=True)
                y = y.cuda(non_blocking=True)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.item()
        train_loss = running / len(train_loader)

        model.eval()
        confusion.zero_()
        val_loss = 0.0
        with torch.inference_mode():
            for x, y in val_loader:
                if next(model.parameters()).is_cuda:
                    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                out = model(x)
                val_loss += F.cross_entropy(out, y, reduction='sum').item()
                pred = out.argmax(1)
                confusion.index_put_((y, pred), torch.ones_like(y), accumulate=True)
        val_loss /= len(val_loader.dataset)
        scheduler.step(val_loss)
        acc = confusion.diag().sum().item() / confusion.sum().item()
        print(f"epoch {epoch + 1}: train_loss {train_loss:.6f} val_loss {val_loss:.6f} "
              f"val_acc {acc:.4f} lr {optimizer.param_groups[0]['lr']:.4g}")
        if use_cuda:
            torch.cuda.empty_cache()
    print("confusion matrix:\n", confusion.cpu().numpy())


if __name__ == '__main__':
    main()
