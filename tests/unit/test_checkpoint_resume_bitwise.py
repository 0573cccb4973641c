"""Kill a real training run with SIGKILL after a checkpoint, resume it, and finish:
the final weights and the loss curve are bitwise those of an uninterrupted run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import hal.checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_tiny.py"
STEPS, SAVE_EVERY = 60, 20


def _cmd(out, *extra):
    return [sys.executable, str(SCRIPT), "--out", str(out), "--steps", str(STEPS),
            "--save-every", str(SAVE_EVERY), *extra]


def _env():
    env = dict(os.environ, HAL_BACKEND="cpu")
    env.pop(ckpt.CRASH_ENV, None)
    return env


def _losses(out):
    """{step: loss} from the metrics file; a resumed run's records replace the killed run's."""
    curve = {}
    for line in (out / "metrics" / "tiny.jsonl").read_text().splitlines():
        rec = json.loads(line)
        curve[rec["step"]] = (rec["scalars"]["loss"], rec["scalars"]["lr"])
    return curve


def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    ref_out, run_out = tmp_path / "uninterrupted", tmp_path / "killed"
    ref = subprocess.Popen(_cmd(ref_out), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = subprocess.Popen(_cmd(run_out, "--throttle", "0.05"), env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while ckpt.latest(run_out / "ckpt") is None:
        assert victim.poll() is None, "the run ended before its first checkpoint:\n" + victim.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    killed_at = max(_losses(run_out))
    assert killed_at < STEPS, "the run finished before the kill; nothing was resumed"

    resumed = subprocess.run(_cmd(run_out), env=_env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed from step" in resumed.stdout
    start = int(resumed.stdout.split("resumed from step ")[1].split()[0])
    assert SAVE_EVERY <= start <= killed_at

    text, _ = ref.communicate(timeout=120)
    assert ref.returncode == 0, text
    assert (run_out / "final.safetensors").read_bytes() == (ref_out / "final.safetensors").read_bytes()
    assert _losses(run_out) == _losses(ref_out)
    assert sorted(_losses(run_out)) == list(range(1, STEPS + 1))
