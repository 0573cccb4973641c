import json
"""Checkpointer: the loop waits only for the host snapshot; writes are serialised and their errors surface."""
import threading

import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt
import hal.checkpoint._save as save_mod
from hal.checkpoint import CheckpointError


@pytest.fixture
def gated_writer(monkeypatch):
    """Holds the background writer at its first tensor file until the test opens the gate."""
    gate, entered = threading.Event(), threading.Event()
    real = save_mod.write_tensors

    def gated(path, tensors):
        entered.set()
        assert gate.wait(30), "test never opened the gate"
        return real(path, tensors)

    monkeypatch.setattr(save_mod, "write_tensors", gated)
    yield gate, entered
    gate.set()


def test_save_returns_while_the_write_is_pending_and_state_is_a_snapshot(tmp_path, gated_writer):
    gate, entered = gated_writer
    model = nn.Linear(8, 8)
    before = model.weight.detach().clone()
    saver = ckpt.Checkpointer(tmp_path, keep_last=None)
    saver.save(1, model=model)
    assert entered.wait(30) and saver.pending
    assert ckpt.latest(tmp_path) is None  # nothing committed yet
    with torch.no_grad():
        model.weight.add_(1.0)  # the loop moves on and changes the weights
    gate.set()
    assert saver.wait() == tmp_path / "step-00000001"
    restored = nn.Linear(8, 8)
    ckpt.resume(tmp_path, model=restored)
    assert torch.equal(restored.weight, before)


def test_second_save_waits_for_the_first(tmp_path, gated_writer):
    gate, entered = gated_writer
    saver = ckpt.Checkpointer(tmp_path, keep_last=None)
    saver.save(1, model=nn.Linear(2, 2))
    assert entered.wait(30)
    second = threading.Thread(target=saver.save, args=(2,), kwargs={"model": nn.Linear(2, 2)})
    second.start()
    second.join(0.3)
    assert second.is_alive(), "the second save must block while the first write is pending"
    gate.set()
    second.join(30)
    saver.close()
    assert [i.step for i in ckpt.scan(tmp_path) if i.complete] == [2, 1]


def test_background_io_error_surfaces_on_the_next_call(tmp_path, monkeypatch):
    def broken(path, tensors):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(save_mod, "write_tensors", broken)
    saver = ckpt.Checkpointer(tmp_path)
    saver.save(1, model=nn.Linear(2, 2))
    with pytest.raises(CheckpointError, match="background save to .* failed: .*Input/output error"):
        saver.wait()
    assert ckpt.latest(tmp_path) is None
    assert not list(tmp_path.glob("step-*")), "the failed step folder was left behind"
    saver.close()  # the error was reported once


def test_a_full_disk_drops_the_save_and_training_goes_on_until_the_limit(tmp_path, monkeypatch, caplog):
    real = save_mod.write_tensors
    full = {"on": False}

    def maybe_full(path, tensors):
        if full["on"]:
            raise OSError(28, "No space left on device")
        return real(path, tensors)

    monkeypatch.setattr(save_mod, "write_tensors", maybe_full)
    model = nn.Linear(2, 2)
    saver = ckpt.Checkpointer(tmp_path, every=1, model=model, max_failed_saves=3)
    saver.step(1)
    saver.wait()
    full["on"] = True
    with caplog.at_level("ERROR", logger="hal.checkpoint"):
        saver.step(2)
        saver.step(3)          # waits for step 2's write: dropped, logged, no exception
        saver.wait()
    assert [i.step for i in ckpt.scan(tmp_path)] == [1], "a dropped save left a folder behind"
    assert caplog.text.count("No space left on device") == 2
    assert "2 of 3 saves in a row failed; training continues" in caplog.text
    events = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] == "save_failed"] == ["save_failed"] * 2
    saver.step(4)
    with pytest.raises(CheckpointError, match="3 saves in a row failed for lack of space"):
        saver.wait()
    full["on"] = False
    saver.step(5)             # space is back: saving works again and the count restarts
    saver.close()
    assert ckpt.latest(tmp_path).name == "step-00000005"
    assert saver.failed_saves == 0


def test_sync_checkpointer_keeps_last_n(tmp_path):
    with ckpt.Checkpointer(tmp_path, keep_last=2, async_save=False) as saver:
        for s in range(1, 5):
            saver.save(s, model=nn.Linear(2, 2))
            assert saver.last_path == tmp_path / f"step-{s:08d}"
    assert [i.step for i in ckpt.scan(tmp_path)] == [4, 3]


def test_bad_settings_are_refused():
    with pytest.raises(CheckpointError, match="keep_last=0: must be a positive int"):
        ckpt.Checkpointer("x", keep_last=0)
    with pytest.raises(CheckpointError, match="mode='zero'"):
        ckpt.Checkpointer("x", mode="zero")
