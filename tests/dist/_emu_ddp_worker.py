"""One rank of the emuccl test: allreduce, then a DDP step compared with the full batch on CPU."""
import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

warnings.simplefilter("ignore")
os.environ["HAL_BACKEND"] = "emu"
import hal  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = hal.device()
dist.init_process_group("cpu:gloo,emu:emuccl", rank=rank, world_size=world)
t = torch.full((4,), float(rank + 1), device=dev)
dist.all_reduce(t)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
x_all = torch.randn(4 * world, 4)
ref = model(x_all).pow(2).mean()
ref.backward()
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).to(dev))
ddp.module.load_state_dict({k: v.to(dev) for k, v in model.state_dict().items()})
ddp(x_all[4 * rank: 4 * (rank + 1)].to(dev)).pow(2).mean().backward()
# SyncBatchNorm (torch's device path: batch_norm_stats / gather / elemt and their backward)
# against BatchNorm over the full batch on the CPU
torch.manual_seed(1)
bn = torch.nn.BatchNorm2d(3)
xb = torch.randn(4 * world, 3, 5, 5, requires_grad=True)
ref_y = bn(xb)
ref_y.pow(3).sum().backward()
sbn = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(torch.nn.BatchNorm2d(3))).to(dev)
mine = xb.detach()[4 * rank: 4 * (rank + 1)].to(dev).requires_grad_()
y = sbn(mine)
y.pow(3).sum().backward()
dist.all_reduce(sbn[0].weight.grad)  # parameter gradients are per rank until summed, as DDP does
out = {"rank": rank, "allreduce": t.cpu().tolist(), "group_backend": dist.get_backend(),
       "ddp_grad": ddp.module.weight.grad.cpu().tolist(), "ref_grad": model.weight.grad.tolist(),
       "syncbn_out": y.detach().cpu().tolist(),
       "bn_out": ref_y.detach()[4 * rank: 4 * (rank + 1)].tolist(),
       "syncbn_grad_x": mine.grad.cpu().tolist(), "bn_grad_x": xb.grad[4 * rank: 4 * (rank + 1)].tolist(),
       "syncbn_grad_w": sbn[0].weight.grad.cpu().tolist(), "bn_grad_w": bn.weight.grad.tolist(),
       "syncbn_running_mean": sbn[0].running_mean.cpu().tolist(), "bn_running_mean": bn.running_mean.tolist()}
# emuccl keeps each emu tensor's host view between calls: every later change of the tensor's
# storage or layout must reach gloo (results recorded per step, the test knows what each must be)
x = torch.full((4,), float(rank + 1), device=dev)
buf = torch.empty(4 * world, device=dev)
views = {}
dist.all_gather_into_tensor(buf, x)
views["first"] = buf.cpu().tolist()
nbytes = buf.untyped_storage().nbytes()
buf.untyped_storage().resize_(0)  # FSDP2 frees and re-allocates its unsharded parameters so
buf.untyped_storage().resize_(nbytes)
x.add_(10)
dist.all_gather_into_tensor(buf, x)
views["storage_resized"] = buf.cpu().tolist()
x.set_(torch.full((4,), 100.0 + rank, device=dev))
dist.all_gather_into_tensor(buf, x)
views["input_set"] = buf.cpu().tolist()
buf.data = torch.zeros(4 * world, device=dev)
dist.all_gather_into_tensor(buf, x)
views["output_data_swapped"] = buf.cpu().tolist()
buf.resize_(world, 4)  # the stacked layout, same storage
dist.all_gather_into_tensor(buf, x)
views["output_reshaped"] = buf.cpu().tolist()
x.as_strided_((2,), (2,))  # every other element of the same storage
small = torch.empty(2 * world, device=dev)
dist.all_gather_into_tensor(small, x)
views["input_restrided"] = small.cpu().tolist()
before = hal.memory_allocated()
big = torch.ones(1 << 20, device=dev)
dist.all_reduce(big)
del big
for _ in range(500):  # gloo's worker thread lets go of a finished call's tensors a moment later
    if hal.memory_allocated() == before:
        break
    time.sleep(0.01)
views["bytes_kept_after_del"] = hal.memory_allocated() - before
out["host_views"] = views
dist.barrier()
dist.destroy_process_group()
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
