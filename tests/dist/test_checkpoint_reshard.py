"""Sharded checkpoints (FSDP2 on cpu/gloo) resumed at another world size, against an uninterrupted run.

A 4-rank FSDP2 job (tests/dist/_reshard_worker.py: a 2-layer MLP, AdamW, StepLR, torch's own
DistributedSampler over 96 samples -- what most scripts use; the Checkpointer re-splits it as it
does hal's ElasticSampler, whose runs are in the matrix --, global batch 8, so 12 steps an epoch)
saves at steps 1, 3, 5
(keep_last=2) and trains on to step 14; a 2-rank job resumes from step 5 to step 14.  Ground truth is
the 4-rank run itself: the resumed job must train on the same global batches in the same
global order and reach the same losses (float32; the reductions run over 2 ranks instead of
4, so equal within rtol 1e-5).  Also: a rank killed before the commit and a full disk on one
rank leave no loadable half-checkpoint.  The longer matrix (2 -> 4, TP2 x DP2 -> DP4, sync vs
async stall) is tests/dist/test_checkpoint_reshard_matrix.py (make reshard).
"""
import errno
import json
from pathlib import Path

import pytest
import torch

import hal.checkpoint as ckpt
from hal.dist.launch import spawn

from fsdp2_support import WHY_NOT as _WHY_NOT

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

WORKER = str(Path(__file__).with_name("_reshard_worker.py")) + ":train"
ENV = {"HAL_BACKEND": "cpu"}
K, N, EPOCH_STEPS, GLOBAL_BATCH = 5, 14, 12, 8
RTOL, ATOL = 1e-5, 1e-6


def run(nproc, expect_ok=True, backend="cpu", **kwargs):
    res = spawn(WORKER, nproc, kwargs=kwargs, env={**ENV, "HAL_BACKEND": backend}, timeout=300)
    if expect_ok:
        assert res.ok, res.first_error() + "".join(r.stderr_tail[-1500:] for r in res.ranks)
    return res


def global_order(ranks, step):
    """The step's global batch in the global order: data-parallel rank r holds positions r, r + W, ..."""
    by_dp = {r.result["dp_rank"]: r.result["ids"][str(step)] for r in ranks}  # TP peers share a batch
    per_rank = [by_dp[d] for d in sorted(by_dp)]
    return [ids[i] for i in range(len(per_rank[0])) for ids in per_rank]


@pytest.fixture(scope="module")
def four_then_two(tmp_path_factory):
    root = tmp_path_factory.mktemp("reshard") / "ckpt"
    ref = run(4, root=str(root), steps=N, save_at=[1, 3, K], sampler="distributed")   # keep_last=2: step 1 goes
    resumed = run(2, root=str(root), steps=N, sampler="distributed")
    return root, ref.ranks, resumed.ranks


def test_resumed_at_2_ranks_trains_on_what_the_4_rank_run_had_left(four_then_two):
    _, ref, resumed = four_then_two
    assert resumed[0].result["resumed_from"] == K
    for step in range(K + 1, N + 1):
        assert global_order(resumed, step) == global_order(ref, step), f"step {step}: other samples"
        a, b = ref[0].result["losses"][str(step)], resumed[0].result["losses"][str(step)]
        assert b == pytest.approx(a, rel=RTOL, abs=ATOL), f"step {step}: loss {b} vs {a}"
    epoch0 = [i for s in range(1, K + 1) for i in global_order(ref, s)]
    epoch0 += [i for s in range(K + 1, EPOCH_STEPS + 1) for i in global_order(resumed, s)]
    assert sorted(epoch0) == list(range(96)), "a sample of epoch 0 was seen twice or missed"
    for name, want in ref[0].result["params"].items():
        torch.testing.assert_close(torch.tensor(resumed[0].result["params"][name]), torch.tensor(want),
                                   rtol=RTOL, atol=ATOL)


def test_each_rank_resumes_its_own_stateful_object(four_then_two):
    """states={"progress": ...}: saved by every rank with the sharded step, each rank's own back at 2 ranks."""
    _, ref, resumed = four_then_two
    for r in resumed:
        own = ref[r.rank].result["own_losses"][str(K)]
        assert r.result["progress_restored"] == {"rank": r.rank, "steps": K, "last_loss": own}, r.rank


def test_keep_last_applies_to_sharded_steps(four_then_two):
    root = four_then_two[0]
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step-")) == ["step-00000003", "step-00000005"]
    assert all(ckpt.is_complete(root / f"step-0000000{s}") for s in (3, K))


