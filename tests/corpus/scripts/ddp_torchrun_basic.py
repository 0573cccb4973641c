"""DistributedDataParallel launched by torchrun (one process per GPU, gloo on CPU-only hosts).

    torchrun --standalone --nproc-per-node 2 ddp_torchrun_basic.py --epochs 2

`init_process_group("nccl" or "gloo")`, `torch.cuda.set_device(local_rank)`,
`DDP(model, device_ids=[local_rank])`, a DistributedSampler with `set_epoch`, the loss
averaged across ranks with `all_reduce`, a checkpoint saved on rank 0 and loaded on every
rank after `dist.barrier()` with `map_location={"cuda:0": f"cuda:{local_rank}"}`.
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    print(f"Start running basic DDP example on rank {rank} of {world_size} ({backend}).")

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    # every rank builds the same model (same seed), DDP broadcasts rank 0's weights anyway
    model = ToyModel().to(device)
    if device.type == "cuda":
        ddp_model = DDP(model, device_ids=[local_rank])
    else:
        ddp_model = DDP(model)

    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 10, generator=g)
    w = torch.randn(10, 5, generator=g)
    y = x @ w + 0.1 * torch.randn(256, 5, generator=g)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ddp_model.train()
        running = torch.zeros(2, device=device)
        for step, (inputs, labels) in enumerate(loader):
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            outputs = ddp_model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()
            running += torch.stack([loss.detach() * inputs.size(0),
                                    torch.tensor(float(inputs.size(0)), device=device)])
            if step % 4 == 0:
                step_loss = loss.detach().clone()
                dist.all_reduce(step_loss, op=dist.ReduceOp.SUM)
                if rank == 0:
                    print(f"epoch {epoch} step {step} loss {step_loss.item() / world_size:.6f}")
        dist.all_reduce(running, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch} mean loss {(running[0] / running[1]).item():.6f}")

    # checkpoint: save on rank 0, everyone loads after the barrier
    ckpt_dir = os.environ.get("CKPT_DIR", tempfile.gettempdir())
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    checkpoint_path = os.path.join(ckpt_dir, f"ddp_basic_{run_id}.checkpoint")
    if rank == 0:
        # All processes should see same parameters as they all start from same
        # random parameters and gradients are synchronized in backward passes.
        # Therefore, saving it in one process is sufficient.
        torch.save(ddp_model.state_dict(), checkpoint_path)

    # Use a barrier() to make sure that process 1 loads the model after process 0 saves it.
    dist.barrier()
    # configure map_location properly
    map_location = {"cuda:%d" % 0: "cuda:%d" % local_rank}
    ddp_model.load_state_dict(torch.load(checkpoint_path, map_location=map_location, weights_only=True))

    ddp_model.eval()
    with torch.no_grad():
        val_loss = loss_fn(ddp_model(x[:64].to(device)), y[:64].to(device))
    dist.all_reduce(val_loss, op=dist.ReduceOp.SUM)
    val_loss /= world_size
    if rank == 0:
        print(f"eval loss after reload {val_loss.item():.6f}")

    dist.barrier()
    if rank == 0:
        os.remove(checkpoint_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
