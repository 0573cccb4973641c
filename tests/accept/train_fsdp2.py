"""FSDP2 as its tutorial writes it, CUDA-first: torchrun, init_process_group("nccl"), fully_shard on each
block then on the root, AdamW, a DistributedSampler.  `torchrun --nproc-per-node 2 train_fsdp2.py`."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl")
rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(3)], nn.Linear(32, 1)).cuda()
for block in model[:3]:
    fully_shard(block)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(512, 32, generator=g), torch.randn(512, 1, generator=g))
sampler = DistributedSampler(data, shuffle=True, seed=0)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, batch_size=16, sampler=sampler):
        loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"epoch {epoch} loss {loss.item():.4f}")
dist.destroy_process_group()
