"""Conv/BatchNorm/MaxPool digit classifier with a reproducible multi-worker input pipeline.

The DataLoader follows the PyTorch reproducibility notes: `num_workers`, `pin_memory`,
`persistent_workers`, a `worker_init_fn` that seeds numpy/random in every worker, and an
explicit `generator=` for the shuffle order. Augmentation (random shifts) runs in the
workers with numpy, so the batches depend only on the seed.
"""
import argparse
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def seed_worker(worker_id):
    worker_seed = torch.initial_seed() % 2 ** 32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


class ShiftedDigits(Dataset):
    """Synthetic 1x28x28 digits; training samples are shifted by up to 2 pixels."""

    def __init__(self, n, train=True, seed=0):
        rng = np.random.RandomState(seed)
        self.templates = rng.rand(10, 28, 28).astype(np.float32)
        self.labels = rng.randint(0, 10, size=n)
        self.noise = (0.3 * rng.randn(n, 28, 28)).astype(np.float32)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        label = int(self.labels[idx])
        img = self.templates[label] + self.noise[idx]
        if self.train:
            dx, dy = np.random.randint(-2, 3, size=2)
            img = np.roll(img, (int(dx), int(dy)), axis=(0, 1))
        img = (img - 0.5) / 0.5
        return torch.from_numpy(np.ascontiguousarray(img)).unsqueeze(0), label


class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(16 * 7 * 7, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1)
        return self.classifier(x)


def main():
    parser = argparse.ArgumentParser(description="ConvNet + BatchNorm with a seeded DataLoader")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-interval", type=int, default=2)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    g = torch.Generator()
    g.manual_seed(args.seed)

    train_set = ShiftedDigits(512, train=True, seed=1)
    val_set = ShiftedDigits(256, train=False, seed=2)
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=True,
        persistent_workers=args.workers > 0,
        worker_init_fn=seed_worker,
        generator=g,
        drop_last=True,
    )
    val_loader = DataLoader(val_set, batch_size=128, shuffle=False,
                            num_workers=args.workers, pin_memory=True)

    model = ConvNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(1, args.epochs + 1):
        model.train()
        t0 = time.time()
        for batch_idx, (images, labels) in enumerate(train_loader):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            outputs = model(images)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * len(images), len(train_loader.dataset),
                    100.0 * batch_idx / len(train_loader), loss.item()))

        model.eval()
        val_loss, correct = 0.0, 0
        with torch.inference_mode():
            for images, labels in val_loader:
                images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
                outputs = model(images)
                val_loss += F.cross_entropy(outputs, labels, reduction="sum").item()
                correct += (outputs.argmax(1) == labels).sum().item()
        val_loss /= len(val_set)
        print("Epoch {} done in {:.1f}s - val loss: {:.6f}, val acc: {:.2f}%".format(
            epoch, time.time() - t0, val_loss, 100.0 * correct / len(val_set)))


if __name__ == "__main__":
    main()
