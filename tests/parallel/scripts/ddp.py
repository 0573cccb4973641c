"""DistributedDataParallel on CUDA (torchrun): the baseline the sharded cases are measured against.

  torchrun --nproc-per-node 2 ddp.py --out out
  python ddp.py --out ref --reference               # one process, whole batch
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tiny_model as tm

args = tm.arguments(__doc__.splitlines()[0]).parse_args()
if args.reference:
    model, losses = tm.train_reference("cuda")
    tm.record(args.out, losses, model)
    raise SystemExit(0)

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
model = tm.Transformer().cuda()
tm.init_weights(model)
ddp = DDP(model, device_ids=[local_rank])
losses = tm.train(ddp, "cuda", part=lambda t: t.chunk(world)[rank], group=dist.group.WORLD)
tm.record(args.out, losses, model, rank, world)
dist.destroy_process_group()
