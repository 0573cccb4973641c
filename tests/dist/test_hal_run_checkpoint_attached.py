"""``hal run --checkpoint``: an unmodified script checkpointed from outside, killed by a rehearsed failure
(``HAL_CHECKPOINT_KILL_AT``), restarted by torchrun, and resumed to the uninterrupted run's losses bit
for bit -- its shuffled batches, dropout masks, momentum and LR schedule included."""
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from hal.checkpoint import read_events
from hal.cli import main

SCRIPT = Path(__file__).parent / "hal_run_scripts" / "shuffled_loader.py"


def _hal_run(args, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_METRICS", "HAL_CHECKPOINT"))}
    env.update(HAL_BACKEND="emu", HAL_METRICS_MAX_STEPS="10", **env_extra)
    p = subprocess.run([sys.executable, "-m", "hal", "run", "--quiet", *args, str(SCRIPT)], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_run_resumes_from_outside_to_the_same_losses_bit_for_bit(tmp_path):
    _hal_run(["--metrics", "plain"], {}, tmp_path)
    p = _hal_run(["--nproc-per-node", "1", "--max-restarts", "1", "--metrics", "killed", "--checkpoint", "ck",
                  "--checkpoint-every", "3"], {"HAL_CHECKPOINT_KILL_AT": "5"}, tmp_path)
    plain = {r["step"]: r["scalars"] for r in _records(tmp_path / "plain" / "run.jsonl")}
    assert sorted(plain) == list(range(1, 11))
    events = read_events(tmp_path / "ck")
    killed = next(e for e in events if e["event"] == "killed")
    resume = next(e for e in events if e["event"] == "resume" and e["attempt"] == 1)
    assert killed["step"] == 5 and resume["step"] == 3  # died at 5, the newest checkpoint was step 3's
    assert "resumed at step 3" in p.stderr and "2 step(s) to redo" in p.stderr
    after = [r for r in _records(tmp_path / "killed" / "run.jsonl") if r["time_unix"] > resume["time_unix"]]
    assert [r["step"] for r in after] == list(range(4, 11))  # the restarted script's own first step is not one
    for r in after:  # the loss of the batch that would have come, under the dropout mask that would have come
        assert r["scalars"]["loss"] == plain[r["step"]]["loss"], r["step"]
        assert r["scalars"]["lr"] == plain[r["step"]]["lr"]
    assert {r["scalars"]["lr"] for r in after} == {0.05, 0.025, 0.0125}  # the schedule went on, not over


def test_the_checkpoint_options_are_checked(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(0)\n")
    assert main(["run", "--checkpoint-every", "5", str(script)]) == 2
    assert "--checkpoint-every needs --checkpoint DIR" in capsys.readouterr().err
    assert main(["run", "--checkpoint", str(tmp_path / "ck"), "--checkpoint-every", "0", str(script)]) == 2
    assert "give a number of optimizer steps above 0" in capsys.readouterr().err


def test_a_script_that_checkpoints_itself_is_left_to_it_in_the_runs_folder(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(
        "import torch, hal.checkpoint\n"
        "model = torch.nn.Linear(4, 1).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "saver = hal.checkpoint.Checkpointer('own', every=2, model=model, optimizer=opt, async_save=False)\n"
        "ck = saver.resume()\n"
        "step = ck.step if ck else 0\n"
        "while step < 4:\n"
        "    model(torch.randn(8, 4, device='cuda')).pow(2).mean().backward()\n"
        "    opt.step(); opt.zero_grad()\n"
        "    step += 1\n"
        "    saver.step(step)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_METRICS", "HAL_CHECKPOINT"))}
    for _ in range(2):  # the second run resumes from the first's step 4, in the run's folder
        p = subprocess.run([sys.executable, "-m", "hal", "run", "--quiet", "--metrics", "m", "--checkpoint", "ck",
                            "--checkpoint-every", "1", str(script)], env=dict(env, HAL_BACKEND="emu"), cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    assert not (tmp_path / "own").exists()  # the folder the script asked for: each run keeps its own instead
    assert sorted(d.name for d in (tmp_path / "ck").glob("step-*")) == ["step-00000002", "step-00000004"]  # its every=2
    events = read_events(tmp_path / "ck")
    assert [e["dir"] for e in events if e["event"] == "script_checkpointer"] == ["own", "own"]
    assert [e["step"] for e in events if e["event"] == "resume"] == [4]
    steps = [r["step"] for r in _records(tmp_path / "m" / "run.jsonl")]
    assert steps == [1, 2, 3, 4]  # the resumed run had nothing left to do: no step 1 again


def test_a_bad_setting_is_one_line_and_a_script_without_modules_runs_on(capsys, monkeypatch, tmp_path):
    from hal.checkpoint import ATTACH_DIR_ENV, ATTACH_EVERY_ENV, KILL_AT_ENV

    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(0)\n")
    monkeypatch.setenv(ATTACH_DIR_ENV, "")  # restored after the test: hal run sets it for its processes
    log = logging.getLogger("hal.redirect")
    before = (log.level, log.propagate, list(log.handlers))
    for name, value in ((ATTACH_EVERY_ENV, "x"), (KILL_AT_ENV, "soon")):
        monkeypatch.setenv(name, value)
        assert main(["run", "--checkpoint", str(tmp_path / "ck"), str(script)]) == 3
        err = capsys.readouterr().err
        assert f"hal run: error: {name}={value!r}: give" in err and "Traceback" not in err
        monkeypatch.delenv(name)
    assert (log.level, log.propagate, list(log.handlers)) == before  # hal run called in a process leaves no handler
    # the optimizer steps bare tensors: nothing to checkpoint from outside, said once; the script trains on
    bare = tmp_path / "bare.py"
    bare.write_text("import torch\nw = torch.zeros(3, requires_grad=True, device='cuda')\n"
                    "opt = torch.optim.SGD([w], lr=0.1)\n"
                    "for _ in range(3):\n    (w - 1).pow(2).sum().backward(); opt.step(); opt.zero_grad()\n"
                    "print('trained', round(float(w[0]), 3))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_METRICS", "HAL_CHECKPOINT"))}
    p = subprocess.run([sys.executable, "-m", "hal", "run", "--quiet", "--checkpoint", "ck", "--checkpoint-every", "1",
                        str(bare)], env=dict(env, HAL_BACKEND="emu"), cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "trained 0.488" in p.stdout, p.stderr[-3000:]
    assert p.stderr.count("no nn.Module holds the optimizer's parameters") == 1 and "Traceback" not in p.stderr
    assert not list((tmp_path / "ck").glob("step-*"))
