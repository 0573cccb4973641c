"""A timm train.py-style recipe without timm (timm needs torchvision): `--device cuda` (timm's
default), AMP with `torch.autocast("cuda", dtype=torch.float16)` and `torch.amp.GradScaler`,
`channels_last` model and inputs, an EMA of the weights in the style of `timm.utils.ModelEmaV3`
(decay warm-up, `torch._foreach_lerp_`), and an evaluation of the EMA model."""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelEma(nn.Module):
    """EMA of a model's weights, as timm.utils.ModelEmaV3 keeps it (buffers copied)."""

    def __init__(self, model, decay=0.99, warmup_power=0.75):
        super().__init__()
        self.module = copy.deepcopy(model).eval()
        self.decay, self.warmup_power = decay, warmup_power
        for p in self.module.parameters():
            p.requires_grad_(False)

    def get_decay(self, step):
        return min(self.decay, 1 - (1 + step) ** -self.warmup_power)

    @torch.no_grad()
    def update(self, model, step):
        d = self.get_decay(step)
        ema = list(self.module.parameters())
        torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], weight=1 - d)
        for b_ema, b in zip(self.module.buffers(), model.buffers()):
            b_ema.copy_(b)


def net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
ap.add_argument("--steps", type=int, default=8)
args = ap.parse_args()
device = torch.device(args.device)
torch.manual_seed(0)
model = net().to(device).to(memory_format=torch.channels_last)
ema = ModelEma(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler(device.type)
g = torch.Generator().manual_seed(0)
images = torch.randn(args.steps, 16, 3, 16, 16, generator=g)
targets = torch.randint(0, 10, (args.steps, 16), generator=g)
for step in range(args.steps):
    x = images[step].to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    y = targets[step].to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    ema.update(model, step)
    print(f"LOSS step={step} loss={loss.item():.8g} scale={scaler.get_scale():g}", flush=True)
with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16):
    ema_loss = F.cross_entropy(ema.module(images[0].to(device).contiguous(memory_format=torch.channels_last)),
                               targets[0].to(device))
print(f"EMA loss={ema_loss.item():.8g}", flush=True)
