"""hal checkpoint ls: which checkpoint resume would use, and why not the others."""
import json

import torch

import hal.checkpoint as ckpt
from hal.cli import main


def _folder(tmp_path):
    for s in (1, 2, 3):
        ckpt.save(tmp_path, s, model=torch.nn.Linear(64, 64))
    (tmp_path / "step-00000003" / "manifest.json").unlink()
    return tmp_path


def test_ls_marks_what_resume_uses_and_the_reasons(tmp_path, capsys):
    assert main(["checkpoint", "ls", str(_folder(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(" 3") and "incomplete" in out[1] and "no manifest.json" in out[1]
    assert out[2].startswith("*2") and "complete" in out[2] and "KiB" in out[2]
    assert "latest pointer: step-00000003" in out[-1] and "resume uses: " + str(tmp_path / "step-00000002") in out[-1]


def test_ls_json_agrees_with_resume(tmp_path, capsys):
    root = _folder(tmp_path)
    assert main(["checkpoint", "ls", str(root), "--json", "--verify"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "hal.checkpoint.ls/1" and rep["verified"]
    assert [(c["step"], c["complete"], c["resume_uses"]) for c in rep["checkpoints"]] == [
        (3, False, False), (2, True, True), (1, True, False)]
    assert rep["resume_uses"] == str(ckpt.resume(root, model=torch.nn.Linear(64, 64)).path)


def test_ls_of_nothing_exits_1(tmp_path, capsys):
    assert main(["checkpoint", "ls", str(tmp_path / "missing")]) == 1
    assert "no such folder; resume would start from scratch" in capsys.readouterr().out


def test_events_tell_why_a_job_restarted(tmp_path, capsys, monkeypatch):
    """A loop that fails inside ``with saver:`` and a restarted one that resumes: the history reads back."""
    model = torch.nn.Linear(2, 2)
    saver = ckpt.Checkpointer(tmp_path, every=2, model=model, async_save=False)
    assert saver.resume() is None
    try:
        with saver:
            for step in range(1, 6):
                saver.step(step)
                if step == 3:
                    raise RuntimeError("the loss went NaN")
    except RuntimeError:
        pass
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    again = ckpt.Checkpointer(tmp_path, every=2, model=model, async_save=False)
    assert again.resume().step == 2
    again.close()
    assert main(["checkpoint", "events", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "failure     rank 0  attempt 0  step 3  RuntimeError: the loss went NaN" in out
    assert "resume      rank 0  attempt 1  step 2" in out
    assert "rank 0 failed at step 3" in out and "resumed at step 2" in out and "1 step(s) to redo" in out
    assert main(["checkpoint", "events", str(tmp_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [e["event"] for e in rep["events"]] == ["start", "failure", "resume"]
    assert main(["checkpoint", "events", str(tmp_path / "nothing")]) == 1
