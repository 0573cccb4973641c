"""Checkpoints of device-resident state, on every usable backend (runs unchanged on cuda, npu...)."""
import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt


def _trained(dev):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.25), nn.Linear(32, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    for _ in range(3):
        model(torch.randn(8, 16, device=dev)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_device_state_round_trips_with_device_rng(tmp_path, hal_backend, async_save):
    dev = hal_backend.device()
    model, opt, sched = _trained(dev)
    x = torch.randn(8, 16, device=dev)
    with ckpt.Checkpointer(tmp_path, async_save=async_save) as saver:
        saver.save(3, model=model, optimizer=opt, scheduler=sched)
    ref = model(x)  # dropout draws from the device generator after the save
    m2 = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.25), nn.Linear(32, 4)).to(dev)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    s2 = torch.optim.lr_scheduler.StepLR(o2, 2, 0.5)
    ck = ckpt.resume(tmp_path, model=m2, optimizer=o2, scheduler=s2)
    key = "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index}"
    assert key in ck.rng_applied
    assert torch.equal(m2(x), ref)
    assert all(t.device.type == dev.type for s in o2.state.values() for t in s.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def test_device_checkpoint_opens_on_the_cpu(tmp_path, hal_backend):
    dev = hal_backend.device()
    model, opt, sched = _trained(dev)
    ckpt.save(tmp_path, 3, model=model, optimizer=opt, scheduler=sched, rng=False)
    cpu_model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.25), nn.Linear(32, 4))
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    cpu_sched = torch.optim.lr_scheduler.StepLR(cpu_opt, 2, 0.5)
    ck = ckpt.load(tmp_path / "step-00000003", model=cpu_model, optimizer=cpu_opt, scheduler=cpu_sched,
                   restore_rng=False)
    for a, b in zip(model.state_dict().values(), cpu_model.state_dict().values()):
        assert torch.equal(a.cpu(), b)
    assert cpu_sched.get_last_lr() == sched.get_last_lr()
    assert torch.equal(cpu_opt.state[cpu_model[0].weight]["exp_avg"], opt.state[model[0].weight]["exp_avg"].cpu())
    assert all(t.device.type == "cpu" for t in ck.state["model"].values())


def test_device_rng_state_is_not_applied_on_the_cpu(tmp_path, hal_backend, monkeypatch):
    """The real cross-device case: RNG saved by this accelerator, loaded with HAL_BACKEND=cpu."""
    if hal_backend.device_type == "cpu":
        pytest.skip("the selected backend is the CPU: no device RNG state to carry elsewhere "
                    "(tests/unit/test_checkpoint_rng.py covers a crafted cuda state)")
    dev = hal_backend.device()
    model, opt, sched = _trained(dev)
    ckpt.save(tmp_path, 3, model=model, optimizer=opt, scheduler=sched)
    torch.manual_seed(5)
    monkeypatch.setenv("HAL_BACKEND", "cpu")
    import hal
    hal.reset_registry()
    cpu_model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.25), nn.Linear(32, 4))
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    cpu_sched = torch.optim.lr_scheduler.StepLR(cpu_opt, 2, 0.5)
    key = f"{dev.type}:{dev.index}"
    with pytest.warns(ckpt.CheckpointWarning, match=f"{key} was saved on backend '{hal_backend.name}' but this process runs on 'cpu'"):
        ck = ckpt.resume(tmp_path, model=cpu_model, optimizer=cpu_opt, scheduler=cpu_sched)
    assert key not in ck.rng_applied and "cpu" in ck.rng_applied


def test_async_staging_copies_to_host_memory_that_the_next_save_reuses(hal_backend):
    """What an asynchronous sharded save stages: a host copy made at the call, in memory kept between
    saves, pinned for accelerator shards -- by DCP's DefaultStager where it can (torch 2.9 on; on the CPU
    here), by hal's HostStage where it cannot pin (an accelerator other than CUDA, the emulator among them)."""
    from hal.checkpoint import _dcp

    dev = hal_backend.device()
    weight = torch.randn(64, 64, device=dev)
    st = {"model": {"w": weight}, "optimizer": {"state": {"w": {"exp_avg": torch.randn(64, 64, device=dev),
                                                                "step": torch.tensor(3.0)}},
                                                "param_groups": [{"lr": 0.1, "params": ["w"]}]}}
    stage = _dcp.Staging()
    first = stage.stage(st)
    kept = list(stage.data_ptrs)
    saved = weight.to("cpu", copy=True)
    weight.add_(1.0)  # the training loop goes on as soon as the copy is made
    assert torch.equal(first["model"]["w"], saved) and first["model"]["w"].device.type == "cpu"
    assert first["optimizer"]["param_groups"] == st["optimizer"]["param_groups"]
    second = stage.stage(st)
    assert stage.data_ptrs == kept, f"the second save copied into new host memory ({stage.used})"
    assert torch.equal(second["model"]["w"], weight.cpu())
    if dev.type != "cpu":
        assert second["model"]["w"].is_pinned(), f"{stage.used} staged accelerator shards to pageable memory"
    if dev.type == "cpu" and _dcp._default_stager(False)[0] is not None:
        assert stage.used == "DefaultStager", stage.why_not_dcp
    assert stage.nbytes == 2 * 64 * 64 * 4 + 4
    stage.release()
    assert stage.nbytes == 0 and stage.data_ptrs == []
