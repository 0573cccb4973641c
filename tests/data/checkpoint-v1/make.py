"""Writes the two small checkpoints beside this file in hal.checkpoint's first on-disk layout.

``plain/``: a :class:`hal.checkpoint.Checkpointer` save (``async_save=False``) of a plain model with
its optimizer, LR scheduler, extras, RNG and a ``StatefulDataLoader``'s position; ``sharded/``: a
``hal.checkpoint.save`` of the same model under FSDP2 (``fully_shard``) in a one-rank gloo job, so
its model and optimizer state are torch.distributed.checkpoint's files under ``step-N/dcp/`` (no RNG:
the plain one holds that).
Every value is exact in float32 (multiples of 1/16), so a reader checks equality on any torch.

They were written with hal at commit b4b1b33 (the layout whose sharded manifest took DCP's file
names from ``write_data``) and torch 2.13.0; tests/unit/test_checkpoint_layout_v1.py loads them
with today's code.  To write them again with that code::

    git worktree add /tmp/hal-b4b1b33 b4b1b33
    PYTHONPATH=/tmp/hal-b4b1b33 python tests/data/checkpoint-v1/make.py

(only if the old layout itself must change: the point of the files is that today's code did not
write them).  The test imports :func:`build` and :data:`STEP` from here for the expected values.
"""
import random
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
STEP = 3
SEED = 7
EXTRA = {"epoch": 1, "note": "layout 1", "history": [0.5, 0.25]}
#: the dataset of the plain checkpoint's loader; one batch of 2 was drawn before the save
DATA = torch.arange(8, dtype=torch.float32).reshape(8, 1)


def build(sharded_on=None):
    """The model, optimizer and scheduler as saved: one SGD step with momentum from exact values.

    ``sharded_on`` (a DeviceMesh) puts the model under FSDP2 first.  ``Linear(3, 2)`` weights
    ``arange(6) / 4 - 0.5``, bias ``[0.25, -0.75]``; the gradient of ``y.sum()`` at ``x = 0.5``
    is 0.5 for every weight and 1 for the bias; SGD(lr=0.5, momentum=0.9) then StepLR(2, 0.5).
    """
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4 - 0.5)
        model.bias.copy_(torch.tensor([0.25, -0.75]))
    if sharded_on is not None:
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=sharded_on)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    model(torch.full((1, 3), 0.5)).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def _seed():
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)


def write_plain(root: Path) -> None:
    import hal.checkpoint as ckpt
    from torch.utils.data import TensorDataset
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        from torchdata.stateful_dataloader import StatefulDataLoader

    model, opt, sched = build()
    loader = StatefulDataLoader(TensorDataset(DATA), batch_size=2, shuffle=False)
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt, scheduler=sched, dataloader=loader,
                              async_save=False, keep_last=None)
    it = iter(loader)
    next(it)
    _seed()
    saver.save(STEP, extra=EXTRA, epoch=0)
    saver.close()


def write_sharded(root: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import hal.checkpoint as ckpt

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model, opt, sched = build(sharded_on=init_device_mesh("cpu", (1,)))
        ckpt.save(root, STEP, model=model, optimizer=opt, scheduler=sched, extra=EXTRA, rng=False)
    finally:
        dist.destroy_process_group()


def main(out: Path = HERE) -> None:
    for name, write in (("plain", write_plain), ("sharded", write_sharded)):
        shutil.rmtree(out / name, ignore_errors=True)
        write(out / name)
        print(f"{out / name}: {sum(p.stat().st_size for p in (out / name).rglob('*') if p.is_file())} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
