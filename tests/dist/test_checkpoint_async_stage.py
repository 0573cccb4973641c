"""What the training loop waits for in an asynchronous sharded save (FSDP2, 2 ranks on cpu/gloo).

``Checkpointer.save`` with async saving must return once this rank's shards are copied to host
memory: no fsync and no sha256 in the calling thread (those belong to the background commit),
the copy taken at the call (weights changed right after it returns are not what is saved,
checked by loading the step into a fresh model), and the host memory of one save reused by the
next instead of allocated again -- by DCP's own DefaultStager where torch has one (2.9 on), and
the same through the writer's ``stage`` on a torch whose ``async_save`` takes no ``async_stager``
(2.4 to 2.7: here torch's ``async_save`` shaped so, a stand-in on the torch installed).
"""
from pathlib import Path

import pytest

from hal.dist.launch import spawn

try:
    from fsdp2_support import WHY_NOT
except ImportError:  # a rank of spawn() imports this module for its worker without tests/dist on its path
    WHY_NOT = None

pytestmark = [pytest.mark.dist, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]

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


def worker(root: str, without_async_stager: bool = False) -> dict:
    """One rank: two async saves, spied on; then the first step loaded into a fresh model."""
    import hashlib
    import os
    import threading

    import torch
    import torch.distributed.checkpoint as dcp

    import hal.checkpoint as ckpt

    if without_async_stager:  # async_save as torch 2.4 to 2.7 have it
        real_async_save = dcp.async_save

        def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
                       process_group=None):
            return real_async_save(state_dict, checkpoint_id=checkpoint_id, storage_writer=storage_writer,
                                   planner=planner, process_group=process_group)
        dcp.async_save = async_save
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
        first, nbytes = list(saver._stage.data_ptrs), saver._stage.nbytes
    finally:
        os.fsync, hashlib.sha256 = real_fsync, real_sha
    saver.save(2)
    second, used = list(saver._stage.data_ptrs), saver._stage.used
    saver.close()
    fresh, fresh_opt = _fsdp_model()
    ckpt.load(Path(root) / "step-00000001", model=fresh, optimizer=fresh_opt)
    loaded = {k: v.full_tensor() for k, v in fresh.state_dict().items()}
    shards = sum(t.to_local().numel() * t.to_local().element_size() for t in model.parameters())
    return {"in_caller": in_caller, "buffers": len(first), "reused": first == second, "used": used,
            "held": nbytes, "shards": shards, "released": saver._stage.nbytes == 0,
            "equal_at_save": all(torch.equal(loaded[k], at_save[k]) for k in at_save),
            "manifests": sorted(p.parent.name for p in Path(root).glob("step-*/manifest.json"))}


def _has_default_stager() -> bool:
    try:
        from torch.distributed.checkpoint.staging import DefaultStager  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("without_async_stager", [False, True], ids=["async_stager", "writer-stage"])
def test_async_save_waits_only_for_the_host_copy(tmp_path, without_async_stager):
    res = spawn(f"{__file__}:worker", 2, kwargs={"root": str(tmp_path / "ck"),
                                                 "without_async_stager": without_async_stager},
                env={"HAL_BACKEND": "cpu"}, timeout=240)
    assert res.ok, res.first_error() + "".join(r.stderr_tail[-1500:] for r in res.ranks)
    for r in res.ranks:
        out = r.result
        assert out["in_caller"] == [], f"rank {r.rank} fsynced or hashed inside save(): {out['in_caller']}"
        assert out["equal_at_save"], "the checkpoint holds weights changed after save() returned"
        assert out["buffers"] > 0 and out["reused"], "the second save allocated new host memory"
        assert out["held"] >= 3 * out["shards"], "the host copy lacks the shards or their AdamW state"
        assert out["used"] == ("DefaultStager" if _has_default_stager() else "HostStage"), out["used"]
        assert out["released"], "close() kept the host copy of the shards"
        assert out["manifests"] == ["step-00000001", "step-00000002"]
