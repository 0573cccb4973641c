"""hal.metrics attached from outside a script that does not use it (``hal run --metrics DIR``): what a user
reads in the JSONL is what the script's own loop computed."""
import json
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

from hal.metrics import AttachedMetrics


def _records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _train(steps=3, accumulate=1, scaler=None, recompute=False, batch=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(steps * accumulate * batch, 6), torch.randn(steps * accumulate * batch, 1))
    seen, norms = [], []
    for i, (x, y) in enumerate(DataLoader(data, batch_size=batch)):
        if recompute:  # reentrant checkpointing runs a backward of its own inside the script's
            h = model[0](x)
            out = checkpoint(lambda h: model[2](model[1](h)), h, use_reentrant=True)
        else:
            out = model(x)
        loss = torch.nn.functional.mse_loss(out, y) / accumulate
        seen.append(loss.item())
        (scaler.scale(loss) if scaler else loss).backward()
        if (i + 1) % accumulate == 0:
            if scaler:
                scaler.unscale_(opt)
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)))
            (scaler.step(opt), scaler.update()) if scaler else opt.step()
            opt.zero_grad()
    return seen, norms


def test_each_optimizer_step_is_a_record_with_the_loss_grad_norm_lr_and_samples(tmp_path):
    attached = AttachedMetrics(tmp_path, "plain", grad_norm=True).install()
    try:
        seen, norms = _train()
    finally:
        attached.close()
    recs = _records(tmp_path / "plain.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["scalars"]["loss"] for r in recs] == pytest.approx(seen, rel=1e-6)
    assert [r["scalars"]["grad_norm"] for r in recs] == pytest.approx(norms, rel=1e-5)
    assert all(r["scalars"]["lr"] == 0.05 and r["samples"] == 4 for r in recs)
    assert all(r["step_time_s"] > 0 for r in recs)


def test_gradient_accumulation_a_grad_scaler_and_recomputation_still_give_the_scripts_loss(tmp_path):
    attached = AttachedMetrics(tmp_path, "acc").install()
    try:
        seen, _ = _train(steps=2, accumulate=2, scaler=torch.amp.GradScaler("cpu", init_scale=1024.0), recompute=True)
    finally:
        attached.close()
    recs = _records(tmp_path / "acc.jsonl")
    # two micro-batches per step: their mean, unscaled (not x1024), the recomputation's backward not counted
    assert [r["scalars"]["loss"] for r in recs] == pytest.approx([sum(seen[:2]) / 2, sum(seen[2:]) / 2], rel=1e-6)
    assert [r["samples"] for r in recs] == [8, 8] and "grad_norm" not in recs[0]["scalars"]


def test_hooks_are_gone_after_close(tmp_path):
    before = torch.autograd.backward, DataLoader.__iter__, torch.amp.GradScaler.scale
    AttachedMetrics(tmp_path, "x").install().close()
    _train(steps=1)
    assert (torch.autograd.backward, DataLoader.__iter__, torch.amp.GradScaler.scale) == before
    assert not (tmp_path / "x.jsonl").exists()


def test_max_steps_ends_the_script_cleanly_after_that_step(tmp_path):
    from hal.metrics._attach import StepLimitReached

    attached = AttachedMetrics(tmp_path, "short", max_steps=2).install()
    try:
        with pytest.raises(SystemExit) as stop:
            _train(steps=5)
    finally:
        attached.close()
    assert isinstance(stop.value, StepLimitReached) and stop.value.code == 0  # hal run: exit code 0
    assert [r["step"] for r in _records(tmp_path / "short.jsonl")] == [1, 2]


def test_the_second_steps_flops_are_counted_as_torch_counts_them(tmp_path):
    attached = AttachedMetrics(tmp_path, "flops", flops=True).install()
    try:
        _train(steps=3, batch=4)
    finally:
        attached.close()
    recs = _records(tmp_path / "flops.jsonl")
    # Linear(6, 8) and Linear(8, 1) at batch 4: forward 2*4*(6*8 + 8*1); backward the weight gradients of
    # both (the same) and the input gradient of the second (2*4*8*1); the first step is not counted
    assert [r["scalars"].get("flops") for r in recs] == [None, 2 * 2 * 4 * (6 * 8 + 8 * 1) + 2 * 4 * 8 * 1, None]
