"""A rank of a small DDP or FSDP2 training loop whose communication time hal.metrics records.

``slow_s`` makes every gradient all-reduce complete that many seconds late (a comm hook
registered after ``metrics.watch`` whose future's callback sleeps on the collective's
thread), as a slow link would.  With ``reference=True`` (DDP) the same steps also run on an
unwatched DDP copy and the largest parameter difference is returned: the watch must not change
the training.  With ``interleaved=True`` (DDP) an unwatched DDP model on the same process group
steps between the watched one's steps, and each step's loss is all-reduced as a logged figure:
neither is the watched model's gradient communication.  ``paused_steps``: steps run with the
watch paused (``metrics.comm.pause()`` ... ``resume()``).  Run under hal.dist.launch.spawn.
"""
import time


def train(folder, kind="ddp", steps=12, slow_s=0.0, dim=256, layers=3, batch=256, run="exp", reference=False,
          bucket_cap_mb=25, interleaved=False, paused_steps=()):
    import torch
    import torch.distributed as dist

    import hal
    import hal.dist  # noqa: F401 - the process group spawn set up
    import hal.metrics

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU())
                                  for _ in range(layers)]).to(hal.device())
    ref = other = None
    if kind == "ddp":
        import copy
        if reference:
            ref = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=bucket_cap_mb)
        if interleaved:
            other = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=bucket_cap_mb)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(hal.device_type(), (world,))
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(batch, dim, generator=g).to(hal.device())
    with hal.metrics.MetricsLogger(folder, run, straggler_factor=None) as metrics:
        metrics.watch(model)
        if slow_s:
            def slow(state, bucket):
                t = bucket.buffer().div_(world)
                fut = dist.all_reduce(t, async_op=True).get_future()
                return fut.then(lambda f: (time.sleep(slow_s), f.value()[0])[1])
            model.register_comm_hook(None, slow)
        metrics.start()
        for step in range(1, steps + 1):
            if step in paused_steps:
                metrics.comm.pause()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if other is not None:
                other(x).pow(2).mean().backward()
                loss = loss.detach().clone()
                dist.all_reduce(loss)
                loss /= world
            metrics.log_step(step, samples=batch, loss=loss.item())
            if step in paused_steps:
                metrics.comm.resume()
    diff = None
    if ref is not None:
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-3)
        for _ in range(steps):
            ref(x).pow(2).mean().backward()
            ref_opt.step()
            ref_opt.zero_grad()
        diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    hooks = len(getattr(model, "_comm_hooks", []) or [])
    return {"rank": rank, "max_param_difference": diff, "comm_hooks": hooks}
