"""The parts of c10d a framework touches, written for CUDA at 2 ranks (torchrun): eager init
with `device_id` (Lightning 2.6), the group's name, `new_group`, `init_device_mesh("cuda")`,
DTensor shard / redistribute, FSDP2 `fully_shard` steps against the same steps in one
process, DCP save / load of the sharded state, and ReduceOp.PREMUL_SUM in every collective that
takes an op (premul_sum.py, FSDP2's set_gradient_divide_factor included).  Each rank writes what
it saw to OUT(.rank) as JSON."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import premul_sum

out_path, ckpt = sys.argv[1], sys.argv[2]
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
seen = {"group_name": dist.group.WORLD.group_name}
sub = dist.new_group([0, 1])
seen["new_group_name"] = sub.group_name
mesh = init_device_mesh("cuda", (2,))
seen["mesh"] = [mesh.device_type, mesh.get_group().group_name]
d = distribute_tensor(torch.arange(8.0, device="cuda"), mesh, [Shard(0)])
seen["dtensor"] = [d.to_local().tolist(), d.redistribute(mesh, [Replicate()]).to_local().tolist()]

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()
ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
seen["fsdp"], seen["single"] = [], []
for _ in range(3):
    x, y = torch.randn(4, 16, generator=g), torch.randn(4, 4, generator=g)
    loss = torch.nn.functional.mse_loss(model(x.chunk(2)[rank].cuda()), y.chunk(2)[rank].cuda())
    loss.backward()
    opt.step()
    opt.zero_grad()
    total = loss.detach().clone()
    dist.all_reduce(total)
    seen["fsdp"].append(total.item() / 2)
    ref_loss = torch.nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    ref_opt.step()
    ref_opt.zero_grad()
    seen["single"].append(ref_loss.item())
dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)
state = {"model": model.state_dict()}
for v in state["model"].values():
    v.to_local().zero_()
dcp.load(state, checkpoint_id=ckpt)
seen["dcp_restored"] = all(torch.allclose(a.full_tensor().cpu(), b.detach())
                           for a, b in zip(state["model"].values(), ref.state_dict().values()))
seen["local_device"] = next(iter(state["model"].values())).to_local().device.type
seen["premul_sum"] = premul_sum.collect(rank, dist.get_world_size())
dist.destroy_process_group()
with open(out_path if rank == 0 else f"{out_path}.{rank}", "w") as f:
    json.dump(seen, f)
