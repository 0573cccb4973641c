"""The timm recipe with timm itself (needs torchvision: `make frameworks-timm`): a timm model from
`timm.create_model` (random weights), `--device cuda`, AMP with `torch.autocast("cuda")` and
`torch.amp.GradScaler`, `channels_last`, and `timm.utils.ModelEmaV3`."""
import argparse

import timm
import timm.optim
import timm.utils
import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
ap.add_argument("--steps", type=int, default=6)
args = ap.parse_args()
device = torch.device(args.device)
torch.manual_seed(0)
model = timm.create_model("resnet18", pretrained=False, num_classes=10).to(device).to(memory_format=torch.channels_last)
ema = timm.utils.ModelEmaV3(model, decay=0.99, device=device)
opt = timm.optim.create_optimizer_v2(model, opt="sgd", lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler(device.type)
g = torch.Generator().manual_seed(0)
images = torch.randn(args.steps, 8, 3, 32, 32, generator=g)
targets = torch.randint(0, 10, (args.steps, 8), generator=g)
for step in range(args.steps):
    x = images[step].to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    y = targets[step].to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    ema.update(model, step=step)
    print(f"LOSS step={step} loss={loss.item():.8g} scale={scaler.get_scale():g}", flush=True)
print(f"DONE device={next(model.parameters()).device.type} ema={type(ema).__name__}", flush=True)
