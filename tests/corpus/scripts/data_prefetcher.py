"""Overlapping host-to-device copies with compute: the apex/NVIDIA-style `data_prefetcher`.

uint8 images come from a DataLoader (`num_workers=2, pin_memory=True`, a `fast_collate`);
on CUDA a side `torch.cuda.Stream()` copies the next batch with `.cuda(non_blocking=True)`
and normalises it there, `torch.cuda.current_stream().wait_stream(stream)` and
`record_stream` hand it over. Without CUDA the loop falls back to a plain iterator that
normalises with `.to(device, dtype=torch.float32)`.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class UInt8Images(Dataset):
    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 4, size=n).astype(np.int64)
        base = np.array([[40, 80, 120], [200, 60, 60], [60, 200, 60], [60, 60, 200]], dtype=np.float64)
        imgs = base[self.labels][:, :, None, None] + rng.normal(0, 120, size=(n, 3, 12, 12))
        self.images = np.clip(imgs, 0, 255).astype(np.uint8)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])


def fast_collate(batch):
    imgs = [img[0] for img in batch]
    targets = torch.tensor([target[1] for target in batch], dtype=torch.int64)
    tensor = torch.zeros((len(imgs), 3, 12, 12), dtype=torch.uint8)
    for i, img in enumerate(imgs):
        tensor[i] += torch.from_numpy(img)
    return tensor, targets


class data_prefetcher():
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).cuda().view(1, 3, 1, 1)
        self.std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).cuda().view(1, 3, 1, 1)
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        with torch.cuda.stream(self.stream):
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float()
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        input = self.next_input
        target = self.next_target
        if input is not None:
            input.record_stream(torch.cuda.current_stream())
        if target is not None:
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return input, target


def cpu_batches(loader, device):
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).view(1, 3, 1, 1)
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).view(1, 3, 1, 1)
    for input, target in loader:
        input = input.to(device, dtype=torch.float32).sub_(mean.to(device)).div_(std.to(device))
        yield input, target.to(device)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, stride=2)
        self.fc = nn.Linear(16 * 6 * 6, 4)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--print-freq", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    train_loader = DataLoader(UInt8Images(384, 0), batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers, pin_memory=True, collate_fn=fast_collate,
                              generator=torch.Generator().manual_seed(args.seed))

    model = Net().to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)

    for epoch in range(args.epochs):
        model.train()
        if use_cuda:
            prefetcher = data_prefetcher(train_loader)
            input, target = prefetcher.next()
        else:
            batches = cpu_batches(train_loader, device)
            input, target = next(batches, (None, None))
        i = 0
        while input is not None:
            output = model(input)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i % args.print_freq == 0:
                if use_cuda:
                    torch.cuda.synchronize()
                print("Epoch: [{0}][{1}/{2}]\tLoss {3:.6f}".format(epoch, i, len(train_loader), loss.item()))
            i += 1
            if use_cuda:
                input, target = prefetcher.next()
            else:
                input, target = next(batches, (None, None))
        print("epoch {} final loss {:.6f}".format(epoch, loss.item()))


if __name__ == "__main__":
    main()
