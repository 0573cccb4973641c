"""One rank of a tiny sharded training job (FSDP2, or TP inside a 2-D mesh) that checkpoints
with hal.checkpoint and can resume from a checkpoint at any world size.

Run through ``hal.dist.launch.spawn("tests/dist/_reshard_worker.py:train", nproc, kwargs)``.
Every rank returns the global loss of each step and the dataset ids it trained on, so the
test can compare a resumed job with an uninterrupted one sample by sample.
"""
from __future__ import annotations

import logging
import os
import resource
import signal
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import hal  # noqa: E402
import hal.checkpoint as ckpt  # noqa: E402

N_SAMPLES, D_IN, D_HID, D_OUT = 96, 8, 16, 4


class Ids(torch.utils.data.Dataset):
    """Sample ``i`` is ``(i, x_i, y_i)``: the id travels with the data."""

    def __init__(self):
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(N_SAMPLES, D_IN, generator=g)
        self.y = torch.randn(N_SAMPLES, D_OUT, generator=g)

    def __len__(self):
        return N_SAMPLES

    def __getitem__(self, i):
        return i, self.x[i], self.y[i]


def _model(layout: str, world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)  # the same initial weights on every rank and at every world size
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(), torch.nn.Linear(D_HID, D_OUT))
    model.to(hal.device())
    kind = hal.device_type()
    if layout == "tp_dp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(kind, (world // 2, 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
        return model, mesh["dp"].size(), mesh["dp"].get_local_rank()
    mesh = init_device_mesh(kind, (world,), mesh_dim_names=("dp",))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, world, dist.get_rank()


class Progress:
    """A Stateful object of this rank's own (states=): the steps it trained and the rank it belongs to."""

    def __init__(self, rank: int):
        self.rank, self.steps, self.last_loss = rank, 0, torch.zeros(())

    def state_dict(self):
        return {"rank": self.rank, "steps": self.steps, "last_loss": self.last_loss}

    def load_state_dict(self, state_dict):
        self.rank, self.steps = state_dict["rank"], state_dict["steps"]
        self.last_loss = state_dict["last_loss"].clone()


