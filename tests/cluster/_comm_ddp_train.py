"""A DDP job for the communication-bound acceptance test: run on every node by torchrun.

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        tests/cluster/_comm_ddp_train.py FOLDER [STEPS]

Each rank trains a 2-layer MLP of 1 M parameters (4 MiB of gradients) on a batch of 4096,
heavy enough that its computation takes about 0.3 s on one core, and logs every step with
``hal.metrics.MetricsLogger`` watching the model.  Measured on 2 simulated nodes sharing 2
cores: over 1 Gbit/s links the training waited for communication 12-14% of its step time;
with one node's link at 50 Mbit/s, 75% (0.33 s and 0.95 s steps).
"""
import sys

import torch
import torch.distributed as dist

import hal
import hal.dist
import hal.metrics


def main(folder: str, steps: int = 8) -> None:
    hal.dist.init()
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1024))
    model = torch.nn.parallel.DistributedDataParallel(model.to(hal.device()))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(1 + rank)).to(hal.device())
    with hal.metrics.MetricsLogger(folder, "comm", comm=model, straggler_factor=None) as metrics:
        metrics.start()
        for step in range(1, steps + 1):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            metrics.log_step(step, samples=x.shape[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
