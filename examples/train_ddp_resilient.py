"""DDP training that survives its faults: launch it under torchrun with restarts.

    torchrun --nproc-per-node 2 --max-restarts 3 examples/train_ddp_resilient.py --out runs/ddp
    hal run --nproc-per-node 2 --max-restarts 3 examples/train_ddp_resilient.py --out runs/ddp
    HAL_BACKEND=emu hal run --nproc-per-node 2 --max-restarts 3 examples/train_ddp_resilient.py

Written the way public DDP scripts are: "cuda" and NCCL when CUDA is there, else the CPU and
gloo; a DistributedSampler that shuffles, DataLoader workers, SGD with momentum, a LR
schedule, a grad scaler, dropout.  What makes it survive: ``hal.checkpoint.Checkpointer``
with ``every=`` and ``dataloader=`` (a torchdata StatefulDataLoader), ``resume()`` at
start-up, the loop inside ``with saver:``, and a process-group timeout, so that a hung rank
turns into a failed collective and torchrun restarts the group.  A killed, hung or failing
rank costs at most ``--save-every`` steps; the final weights are bitwise those of a run
that never failed.  Details: docs/fault-tolerance.md.
"""
import argparse
import datetime
import os
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset, DistributedSampler

import hal.checkpoint
import hal.metrics

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata 0.11 on torch >= 2.8
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

FEATURES, CLASSES = 32, 4


class Synthetic(Dataset):
    """A fixed classification set: sample ``i`` depends on ``i`` alone (any worker, any order)."""

    def __init__(self, n: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.w = torch.randn(FEATURES, CLASSES, generator=g)
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randn(FEATURES, generator=torch.Generator().manual_seed(self.seed * 100003 + i))
        return x, int((x @ self.w).argmax())


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/ddp", help="checkpoints in OUT/ckpt, metrics in OUT/metrics")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps in all (default 60)")
    p.add_argument("--save-every", type=int, default=5, help="checkpoint interval in steps (default 5)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width of the MLP (default 256)")
    p.add_argument("--samples", type=int, default=320, help="dataset size (default 320: 20 steps/epoch at 2 ranks)")
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    p.add_argument("--timeout", type=float, default=float(os.environ.get("TRAIN_PG_TIMEOUT", 60)),
                   help="process-group timeout in seconds: how long a hung rank can stall the others "
                        "before the group fails and torchrun restarts it (default 60)")
    p.add_argument("--throttle", type=float, default=0.0, help="sleep seconds per step (to watch it)")
    p.add_argument("--raise-at", default="", metavar="RANK:STEP[:ATTEMPT]",
                   help="fault injection for tests: raise on RANK after STEP on that restart attempt "
                        "(default attempt 0); repeatable with commas")
    p.add_argument("--hang-at", default="", metavar="RANK:STEP[:ATTEMPT]",
                   help="fault injection for tests: RANK stops making progress after STEP (sleeps "
                        "forever, as a rank stuck in a dataloader or a driver call does)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    out = Path(args.out)
    (out / "pids").mkdir(parents=True, exist_ok=True)
    (out / "pids" / f"rank{rank}").write_text(f"{os.getpid()} {attempt}\n")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, args.hidden), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(args.hidden, CLASSES)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=15, gamma=0.5)
    scaler = torch.amp.GradScaler("cuda", enabled=use_cuda)
    data = Synthetic(args.samples)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = StatefulDataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                                drop_last=True)
    torch.manual_seed(1234 + rank)  # per-rank dropout streams, as many scripts seed them

    saver = hal.checkpoint.Checkpointer(out / "ckpt", every=args.save_every, model=model, optimizer=opt,
                                        scheduler=sched, scaler=scaler, dataloader=loader, keep_last=3)
    ck = saver.resume()
    step, epoch = (ck.step, ck.epoch or 0) if ck else (0, 0)
    faults = [("raise", *(int(v) for v in f.split(":"))) for f in args.raise_at.split(",") if f]
    faults += [("hang", *(int(v) for v in f.split(":"))) for f in args.hang_at.split(",") if f]
    metrics = hal.metrics.MetricsLogger(out / "metrics", run="train", comm=ddp)  # + communication time
    with saver, metrics:
        while step < args.steps:
            sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                with torch.autocast(device.type, enabled=use_cuda):
                    loss = nn.functional.cross_entropy(ddp(x), y)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                sched.step()
                step += 1
                metrics.log_step(step, samples=len(x), loss=loss.item(), lr=sched.get_last_lr()[0],
                                 epoch=epoch, attempt=attempt)
                saver.step(step)
                for kind, f_rank, f_step, *f_attempt in faults:
                    if (f_rank, f_step, (f_attempt or [0])[0]) != (rank, step, attempt):
                        continue
                    if kind == "raise":
                        raise RuntimeError(f"injected fault: rank {rank} raises after step {step}")
                    while True:  # hang: the other ranks wait in their next collective
                        time.sleep(1)
                if args.throttle:
                    time.sleep(args.throttle)
                if step == args.steps:
                    break
            epoch += 1
    if rank == 0:
        from safetensors.torch import save
        from hal.util.io import atomic_write
        atomic_write(out / "final.safetensors",
                     save({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}))
        print(f"done: {args.steps} steps, final weights in {out / 'final.safetensors'}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
