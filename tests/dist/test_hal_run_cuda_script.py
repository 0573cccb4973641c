"""`hal run` on an unmodified CUDA training script: cpu, emu, and DDP over nccl->emuccl at 2 ranks."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.emu]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "cuda_train.py")


def _hal_run(tmp_path, backend, *extra, metrics=None):
    out = tmp_path / f"{backend}{''.join(extra)}.json"
    report = tmp_path / f"report-{backend}{''.join(extra)}.json"
    if metrics:
        extra += ("--metrics", str(tmp_path / metrics))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env["HAL_BACKEND"] = backend
    proc = subprocess.run([sys.executable, "-m", "hal", "run", *extra, "--report", str(report), SCRIPT,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), json.loads(report.read_text()), proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halrun")
    return {"cpu": _hal_run(tmp, "cpu"), "emu": _hal_run(tmp, "emu"),
            "emu-ddp": _hal_run(tmp, "emu", "--nproc-per-node=2"),
            "cpu-ddp": _hal_run(tmp, "cpu", "--nproc-per-node=2", metrics="metrics-cpu-ddp"), "tmp": tmp}


def test_losses_on_the_emulator_match_the_cpu(runs):
    cpu, emu = runs["cpu"][0]["losses"], runs["emu"][0]["losses"]
    assert len(cpu) == len(emu) == 5
    for a, b in zip(cpu, emu):
        assert abs(a - b) <= 2e-3 * abs(a)  # bf16 autocast; the first step is exact
    assert cpu[0] == emu[0]
    assert cpu[-1] < cpu[0]


@pytest.mark.parametrize("run", ["emu-ddp", "cpu-ddp"])
def test_ddp_at_two_ranks_matches_the_single_process_run(runs, run):
    ddp, single = runs[run][0], runs["cpu"][0]
    assert ddp["world_size"] == 2
    for a, b in zip(ddp["losses"], single["losses"]):
        assert abs(a - b) <= 2e-3 * abs(a)


def test_report_names_the_redirections_and_the_ops_that_fell_back(runs):
    report = runs["emu"][1]
    calls = {r["call"] for r in report["redirected"]}
    assert {"Module.cuda()", "Tensor.cuda()", "torch.autocast('cuda')", "torch.cuda.manual_seed"} <= calls
    fell = {r["op"] for r in report["fallbacks"]}
    assert "aten::gelu" in fell  # GELU is outside the emulator's native op set
    assert report["backend"] == "emu" and report["exit_code"] == 0


def test_ddp_report_shows_nccl_redirected_to_the_backends_collective(runs):
    row = next(r for r in runs["emu-ddp"][1]["redirected"] if r["call"].startswith("process group backend"))
    assert "emuccl" in row["detail"]
    row = next(r for r in runs["cpu-ddp"][1]["redirected"] if r["call"].startswith("process group backend"))
    assert row["detail"] == "'gloo'"
    report = runs["emu-ddp"][1]
    assert any(r["call"].startswith("DistributedDataParallel") or r["call"] == "torch.cuda.set_device"
               for r in report["redirected"])


def test_hal_run_metrics_records_every_rank_of_the_ddp_script(runs):
    # hal.metrics attached from outside (--metrics): each rank's loss per step, whose mean is what the
    # script's own all-reduce printed, and the DDP model's all-reduces watched
    ranks = [[json.loads(line) for line in (runs["tmp"] / "metrics-cpu-ddp" / f"run.rank{r}.jsonl").read_text().splitlines()]
             for r in (0, 1)]
    assert [r["step"] for r in ranks[0]] == [1, 2, 3, 4, 5]
    mean = [(a["scalars"]["loss"] + b["scalars"]["loss"]) / 2 for a, b in zip(*ranks)]
    assert mean == pytest.approx(runs["cpu-ddp"][0]["losses"], rel=1e-5)
    assert all(r["comm_count"] for r in ranks[0][1:])
