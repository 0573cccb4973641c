"""A CUDA script's device-type strings, pinned factories and DataLoader(pin_memory=True) (issue 20,
items 3-4): writes what it saw to argv[1] (rank r > 0: argv[1].r)."""
import json
import os
import sys

import safetensors.torch as st
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

rank = int(os.environ.get("RANK", "0"))
module = torch.get_device_module("cuda")  # as accelerate 1.16 sets its device
module.set_device(torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))))
out = {"device_module": [module.__name__, torch.ones(1, device="cuda").device.type, len(module.get_rng_state_all())],
       "autocast_available": torch.amp.is_autocast_available("cuda")}
x = torch.empty(4, pin_memory=True)
y = torch.zeros(2, 3, pin_memory=True, device="cpu")
out["pinned_factories"] = [list(x.shape), y.sum().item()]
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4.0)), batch_size=2, pin_memory=True)
batch = next(iter(loader))[0]
out["dataloader_pinned"] = [batch.tolist(), batch.is_pinned()]
path = os.path.join(os.path.dirname(sys.argv[1]), f"w{rank}.safetensors")
st.save_file({"w": torch.arange(3.0)}, path)
w = st.load_file(path, device="cuda:0")["w"]
out["safetensors"] = [w.device.type, w.tolist()]
if "WORLD_SIZE" in os.environ:
    mesh = init_device_mesh("cuda", (2,), mesh_dim_names=("dp",))
    t = torch.ones(2, device="cuda") * (rank + 1)
    dist.all_reduce(t, group=mesh.get_group("dp"))
    out["mesh"] = [mesh.device_type, t.tolist()]
    dist.destroy_process_group()
with open(sys.argv[1] + (f".{rank}" if rank else ""), "w") as f:
    json.dump(out, f)
