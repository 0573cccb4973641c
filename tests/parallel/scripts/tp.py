"""Tensor parallel on CUDA (torchrun), alone or inside FSDP2 on a 2-D mesh ("dp", "tp").

  torchrun --nproc-per-node 2 tp.py --out out                                 # ColwiseParallel / RowwiseParallel
  torchrun --nproc-per-node 2 tp.py --out out --sequence-parallel --loss-parallel
  torchrun --nproc-per-node 4 tp.py --out out --dp 2 --sequence-parallel      # TP inside, FSDP2 across
  python tp.py --out ref --reference                                          # one process, whole batch
"""
import contextlib
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import loss_parallel

import tiny_model as tm
from parallelize import apply_tp

parser = tm.arguments(__doc__.splitlines()[0])
parser.add_argument("--dp", type=int, default=1, help="data-parallel degree (FSDP2 over the 'dp' mesh dimension)")
parser.add_argument("--sequence-parallel", action="store_true")
parser.add_argument("--loss-parallel", action="store_true")
args = parser.parse_args()

if args.reference:
    model, losses = tm.train_reference("cuda")
    tm.record(args.out, losses, model)
    raise SystemExit(0)

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))  # eager init, as torchtitan does
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cuda", (args.dp, world // args.dp), mesh_dim_names=("dp", "tp"))

model = tm.Transformer().cuda()
apply_tp(model, mesh["tp"], args.sequence_parallel, args.loss_parallel)
if args.dp > 1:
    for block in model.layers.values():
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
tm.init_weights(model)

dp_rank = mesh["dp"].get_local_rank()
losses = tm.train(model, "cuda", part=lambda t: t.chunk(args.dp)[dp_rank], group=mesh["dp"].get_group(),
                  loss_context=loss_parallel if args.loss_parallel else contextlib.nullcontext)
tm.record(args.out, losses, model, rank, world)
dist.destroy_process_group()
