"""An image-classification training loop in the timm `train.py` style.

`amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)`, a
NativeScaler-like wrapper around `torch.amp.GradScaler("cuda")`, AverageMeter logging,
label-smoothing cross-entropy, AdamW with `foreach=True`, cosine LR per step,
cudnn.benchmark, and a validate() that uses `torch.autocast("cuda", dtype=torch.float16)`.
AMP is on only where CUDA is (`--amp` and device.type == "cuda").
"""
import argparse
import math
import time
from contextlib import suppress
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class LabelSmoothingCrossEntropy(nn.Module):
    """NLL loss with label smoothing."""

    def __init__(self, smoothing=0.1):
        super(LabelSmoothingCrossEntropy, self).__init__()
        assert smoothing < 1.0
        self.smoothing = smoothing
        self.confidence = 1. - smoothing

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logprobs = F.log_softmax(x, dim=-1)
        nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1))
        nll_loss = nll_loss.squeeze(1)
        smooth_loss = -logprobs.mean(dim=-1)
        loss = self.confidence * nll_loss + self.smoothing * smooth_loss
        return loss.mean()


class NativeScaler:
    state_dict_key = "amp_scaler"

    def __init__(self, device="cuda"):
        self._scaler = torch.amp.GradScaler(device)

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, create_graph=False):
        self._scaler.scale(loss).backward(create_graph=create_graph)
        if clip_grad is not None:
            assert parameters is not None
            self._scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()

    def load_state_dict(self, state_dict):
        self._scaler.load_state_dict(state_dict)


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=10, drop_rate=0.0):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.stage = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32),
                                   nn.ReLU(inplace=True))
        self.drop_rate = drop_rate
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.stage(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        if self.drop_rate > 0.:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return self.head(x)


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, device, lr_schedule,
                    amp_autocast=suppress, loss_scaler=None):
    batch_time_m = AverageMeter()
    losses_m = AverageMeter()
    model.train()
    end = time.time()
    last_idx = len(loader) - 1
    num_updates = epoch * len(loader)
    for batch_idx, (input, target) in enumerate(loader):
        last_batch = batch_idx == last_idx
        input, target = input.to(device), target.to(device)
        if args.channels_last:
            input = input.contiguous(memory_format=torch.channels_last)

        with amp_autocast():
            output = model(input)
            loss = loss_fn(output, target)

        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=args.clip_grad, parameters=model.parameters())
        else:
            loss.backward()
            if args.clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            optimizer.step()

        if device.type == "cuda":
            torch.cuda.synchronize()
        num_updates += 1
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr_schedule(num_updates)
        losses_m.update(loss.item(), input.size(0))
        batch_time_m.update(time.time() - end)
        if last_batch or batch_idx % args.log_interval == 0:
            lrl = [param_group['lr'] for param_group in optimizer.param_groups]
            lr = sum(lrl) / len(lrl)
            print(
                'Train: {} [{:>4d}/{} ({:>3.0f}%)]  '
                'Loss: {loss.val:#.6g} ({loss.avg:#.4g})  '
                'Time: {batch_time.val:.3f}s  '
                'LR: {lr:.3e}'.format(
                    epoch, batch_idx, len(loader), 100. * batch_idx / last_idx,
                    loss=losses_m, batch_time=batch_time_m, lr=lr))
        end = time.time()
    return losses_m.avg


def validate(model, loader, loss_fn, device, use_amp):
    losses_m = AverageMeter()
    top1_m = AverageMeter()
    model.eval()
    with torch.no_grad():
        for input, target in loader:
            input = input.to(device)
            target = target.to(device)
            with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
                output = model(input)
            loss = loss_fn(output.float(), target)
            acc1 = (output.argmax(-1) == target).float().mean() * 100
            losses_m.update(loss.item(), input.size(0))
            top1_m.update(acc1.item(), input.size(0))
    print('Test: Loss: {loss.avg:>7.6f}  Acc@1: {top1.avg:>7.3f}'.format(loss=losses_m, top1=top1_m))
    return losses_m.avg


def main():
    parser = argparse.ArgumentParser(description='timm-style training')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('-b', '--batch-size', type=int, default=32)
    parser.add_argument('--lr', type=float, default=3e-3)
    parser.add_argument('--weight-decay', type=float, default=0.05)
    parser.add_argument('--smoothing', type=float, default=0.1)
    parser.add_argument('--clip-grad', type=float, default=1.0)
    parser.add_argument('--amp', action='store_true', default=True, help='use AMP where CUDA is available')
    parser.add_argument('--no-amp', dest='amp', action='store_false')
    parser.add_argument('--amp-dtype', default='float16', choices=['float16', 'bfloat16'])
    parser.add_argument('--channels-last', action='store_true', default=False)
    parser.add_argument('--log-interval', type=int, default=3)
    parser.add_argument('--seed', type=int, default=42)
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)

    use_amp = args.amp and device.type == "cuda"
    amp_dtype = torch.bfloat16 if args.amp_dtype == 'bfloat16' else torch.float16
    amp_autocast = suppress
    loss_scaler = None
    if use_amp:
        amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)
        if amp_dtype == torch.float16:
            loss_scaler = NativeScaler(device.type)
        print('Using native Torch AMP. Training in mixed precision.')
    else:
        print('AMP not enabled. Training in float32.')

    model = SmallConvNet(num_classes=10)
    model.to(device=device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, foreach=True)

    g = torch.Generator().manual_seed(0)
    centers = torch.randn(10, 3, 1, 1, generator=g)
    y_train = torch.randint(0, 10, (320,), generator=g)
    x_train = centers[y_train] + torch.randn(320, 3, 12, 12, generator=g)
    y_val = torch.randint(0, 10, (96,), generator=g)
    x_val = centers[y_val] + torch.randn(96, 3, 12, 12, generator=g)
    loader_train = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True, drop_last=True)
    loader_eval = DataLoader(TensorDataset(x_val, y_val), batch_size=args.batch_size * 2)

    total = args.epochs * len(loader_train)
    warmup = 2
    def lr_schedule(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr_schedule(0)

    train_loss_fn = LabelSmoothingCrossEntropy(smoothing=args.smoothing).to(device=device)
    validate_loss_fn = nn.CrossEntropyLoss().to(device=device)

    for epoch in range(args.epochs):
        train_one_epoch(epoch, model, loader_train, optimizer, train_loss_fn, args, device, lr_schedule,
                        amp_autocast=amp_autocast, loss_scaler=loss_scaler)
        validate(model, loader_eval, validate_loss_fn, device, use_amp)


if __name__ == '__main__':
    main()
