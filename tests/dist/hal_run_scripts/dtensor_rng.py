"""Random ops on DTensors, written for CUDA at 2 ranks (torchrun): DTensor's RNG tracker reads and moves
the device generator's offset (its 16-byte (seed, offset) state) so that each rank draws its own shard and
every rank draws a replicated tensor alike; FSDP2's meta-device init (to_empty, then reset_parameters)
and HSDP's replicated parameters draw through it too.  Usage: dtensor_rng.py OUT SEED; each rank writes
OUT(.rank) as JSON."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

out_path, seed = sys.argv[1], int(sys.argv[2])
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(seed)
mesh = init_device_mesh("cuda", (2,))


def draw():
    """The issue's repro and its replicated twin (dropout on a replicated activation, as under TP)."""
    sharded = torch.nn.init.normal_(distribute_tensor(torch.empty(8, 8, device="cuda"), mesh, [Shard(0)]))
    replicated = torch.nn.init.uniform_(distribute_tensor(torch.empty(4, 4, device="cuda"), mesh, [Replicate()]))
    ones = distribute_tensor(torch.ones(64, device="cuda"), mesh, [Replicate()])
    dropped = torch.nn.functional.dropout(ones, 0.5)
    return {"full": sharded.full_tensor().cpu().tolist(), "local": sharded.to_local().cpu().tolist(),
            "replicated_local": replicated.to_local().cpu().tolist(),
            "dropout_local": dropped.to_local().cpu().tolist()}


seen = {"first": draw()}
torch.manual_seed(seed)
seen["again"] = draw()


def meta_model():
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def init(model, fsdp_mesh):
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=fsdp_mesh)
    fully_shard(model, mesh=fsdp_mesh)
    model.to_empty(device="cuda")
    torch.manual_seed(seed)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            layer.reset_parameters()
    return model


fsdp = init(meta_model(), mesh)
seen["fsdp_local"] = {k: v.to_local().cpu().tolist() for k, v in fsdp.state_dict().items()}
seen["fsdp_full"] = {k: v.full_tensor().cpu().tolist() for k, v in fsdp.state_dict().items()}
# HSDP over (replicate 2, shard 1): every rank holds the whole parameter, which must be the same everywhere
hsdp = init(meta_model(), init_device_mesh("cuda", (2, 1), mesh_dim_names=("replicate", "shard")))
seen["hsdp_local"] = {k: v.to_local().cpu().tolist() for k, v in hsdp.state_dict().items()}
dist.destroy_process_group()
with open(out_path if rank == 0 else f"{out_path}.{rank}", "w") as f:
    json.dump(seen, f)
