"""hal.checkpoint captures and restores the whole training state, without pickle."""
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt
from hal.checkpoint import CheckpointError, CheckpointWarning


def _train(steps=4, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.2), nn.Linear(12, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, milestones=[2], schedulers=[
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2),
        torch.optim.lr_scheduler.StepLR(opt, 2, 0.3)])
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(steps):
        loss = model(torch.randn(5, 6)).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
    return model, opt, sched, scaler


def _fresh():
    m, o, s, sc = _train(steps=0, seed=99)
    return m, o, s, sc


def test_whole_state_round_trips(tmp_path):
    model, opt, sched, scaler = _train()
    extra = {"sampler_position": 1234, "epoch": 2, "best": float("inf"), "history": [0.5, 0.25],
             "by_id": {3: (1, 2)}, "mask": torch.tensor([True, False])}
    ckpt.save(tmp_path, 4, model=model, optimizer=opt, scheduler=sched, scaler=scaler, extra=extra)
    m2, o2, s2, sc2 = _fresh()
    ck = ckpt.resume(tmp_path, model=m2, optimizer=o2, scheduler=s2, scaler=sc2)
    assert ck.step == 4
    for (k, a), b in zip(model.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    assert s2.state_dict() == sched.state_dict()
    assert s2.get_last_lr() == sched.get_last_lr()
    assert sc2.get_scale() == scaler.get_scale()
    a, b = opt.state_dict(), o2.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for k in a["state"][i]:
            assert torch.equal(a["state"][i][k], b["state"][i][k])
    assert ck.extra["sampler_position"] == 1234 and math.isinf(ck.extra["best"])
    assert ck.extra["by_id"] == {3: (1, 2)}
    assert torch.equal(ck.extra["mask"], extra["mask"])


def test_training_continues_identically_after_load(tmp_path):
    model, opt, sched, scaler = _train()
    x = torch.randn(5, 6)
    ckpt.save(tmp_path, 4, model=model, optimizer=opt, scheduler=sched, scaler=scaler)
    ref = model(x)  # consumes dropout RNG after the save
    m2, o2, s2, sc2 = _fresh()
    ckpt.resume(tmp_path, model=m2, optimizer=o2, scheduler=s2, scaler=sc2)
    assert torch.equal(m2(x), ref)  # same weights and same dropout mask: RNG restored


def test_rank_file_is_plain_json_and_tensors_are_safetensors(tmp_path):
    from safetensors.torch import load_file
    model, opt, sched, scaler = _train()
    path = ckpt.save(tmp_path, 7, model=model, optimizer=opt, scheduler=sched)
    doc = json.loads((path / "rank-00000.json").read_text())
    assert doc["state"]["scheduler"]["_milestones"] == [2]
    tensors = load_file(path / "rank-00000.safetensors")
    assert torch.equal(tensors["/model/0.weight"], model[0].weight)
    assert set(doc["rng"]["torch"]) == {"cpu"}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.bool])
def test_tensor_dtypes_and_shapes_survive(tmp_path, dtype):
    values = {"scalar": torch.tensor(3).to(dtype), "empty": torch.zeros(0, 4, dtype=dtype),
              "strided": torch.arange(24).reshape(4, 6).t().to(dtype)}
    ckpt.save(tmp_path, 1, extra=values)
    got = ckpt.load(tmp_path / "step-00000001").extra
    for k, v in values.items():
        assert got[k].dtype == dtype and got[k].shape == v.shape and torch.equal(got[k], v), k


def test_unsupported_object_is_refused_with_its_path(tmp_path):
    with pytest.raises(CheckpointError, match=r"/extra/fn: a builtins.function cannot be stored without pickle"):
        ckpt.save(tmp_path, 1, extra={"fn": lambda: 0})
    assert not list(tmp_path.glob("step-*"))


@pytest.mark.parametrize("kw, match", [
    ({"step": -1}, "non-negative int"),
    ({"step": 1, "extra": [1, 2]}, "extra must be a dict"),
    ({"step": 1, "mode": "zero"}, "unknown distributed mode"),
    ({"step": 1, "keep_last": 0}, "positive int"),
    ({"step": 1, "model": object()}, "has no state_dict"),
])
def test_bad_arguments_are_named(tmp_path, kw, match):
    with pytest.raises(CheckpointError, match=match):
        ckpt.save(tmp_path, **kw)


def test_missing_scheduler_on_load_is_warned(tmp_path):
    model, opt, sched, _ = _train()
    ckpt.save(tmp_path, 4, model=model, optimizer=opt, scheduler=sched)
    m2, o2, _, _ = _fresh()
    with pytest.warns(CheckpointWarning, match="holds scheduler state but no scheduler= was given"):
        ckpt.resume(tmp_path, model=m2, optimizer=o2)


def test_asking_for_state_that_was_not_saved_is_an_error(tmp_path):
    model, _, _, _ = _train()
    ckpt.save(tmp_path, 4, model=model)
    m2, o2, _, _ = _fresh()
    with pytest.raises(CheckpointError, match="optimizer= was given but the checkpoint holds no optimizer"):
        ckpt.resume(tmp_path, model=m2, optimizer=o2)


def test_shape_mismatch_is_one_clear_error(tmp_path):
    ckpt.save(tmp_path, 1, model=nn.Linear(3, 4))
    with pytest.raises(CheckpointError, match="model: the checkpoint's state does not fit this Linear"):
        ckpt.resume(tmp_path, model=nn.Linear(3, 5))


def test_keys_with_slashes_do_not_collide_with_nesting(tmp_path):
    extra = {"a/b": torch.zeros(2), "a": {"b": torch.ones(2)}, "arr": np.arange(3)}
    ckpt.save(tmp_path, 1, extra=extra)
    got = ckpt.load(tmp_path / "step-00000001").extra
    assert torch.equal(got["a/b"], torch.zeros(2)) and torch.equal(got["a"]["b"], torch.ones(2))
    assert np.array_equal(got["arr"], np.arange(3))
