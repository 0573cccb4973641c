"""SIGKILL at any point of a save never leaves a checkpoint that resume takes as complete.

Each case runs a real process that saves step 1, then saves step 2 with
HAL_CHECKPOINT_CRASH_AT naming the point where it kills itself with SIGKILL.
"""
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt
from hal.checkpoint import CRASH_ENV, CRASH_POINTS

CHILD = textwrap.dedent("""
    import os, sys, torch
    import hal.checkpoint as ckpt
    root, point = sys.argv[1], sys.argv[2]
    model = torch.nn.Linear(256, 256)       # 256 KiB of weights: the tensor file takes many chunks
    with torch.no_grad():
        model.weight.fill_(1.0)
    ckpt.save(root, 1, model=model, keep_last=1)
    with torch.no_grad():
        model.weight.fill_(2.0)
    os.environ["{env}"] = point
    ckpt.save(root, 2, model=model, keep_last=1)
    print("save finished without being killed", flush=True)
""").format(env=CRASH_ENV)

#: crash point -> the step resume must pick afterwards
EXPECTED = {
    "tensors-partial": 1, "tensors-unrenamed": 1, "rank-files": 1, "manifest-partial": 1,
    "manifest-committed": 2, "retention": 2,
}


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """Run every crash point in parallel (one process each); return {point: (root, returncode, output)}."""
    assert set(EXPECTED) == set(CRASH_POINTS), "a new crash point needs an expectation here"
    base = tmp_path_factory.mktemp("kill")
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["HAL_BACKEND"] = "cpu"
    procs = {}
    for point in CRASH_POINTS:
        root = base / point
        procs[point] = (root, subprocess.Popen([sys.executable, "-c", CHILD, str(root), point], env=env,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = {}
    for point, (root, p) in procs.items():
        text, _ = p.communicate(timeout=120)
        out[point] = (root, p.returncode, text)
    return out


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_during_save_resumes_from_a_complete_checkpoint(killed, point):
    root, rc, text = killed[point]
    assert rc == -signal.SIGKILL, f"the saver was not killed at {point}: rc={rc}\n{text}"
    model = nn.Linear(256, 256)
    ck = ckpt.resume(root, model=model)
    want = EXPECTED[point]
    assert ck is not None and ck.step == want
    assert torch.all(model.weight == float(want))
    if want == 1:
        assert [s.step for s in ck.skipped] == [2]
        assert "no manifest.json" in ck.skipped[0].reason


def test_partial_kill_really_stopped_mid_file(killed):
    root, _, _ = killed["tensors-partial"]
    tmp = [p for p in (root / "step-00000002").iterdir() if p.name.endswith(".tmp")]
    assert len(tmp) == 1 and tmp[0].name.startswith(".rank-00000.safetensors.")
    full = (root / "step-00000001" / "rank-00000.safetensors").stat().st_size
    assert 0 < tmp[0].stat().st_size < full


def test_after_a_crash_the_next_save_cleans_up_and_commits(killed):
    root, _, _ = killed["tensors-partial"]
    model = nn.Linear(256, 256)
    ckpt.resume(root, model=model)
    ckpt.save(root, 2, model=model, keep_last=1)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000002"]
    assert not [p for p in (root / "step-00000002").iterdir() if p.name.endswith(".tmp")]
    assert ckpt.latest(root, verify=True) == root / "step-00000002"