def test_the_manifest_lists_the_files_of_every_rank_as_dcp_recorded_them(four_then_two):
    """The names come from DCP's finish() on rank 0; each file is hashed by, and attributed to, its writer."""
    from torch.distributed.checkpoint import FileSystemReader

    step = four_then_two[0] / f"step-0000000{K}"
    files = json.loads((step / "manifest.json").read_text())["files"]
    shards = {name: e["rank"] for name, e in files.items() if name.startswith("dcp/") and name != "dcp/.metadata"}
    named = {md.relative_path for md in FileSystemReader(str(step / "dcp")).read_metadata().storage_data.values()}
    assert set(shards) == {f"dcp/{n}" for n in named}
    # DCP prefixes each rank's files with __<rank>_ (its naming, read here only to check who wrote what)
    assert sorted(shards.items()) == [(f"dcp/__{r}_0.distcp", r) for r in range(4)]
    assert files["dcp/.metadata"]["rank"] == 0


def test_the_resume_logs_one_line_saying_what_was_resharded(four_then_two):
    lines = [line for line in four_then_two[2][0].result["log"] if "resharded" in line]
    assert len(lines) == 1, four_then_two[2][0].result["log"]
    line = lines[0]
    assert "saved by 4 rank(s) [mesh (dp=4)" in line and "loaded by 2 [mesh (dp=2)" in line
    assert "RNG state of rank(s) 2, 3 dropped" in line
    assert f"epoch 0 resumes at sample {K * GLOBAL_BATCH} of 96" in line


def test_consolidate_writes_the_full_model_of_the_step_in_one_process(four_then_two, tmp_path):
    from safetensors.torch import load_file

    root, ref, _ = four_then_two
    out = ckpt.consolidate(root, tmp_path / "model.safetensors", step=K)
    full = load_file(out)
    want = ref[0].result["saved_params"][str(K)]
    assert sorted(full) == sorted(want)
    for name, values in want.items():
        assert torch.equal(full[name], torch.tensor(values)), name
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    plain.load_state_dict(full)  # the unsharded model takes it as is


def test_info_reports_world_size_layout_and_tensors(four_then_two):
    from hal.cli import main
    import contextlib
    import io

    root = four_then_two[0]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["checkpoint", "info", str(root), "--step", str(K), "--json", "--verify"]) == 0
    rep = json.loads(buf.getvalue())
    assert (rep["mode"], rep["world_size"], rep["step"]) == ("dcp", 4, K)
    assert rep["layout"]["meshes"] == [{"shape": [4], "dim_names": ["dp"], "placements": "S(0)", "parameters": 4}]
    assert rep["model"]["0.weight"] == {"shape": [16, 8], "dtype": "float32", "placements": "S(0)"}
    assert rep["optimizer"]["tensors"] == 12 and rep["holds"] == ["scheduler"] and rep["states"] == ["progress"]
    assert rep["data"]["position"] == K * GLOBAL_BATCH and rep["data"]["world_size"] == 4


def test_a_full_disk_then_a_killed_rank_leave_no_loadable_half_checkpoint(tmp_path):
    """Step 2 saves; at step 4 rank 1's disk is full (every rank drops the save and trains on);
    at step 6 rank 1 is SIGKILLed after writing its shards, before rank 0's commit."""
    root = tmp_path / "ckpt"
    res = run(2, expect_ok=False, root=str(root), steps=8, save_at=[2, 4, 6], full_disk_rank=1,
              crash_rank=1, crash_at="rank-files")
    assert res.ranks[1].returncode == -9, res.first_error()
    for rank in (0, 1):  # the full disk was reported on both ranks, and both trained on
        assert Path(f"{root}.rank{rank}.step4").read_text() == "1", rank
    failed = [e for e in ckpt._events.read(root) if e["event"] == "save_failed"]
    assert len(failed) == 1 and failed[0]["error"]["errno"] == errno.EFBIG, failed
    assert not (root / "step-00000004").exists()
    assert (root / "step-00000006" / "dcp").is_dir(), "the killed save never reached DCP"
    assert not ckpt.is_complete(root / "step-00000006")
    assert ckpt.latest(root) == root / "step-00000002"
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with pytest.warns(ckpt.CheckpointWarning, match="holds the state of 'progress'"):  # not given here
        ck = ckpt.load(root, model=plain, restore_rng=False)   # one process, no torch.distributed
    assert ck.step == 2 and [s.step for s in ck.skipped] == [6]


def test_a_changed_shard_is_refused_before_dcp_reads_it(four_then_two, tmp_path):
    import shutil

    step = tmp_path / f"step-0000000{K}"
    shutil.copytree(four_then_two[0] / step.name, step)
    shard = step / "dcp" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with pytest.raises(ckpt.CheckpointError, match=r"dcp/__1_0.distcp sha256 differs"):
        ckpt.load(step, model=plain)
    with pytest.raises(ckpt.CheckpointError, match="sha256 differs"):
        ckpt.consolidate(step, tmp_path / "model.safetensors")
    assert ckpt.latest(tmp_path, verify=True) is None
