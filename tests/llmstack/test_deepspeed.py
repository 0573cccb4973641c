"""DeepSpeed, the HF Trainer's ``deepspeed=`` and Accelerate's DeepSpeed plugin, run as their users run them
(tests/llmstack/deepspeed.json), through ``hal run`` on cpu and emu against DeepSpeed's own CPU run.

Every entry runs at 2 ranks through ``hal run --nproc-per-node 2`` and its losses must equal, step for step,
the references its ``compare`` names (plain ``DS_ACCELERATOR=cpu torchrun``: DeepSpeed without hal).  A
universal checkpoint saved at 2 ranks resumes at 1 (``ds_to_universal``).  The whole matrix is
``make llmstack``; ``make test`` runs CI_SUBSET.
"""
import os
import subprocess
import sys

import pytest

import check_llmstack as ls  # tests/llmstack/check_llmstack.py (pytest puts this folder on sys.path)

ENTRIES = {n: e for n, e in ls.entries().items() if e["stack"] == "deepspeed"}
#: what `make test` runs (about 40 s on 2 cores): ZeRO-3 under zero.Init with GatheredParameters and torch's
#: AdamW on the emulator, against DeepSpeed's own CPU run
CI_SUBSET = {("ds_zero3_torch_adam", "emu")}
pytestmark = pytest.mark.skipif(ls.missing_requirement({"requires": ["deepspeed"]}) is not None,
                                reason="DeepSpeed is not installed (scripts/setup.sh installs it: pyproject's "
                                       "llmstack extra)")
_runs = {}


def _run(name, mode, cwd=None):
    if cwd is not None:
        return ls.run(ENTRIES[name], mode, cwd=cwd)
    if (name, mode) not in _runs:
        _runs[(name, mode)] = ls.run(ENTRIES[name], mode)
    return _runs[(name, mode)]


def _cases():
    for name, e in ENTRIES.items():
        for mode in ("cpu", "emu"):
            marks = [] if (name, mode) in CI_SUBSET else [pytest.mark.llmstack]
            if mode == "emu":
                marks.append(pytest.mark.emu)
            yield pytest.param(name, mode, marks=marks, id=f"{name}-{mode}")


def test_manifests_are_consistent():
    assert ls.validate() == []
    assert len(ENTRIES) >= 8


@pytest.mark.parametrize("name, mode", list(_cases()))
def test_recipe_matches_its_reference(name, mode):
    entry = ENTRIES[name]
    got = _run(name, mode)
    assert not got["problems"], f"{name} on {mode}: {got['problems']}\n" + "\n".join(got["stderr_tail"])
    for pair in entry["compare"]:
        a, _, b = pair.partition("=")
        if a != mode:
            continue
        ref = _run(name, b)
        assert not ref["problems"], f"{name} {b} (the reference): {ref['problems']}\n" + "\n".join(ref["stderr_tail"])
        assert ls.compare(got, ref, entry.get("rtol", ls.RTOL)) == []


def _universal(entry_name, mode, tmp_path):
    """Train at 2 ranks saving at step 3, convert that checkpoint with ds_to_universal, resume it at 1 rank:
    the losses of steps 3.. of both runs."""
    entry = ENTRIES[entry_name]
    whole = _run(entry_name, mode, cwd=str(tmp_path))
    assert not whole["problems"], whole["problems"]
    conv = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                           "ckpt/global_step3", "--output_folder", "ckpt/global_step3_universal",
                           "--inject_missing_state"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert conv.returncode == 0, conv.stderr[-3000:]
    args = [a for a in entry["args"] if a not in ("--save-at", "3")] + ["--load", "ckpt", "--universal"]
    resumed = ls.run(dict(entry, args=args, nproc_per_node=1, checks=["resumed at step 3 from ckpt"]), mode,
                     cwd=str(tmp_path))
    assert not resumed["problems"], resumed["problems"]
    return whole["losses"][3:], resumed["losses"]


@pytest.mark.llmstack
@pytest.mark.parametrize("mode", ["cpu", pytest.param("emu", marks=pytest.mark.emu)])
@pytest.mark.parametrize("name", ["ds_zero2_save_load", "ds_zero3_save_load"])
def test_universal_checkpoint_resumes_at_another_world_size(name, mode, tmp_path):
    before, after = _universal(name, mode, tmp_path)
    assert len(after) == len(before) == 3
    # 1 rank against 2: the gradient reduction sums in another order (1e-7 measured)
    assert ls.corpus.max_rel_diff(after, before) <= 1e-5, (before, after)


REPRO = "import torch\nfrom deepspeed.ops.adam import FusedAdam\n" \
        "FusedAdam([torch.nn.Parameter(torch.zeros(2, device=\"cuda\"))])\nprint(\"built\")\n"


@pytest.mark.parametrize("mode", [pytest.param("cpu", marks=pytest.mark.llmstack),
                                  pytest.param("emu", marks=pytest.mark.emu)])
def test_fused_adam_of_a_cuda_script_builds_on_the_backend(mode, tmp_path):
    """DeepSpeed's FusedAdam constructed as a CUDA script does: DeepSpeed gets the backend's accelerator, so no
    CUDA extension is compiled (on cpu DeepSpeed's own CPU build of it: minutes the first time, so make llmstack)."""
    script = tmp_path / "fused_adam.py"
    script.write_text(REPRO)
    hal = [sys.executable, "-m", "hal", "run", str(script)]
    p = subprocess.run(hal, env=dict(os.environ, HAL_BACKEND=mode), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "built" in p.stdout, p.stderr[-3000:]
    assert "CUDA_HOME" not in p.stderr
