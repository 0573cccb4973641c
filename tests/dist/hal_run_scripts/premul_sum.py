"""ReduceOp.PREMUL_SUM (NCCL's) and AVG, written for CUDA, as c10d_parts.py calls them at 2 ranks:
every collective that takes an op, with a float factor and a tensor factor that differs per rank,
synchronous and async_op=True, inside _coalescing_manager; then FSDP2 with set_gradient_divide_factor
against one process on the whole batch.  :func:`collect` returns what this rank saw; the test
computes what each value must be."""
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard

R = dist.ReduceOp


def listed(t):
    return t.cpu().tolist()


def collect(rank: int, world: int) -> dict:
    """Every op-taking collective with PREMUL_SUM on the default group (rank ``rank`` of ``world``)."""
    with warnings.catch_warnings():  # reduce_scatter_tensor and all_reduce_coalesced: deprecated in torch 2.13
        warnings.simplefilter("ignore")
        seen = _collectives(rank, world)
    seen.update(_fsdp2(rank, world))
    return seen


def _collectives(rank, world):
    def data(n):
        return torch.arange(float(n), device="cuda") * (rank + 1) + 10 * rank

    half = R.PREMUL_SUM(0.5)
    # a tensor factor, one per rank, through torch 2.13's private spelling (FSDP's own)
    mine = dist._make_nccl_premul_sum(torch.tensor(0.25 * (rank + 1), device="cuda"))
    seen = {}

    # the repro: reduce_scatter_tensor with PREMUL_SUM(0.5); its input is the caller's, unchanged
    x = data(4 * world)
    out = torch.full((4,), -1.0, device="cuda")
    dist.reduce_scatter_tensor(out, x, op=half)
    seen["reduce_scatter_tensor"], seen["rs_input_after"] = listed(out), listed(x)

    out = torch.full((4,), -1.0, device="cuda")
    work = dist.reduce_scatter_tensor(out, data(4 * world), op=mine, async_op=True)
    work.wait()
    seen["reduce_scatter_tensor_async_tensor_factor"] = listed(out)

    out = torch.full((3,), -1.0, device="cuda")
    dist.reduce_scatter_single(out, data(3 * world), op=half)
    seen["reduce_scatter_single"] = listed(out)

    t = data(5)
    dist.all_reduce(t, op=half)
    seen["all_reduce"] = listed(t)
    t = data(5)
    work = dist.all_reduce(t, op=mine, async_op=True)
    work.wait()
    seen["all_reduce_async_tensor_factor"] = listed(t)
    t = data(5).bfloat16()
    dist.all_reduce(t, op=half)
    seen["all_reduce_bf16"] = listed(t.float())

    t = data(5)
    dist.reduce(t, dst=0, op=half)
    seen["reduce"] = listed(t) if rank == 0 else None

    ins = [data(2) + j for j in range(world)]
    out = torch.full((2,), -1.0, device="cuda")
    dist.reduce_scatter(out, ins, op=mine)
    seen["reduce_scatter"], seen["reduce_scatter_inputs_after"] = listed(out), [listed(i) for i in ins]

    ts = [data(3), data(2)]
    dist.all_reduce_coalesced(ts, op=half)
    seen["all_reduce_coalesced"] = [listed(t) for t in ts]

    outs = [torch.full((n,), -1.0, device="cuda") for n in (2, 3)]
    with dist._coalescing_manager(async_ops=True) as cm:   # torch 2.13's, as FSDP and DDP use it
        for o in outs:
            dist.reduce_scatter_tensor(o, data(o.numel() * world), op=half)
    cm.wait()
    seen["coalesced_reduce_scatter_tensor"] = [listed(o) for o in outs]
    ts = [data(2), data(3)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, op=half)
    cm.wait()
    seen["coalesced_all_reduce"] = [listed(t) for t in ts]

    out = torch.full((4,), -1.0, device="cuda")
    dist.reduce_scatter_tensor(out, data(4 * world), op=R.AVG)  # FSDP2's default op
    seen["reduce_scatter_tensor_avg"] = listed(out)
    t = data(5)
    dist.all_reduce(t)
    seen["all_reduce_sum"] = listed(t)
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int64, device="cuda"), op=half)
        seen["int64_error"] = None
    except RuntimeError as exc:
        seen["int64_error"] = str(exc)
    return seen


def _fsdp2(rank, world):
    """FSDP2 after set_gradient_divide_factor(8) reduce-scatters with PREMUL_SUM(1/8) (torch 2.13's
    _get_gradient_divide_factors): a gradient is the sum of the ranks' gradients over 8, which is one
    process's gradient of the whole batch (the mean of the halves' mean losses) times world / 8."""
    factor = 8.0
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).cuda()
    model.load_state_dict({k: v.cuda() for k, v in ref.state_dict().items()})
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(factor)
    g = torch.Generator().manual_seed(1)
    xb, yb = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
    torch.nn.functional.mse_loss(model(xb.chunk(world)[rank].cuda()), yb.chunk(world)[rank].cuda()).backward()
    torch.nn.functional.mse_loss(ref(xb), yb).backward()
    return {"fsdp_grads": [p.grad.full_tensor().cpu().flatten().tolist() for p in model.parameters()],
            "one_process_grads": [(p.grad * world / factor).flatten().tolist() for p in ref.parameters()]}
