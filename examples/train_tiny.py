"""A tiny deterministic training run that resumes where it stopped.

    python examples/train_tiny.py --out runs/tiny            # trains, or resumes if a checkpoint exists
    python examples/train_tiny.py --out runs/tiny --steps 400  # continue further
    hal metrics summary runs/tiny/metrics/tiny.jsonl          # where throughput dropped

The same script runs on whatever device hal selects (HAL_BACKEND=cpu forces the CPU).
Kill it at any moment (even with SIGKILL, even mid-save) and run it again: it resumes
from the newest complete checkpoint, and on the CPU the final weights and the loss curve
are bitwise those of an uninterrupted run (model, AdamW, LR schedule, data position and
dropout RNG are all restored).
"""
import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
from torch import nn

import hal
import hal.checkpoint
import hal.metrics

DATASET, BATCH, FEATURES = 512, 32, 16


def make_data(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(DATASET, 1, generator=g)
    return x, y


def batch_indices(seed: int, epoch: int, i: int):
    """Batch ``i`` of ``epoch``: a permutation fixed by (seed, epoch), so a position resumes exactly."""
    perm = torch.randperm(DATASET, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    return perm[i * BATCH:(i + 1) * BATCH]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/tiny", help="checkpoints go to OUT/ckpt, metrics to OUT/metrics")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--keep-last", type=int, default=3)
    p.add_argument("--sync-save", action="store_true", help="save synchronously (default: async)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--throttle", type=float, default=0.0, help="sleep seconds per step (to watch it)")
    p.add_argument("--amp", choices=("auto", "on", "off"), default="auto",
                   help="autocast: auto = on for accelerators, off on the CPU (exact float32 there)")
    args = p.parse_args(argv)

    out = Path(args.out)
    dev = hal.device()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 1)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, milestones=[20], schedulers=[
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=20),
        torch.optim.lr_scheduler.StepLR(opt, step_size=40, gamma=0.5)])
    x_all, y_all = make_data(args.seed)
    x_all, y_all = x_all.to(dev), y_all.to(dev)
    use_amp = args.amp == "on" or (args.amp == "auto" and dev.type != "cpu")

    ck = hal.checkpoint.resume(out / "ckpt", model=model, optimizer=opt, scheduler=sched)
    step = ck.step if ck else 0
    epoch, pos = (ck.extra["epoch"], ck.extra["batch_in_epoch"]) if ck else (0, 0)
    print(f"train_tiny: device {dev}, {'resumed from step ' + str(step) if ck else 'fresh start'}", flush=True)

    saver = hal.checkpoint.Checkpointer(out / "ckpt", keep_last=args.keep_last, async_save=not args.sync_save)
    metrics = hal.metrics.MetricsLogger(out / "metrics", run="tiny")
    metrics.start()
    loss_fn = nn.MSELoss()
    while step < args.steps:
        idx = batch_indices(args.seed, epoch, pos)
        model.train()
        with hal.autocast() if use_amp else contextlib.nullcontext():
            loss = loss_fn(model(x_all[idx]).float(), y_all[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        pos += 1
        if pos * BATCH >= DATASET:
            epoch, pos = epoch + 1, 0
        metrics.log_step(step, samples=len(idx), loss=loss.item(), lr=sched.get_last_lr()[0])
        if step % args.save_every == 0 or step == args.steps:
            saver.save(step, model=model, optimizer=opt, scheduler=sched,
                       extra={"epoch": epoch, "batch_in_epoch": pos})
        if args.throttle:
            time.sleep(args.throttle)
    saver.close()
    metrics.close()
    from safetensors.torch import save as st_save
    from hal.util.io import atomic_write
    atomic_write(out / "final.safetensors",
                 st_save({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}))
    print(f"train_tiny: done at step {step}, last loss {loss.item():.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
