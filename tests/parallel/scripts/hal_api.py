"""The same model written with hal's own API, for any backend: hal.dist.init(), hal.device(),
init_device_mesh(hal.device_type(), ...); launched with torchrun, no redirection.

  HAL_BACKEND=emu torchrun --nproc-per-node 2 hal_api.py --out out --fsdp        # FSDP2
  HAL_BACKEND=emu torchrun --nproc-per-node 2 hal_api.py --out out --tp          # TP + SP + loss parallel
  HAL_BACKEND=emu torchrun --nproc-per-node 4 hal_api.py --out out --fsdp --tp   # 2-D ("dp", "tp")
  HAL_BACKEND=emu python hal_api.py --out ref --reference                        # one process, whole batch
"""
import contextlib

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import loss_parallel

import hal
import tiny_model as tm
from parallelize import apply_tp

parser = tm.arguments(__doc__.splitlines()[0])
parser.add_argument("--fsdp", action="store_true")
parser.add_argument("--tp", action="store_true")
args = parser.parse_args()
if args.reference:
    model, losses = tm.train_reference(hal.device())
    tm.record(args.out, losses, model)
    raise SystemExit(0)

info = hal.dist.init()
world = info.world_size
tp = 2 if args.tp else 1
mesh = init_device_mesh(hal.device_type(), (world // tp, tp), mesh_dim_names=("dp", "tp"))
model = tm.Transformer().to(info.device)
if args.tp:
    apply_tp(model, mesh["tp"], sequence_parallel=True, loss_parallel=True)
if args.fsdp:
    for block in model.layers.values():
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
tm.init_weights(model)
dp, dp_rank = mesh["dp"].size(), mesh["dp"].get_local_rank()
losses = tm.train(model, info.device, part=lambda t: t.chunk(dp)[dp_rank], group=mesh["dp"].get_group(),
                  loss_context=loss_parallel if args.tp else contextlib.nullcontext)
tm.record(args.out, losses, model, info.rank, world)
hal.dist.destroy()