def train(root: str, steps: int, global_batch: int = 8, save_at=None, layout: str = "fsdp",
          async_save: bool = True, crash_rank=None, crash_at: str = "", full_disk_rank=None,
          workers: int = 0, after_step=None, sampler: str = "elastic"):
    """Train to ``steps`` (resuming from ``root`` if it holds a checkpoint); return what was seen.

    ``sampler``: ``"elastic"`` (hal.checkpoint.ElasticSampler) or ``"distributed"`` (torch's
    DistributedSampler, which the Checkpointer re-splits the same way).

    ``save_at``: steps to save at.  ``full_disk_rank``: that rank's file size limit drops to
    0 bytes during the second save (what a full disk looks like to ``write``).  ``crash_rank``
    / ``crash_at``: that rank dies at that crash point of the second save (the third when a
    full disk takes the second).  ``after_step(step, saver)``: called at the end of every step.
    """
    world = dist.get_world_size()
    rank = dist.get_rank()
    model, dp_size, dp_rank = _model(layout, world)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
    data = Ids()
    kind = ckpt.ElasticSampler if sampler == "elastic" else torch.utils.data.DistributedSampler
    sampler = kind(data, num_replicas=dp_size, rank=dp_rank, shuffle=True, seed=7)
    loader = StatefulDataLoader(data, batch_size=global_batch // dp_size, sampler=sampler,
                                num_workers=workers)
    records = []
    logging.getLogger("hal.checkpoint").addHandler(_Keep(records))
    progress = Progress(rank)
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt, scheduler=sched, dataloader=loader,
                              states={"progress": progress}, async_save=async_save, keep_last=2)
    ck = saver.resume()
    restored = progress.state_dict() if ck else None
    restored = restored and {"rank": restored["rank"], "steps": restored["steps"],
                             "last_loss": restored["last_loss"].item()}
    step = ck.step if ck else 0
    epoch = ck.epoch if ck and ck.epoch is not None else 0
    losses, ids, stalls, saves, saved_params, own_losses = {}, {}, [], [], {}, {}
    with saver:
        while step < steps:
            sampler.set_epoch(epoch)
            for idx, x, y in loader:
                x, y = x.to(hal.device()), y.to(hal.device())
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                g = loss.detach().clone()
                dist.all_reduce(g)
                losses[step] = g.item() / world
                ids[step] = idx.tolist()
                progress.steps, progress.last_loss = step, loss.detach().clone()
                own_losses[step] = loss.item()
                if save_at and step in save_at:
                    crash_save = 2 if full_disk_rank is not None else 1
                    if len(saves) == crash_save and crash_rank == rank and crash_at:
                        os.environ[ckpt.CRASH_ENV] = crash_at
                    if len(saves) == 1 and full_disk_rank == rank:
                        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
                    saved_params[step] = _full(model, rank)
                    saver.save(step)
                    saves.append(step)
                    stalls.append(saver.last_stall_s)
                    if not async_save or full_disk_rank is not None:
                        saver.wait()
                        if full_disk_rank is not None and rank != full_disk_rank:
                            _note(root, rank, step, saver.failed_saves)
                    if full_disk_rank == rank:
                        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
                        _note(root, rank, step, saver.failed_saves)
                if after_step is not None:
                    after_step(step, saver)
                if step == steps:
                    break
            else:
                epoch += 1
    return {"losses": losses, "ids": ids, "stalls": stalls, "saves": saves, "failed_saves": saver.failed_saves,
            "resumed_from": ck.step if ck else None, "reshard": ck.reshard if ck else None,
            "log": records, "params": _full(model, rank), "saved_params": saved_params,
            "dp_rank": dp_rank, "dp_size": dp_size, "progress_restored": restored,
            "own_losses": own_losses}


def _note(root, rank, step, failed_saves):
    """Leave ``failed_saves`` after the save of ``step`` beside ``root`` (survives a later crash)."""
    Path(f"{root}.rank{rank}.step{step}").write_text(str(failed_saves))


def _full(model, rank):
    """Every parameter gathered whole (collective), as lists on rank 0; None elsewhere."""
    full = {name: p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
            for name, p in model.named_parameters()}
    return {k: v.tolist() for k, v in full.items()} if rank == 0 else None


class _Keep(logging.Handler):
    def __init__(self, into):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record):
        self.into.append(record.getMessage())


def distributed_sampler(root: str, steps: int, n: int, global_batch: int, save_at=None,
                        drop_last: bool = False):
    """A data-parallel job over torch's own ``DistributedSampler`` (what most scripts use, not
    hal's ElasticSampler): train to ``steps`` (resuming from ``root``), saving at ``save_at``;
    return each step's epoch and the dataset ids this rank took."""
    from torch.utils.data import DistributedSampler

    world, rank = dist.get_world_size(), dist.get_rank()
    model = torch.nn.Linear(1, 1)
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=11,
                                 drop_last=drop_last)
    loader = StatefulDataLoader(range(n), batch_size=global_batch // world, sampler=sampler)
    records = []
    logging.getLogger("hal.checkpoint").addHandler(_Keep(records))
    saver = ckpt.Checkpointer(root, model=model, dataloader=loader, async_save=False)
    ck = saver.resume()
    step = ck.step if ck else 0
    epoch = ck.epoch if ck and ck.epoch is not None else 0
    ids, epochs = {}, {}
    with saver:
        while step < steps:
            sampler.set_epoch(epoch)
            for idx in loader:
                step += 1
                ids[step], epochs[step] = idx.tolist(), epoch
                if save_at and step in save_at:
                    saver.save(step)
                if step == steps:
                    break
            else:
                epoch += 1
    return {"ids": ids, "epochs": epochs, "resumed_from": ck.step if ck else None, "log": records}
