"""Device-agnostic training through `torch.accelerator` (the API PyTorch now recommends).

`device = torch.accelerator.current_accelerator() if torch.accelerator.is_available()
else torch.device("cpu")`, a `--no-accel` flag as in the current examples, data arriving
as float64 numpy arrays moved with `.to(device, dtype=torch.float32)`,
`torch.accelerator.device_count()` / `synchronize()`, StepLR, evaluation with
`torch.no_grad()`.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR


class MLP(nn.Module):
    def __init__(self, d_in=20, hidden=64, n_classes=5):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def batches(x, y, batch_size, rng):
    order = rng.permutation(len(x))
    for start in range(0, len(x), batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]


def main():
    parser = argparse.ArgumentParser(description="torch.accelerator MLP example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--no-accel", action="store_true", help="disables accelerator")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=3)
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    if not use_accel:
        device = torch.device("cpu")
    print(f"Using device: {device} (accelerators visible: "
          f"{torch.accelerator.device_count() if torch.accelerator.is_available() else 0})")

    rng = np.random.RandomState(args.seed)
    centers = rng.randn(5, 20) * 1.5
    y_train = rng.randint(0, 5, size=640)
    x_train = centers[y_train] + rng.randn(640, 20)          # float64, as numpy gives it
    y_test = rng.randint(0, 5, size=256)
    x_test = centers[y_test] + rng.randn(256, 20)

    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    n_batches = (len(x_train) + args.batch_size - 1) // args.batch_size
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch_idx, (xb, yb) in enumerate(batches(x_train, y_train, args.batch_size, rng)):
            data = torch.from_numpy(xb).to(device, dtype=torch.float32)
            target = torch.from_numpy(yb).to(device, dtype=torch.long)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.8f}".format(
                    epoch, batch_idx * len(data), len(x_train), 100.0 * batch_idx / n_batches, loss.item()))
        scheduler.step()

        model.eval()
        with torch.no_grad():
            data = torch.from_numpy(x_test).to(device, dtype=torch.float32)
            target = torch.from_numpy(y_test).to(device)
            output = model(data)
            test_loss = F.nll_loss(output, target, reduction="sum").item() / len(x_test)
            correct = (output.argmax(1) == target).sum().item()
        if use_accel:
            torch.accelerator.synchronize()
        print("\nTest set: Average loss: {:.8f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            test_loss, correct, len(x_test), 100.0 * correct / len(x_test)))


if __name__ == "__main__":
    main()
