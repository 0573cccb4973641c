"""Pipeline parallel on CUDA (torchrun, 2 ranks): the model split into two stages by hand
(PipelineStage) or by pipeline() at a split point, run by ScheduleGPipe or Schedule1F1B.

  torchrun --nproc-per-node 2 pp.py --out out --schedule gpipe
  torchrun --nproc-per-node 2 pp.py --out out --schedule 1f1b
  torchrun --nproc-per-node 2 pp.py --out out --schedule gpipe --tracer   # pipeline(), SplitPoint
  python pp.py --out ref --reference                          # one process, whole batch
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline

import tiny_model as tm

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
parser = tm.arguments(__doc__.splitlines()[0])
parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
parser.add_argument("--microbatches", type=int, default=4)
parser.add_argument("--tracer", action="store_true", help="split with pipeline() before block 1")
args = parser.parse_args()

if args.reference:
    model, losses = tm.train_reference("cuda")
    tm.record(args.out, losses, model)
    raise SystemExit(0)

local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2, "two stages: run with --nproc-per-node 2"

if args.tracer:
    # the whole model, traced on one microbatch and split before block 1
    model = tm.Transformer().to(device)
    tm.init_weights(model)
    example = tm.batch(0)[0].chunk(args.microbatches)[0].to(device)
    pipe = pipeline(model, mb_args=(example,), split_spec={"layers.1": SplitPoint.BEGINNING})
    stage = pipe.build_stage(rank, device)
    model = stage.submod
else:
    # stage 0: embedding and block 0; stage 1: block 1, norm and output (the parts a stage does not hold are None)
    model = tm.Transformer()
    if rank == 0:
        del model.layers["1"]
        model.norm = model.output = None
    else:
        del model.layers["0"]
        model.tok_embeddings = None
    model.to(device)
    tm.init_weights(model)
    stage = PipelineStage(model, rank, world, device)
schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.microbatches, loss_fn=tm.loss_fn)

opt = tm.optimizer(model)
losses = []
for step in range(tm.STEPS):
    tokens, labels = (t.to(device) for t in tm.batch(step))
    if rank == 0:
        schedule.step(tokens)
        loss = torch.zeros((), device=device)
    else:
        micro = []
        schedule.step(target=labels, losses=micro)
        loss = torch.stack(micro).mean().detach()  # equal microbatches: the mean over the whole batch
    opt.step()
    opt.zero_grad()
    dist.broadcast(loss, src=world - 1)
    losses.append(loss.item())
    if rank == 0:
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)
tm.record(args.out, losses, model, rank, world)
dist.destroy_process_group()
