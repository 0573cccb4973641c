"""What the training loop waits for in an asynchronous sharded save (FSDP2, 2 ranks on cpu/gloo).

``Checkpointer.save`` with async saving must return once this rank's shards are copied to host
memory: no fsync and no sha256 in the calling thread (those belong to the background commit),
the copy taken at the call (weights changed right after it returns are not what is saved,
checked by loading the step into a fresh model), and the host buffers of one save reused by the
next instead of allocated again.
"""
from pathlib import Path

import pytest

from hal.dist.launch import spawn

pytestmark = [pytest.mark.dist]

WIDTH = 64


def _fsdp_model():
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, WIDTH)).sum().backward()
    opt.step()
    return model, opt


def worker(root: str) -> dict:
    """One rank: two async saves, spied on; then the first step loaded into a fresh model."""
    import hashlib
    import os
    import threading

    import torch

    import hal.checkpoint as ckpt

    model, opt = _fsdp_model()
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt, keep_last=None)
    caller = threading.current_thread()
    in_caller = []
    real_fsync, real_sha = os.fsync, hashlib.sha256

    def fsync(fd):
        if threading.current_thread() is caller:
            in_caller.append("fsync")
        return real_fsync(fd)

    def sha256(*a, **k):
        if threading.current_thread() is caller:
            in_caller.append("sha256")
        return real_sha(*a, **k)

    at_save = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    os.fsync, hashlib.sha256 = fsync, sha256
    try:
        saver.save(1)
        with torch.no_grad():  # changed while the write may still be running
            for p in model.parameters():
                p.to_local().add_(1.0)
        first = [b.data_ptr() for b in saver._stage._buffers.values()]
    finally:
        os.fsync, hashlib.sha256 = real_fsync, real_sha
    saver.save(2)
    second = [b.data_ptr() for b in saver._stage._buffers.values()]
    saver.close()
    fresh, fresh_opt = _fsdp_model()
    ckpt.load(Path(root) / "step-00000001", model=fresh, optimizer=fresh_opt)
    loaded = {k: v.full_tensor() for k, v in fresh.state_dict().items()}
    return {"in_caller": in_caller, "buffers": len(first), "reused": first == second,
            "released": len(saver._stage._buffers) == 0,
            "equal_at_save": all(torch.equal(loaded[k], at_save[k]) for k in at_save),
            "manifests": sorted(p.parent.name for p in Path(root).glob("step-*/manifest.json"))}


def test_async_save_waits_only_for_the_host_copy(tmp_path):
    res = spawn(f"{__file__}:worker", 2, kwargs={"root": str(tmp_path / "ck")}, env={"HAL_BACKEND": "cpu"},
                timeout=240)
    assert res.ok, res.first_error() + "".join(r.stderr_tail[-1500:] for r in res.ranks)
    for r in res.ranks:
        out = r.result
        assert out["in_caller"] == [], f"rank {r.rank} fsynced or hashed inside save(): {out['in_caller']}"
        assert out["equal_at_save"], "the checkpoint holds weights changed after save() returned"
        assert out["buffers"] > 0 and out["reused"], "the second save allocated new host buffers"
        assert out["released"], "close() kept the host copy of the shards"
        assert out["manifests"] == ["step-00000001", "step-00000002"]
