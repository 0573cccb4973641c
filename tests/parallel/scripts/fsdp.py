"""FSDP2 on CUDA, launched with torchrun: ``fully_shard`` per block and at the root.

  torchrun --nproc-per-node 2 fsdp.py --out out                      # FSDP2
  torchrun --nproc-per-node 2 fsdp.py --out out --meta               # meta init, to_empty, init_weights
  torchrun --nproc-per-node 2 fsdp.py --out out --bf16               # MixedPrecisionPolicy(param_dtype=bf16)
  torchrun --nproc-per-node 2 fsdp.py --out out --no-reshard         # reshard_after_forward=False
  torchrun --nproc-per-node 2 fsdp.py --out out --offload            # CPUOffloadPolicy
  torchrun --nproc-per-node 2 fsdp.py --out out --ac --compile       # checkpoint_wrapper, torch.compile
  torchrun --nproc-per-node 4 fsdp.py --out out --hsdp               # mesh ("replicate", "shard") 2 x 2
  python fsdp.py --out ref --reference                               # one process, whole batch
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

import tiny_model as tm

parser = tm.arguments(__doc__.splitlines()[0])
parser.add_argument("--meta", action="store_true")
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--no-reshard", action="store_true")
parser.add_argument("--offload", action="store_true")
parser.add_argument("--ac", action="store_true")
parser.add_argument("--compile", action="store_true")
parser.add_argument("--hsdp", action="store_true")
args = parser.parse_args()

if args.reference:
    model, losses = tm.train_reference("cuda")
    tm.record(args.out, losses, model)
    raise SystemExit(0)

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
if args.hsdp:
    mesh = init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("replicate", "shard"))
else:
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("dp",))

if args.meta:
    with torch.device("meta"):
        model = tm.Transformer()
else:
    model = tm.Transformer().cuda()
if args.ac:
    for name, block in model.layers.named_children():
        model.layers.register_module(name, checkpoint_wrapper(block))
kwargs = {"mesh": mesh, "reshard_after_forward": not args.no_reshard}
if args.bf16:
    kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
if args.offload:
    kwargs["offload_policy"] = CPUOffloadPolicy()
for block in model.layers.values():
    fully_shard(block, **kwargs)
fully_shard(model, **kwargs)
if args.meta:
    model.to_empty(device="cpu" if args.offload else "cuda")
tm.init_weights(model)
if args.compile:
    model = torch.compile(model)

losses = tm.train(model, "cuda", part=lambda t: t.chunk(world)[rank], group=dist.group.WORLD)
tm.record(args.out, losses, model, rank, world)
dist.destroy_process_group()
