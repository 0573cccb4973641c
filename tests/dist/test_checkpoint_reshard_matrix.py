"""The longer resharding matrix (``make reshard``; marker ``reshard``, not in the default run).

Each case saves at one world size and layout and resumes at another (cpu/gloo; 4 -> 8 also on
the emulator, 8 devices), compared with the
uninterrupted run of the saving layout as in tests/dist/test_checkpoint_reshard.py: same
global batches in the same global order, losses and final parameters within rtol 1e-5
(float32), every sample of the epoch once.  Last, the stall of an asynchronous sharded save
(``Checkpointer.last_stall_s``, what the training loop waits for) against a synchronous one,
the job relaunched by `hal run` (torchrun) with fewer ranks, an elastic torchrun job
(``--nnodes 1:2``) that loses a node and resumes at the smaller size, and torch's own
DistributedSampler re-split 2 -> 4 and 3 -> 2 (with and without drop_last; 4 -> 2 is in the
default run).
"""
import json
import os
import signal
import statistics
from pathlib import Path

import pytest
import torch

from fault_injection import descendants
from hal.dist.launch import spawn
from test_checkpoint_reshard import ATOL, ENV, EPOCH_STEPS, K, N, RTOL, global_order, run

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.reshard]

CASES = [  # (ranks, layout) saved -> (ranks, layout) resumed, DataLoader workers per rank, backend
    ((4, "fsdp"), (2, "fsdp"), 0, "cpu"),
    ((4, "fsdp"), (2, "fsdp"), 2, "cpu"),
    ((2, "fsdp"), (4, "fsdp"), 0, "cpu"),
    ((4, "fsdp"), (8, "fsdp"), 0, "cpu"),
    ((4, "tp_dp"), (4, "fsdp"), 0, "cpu"),
    ((4, "fsdp"), (4, "tp_dp"), 0, "cpu"),
    pytest.param((4, "fsdp"), (8, "fsdp"), 0, "emu", marks=pytest.mark.emu),
]


def _id(case):
    (w, a), (v, b), n, backend = case.values if hasattr(case, "values") else case
    return f"{backend}-{a}{w}-to-{b}{v}-workers{n}"


@pytest.mark.parametrize("saved,resumed,workers,backend", CASES, ids=[_id(c) for c in CASES])
def test_resume_at_another_world_size_or_layout(tmp_path, saved, resumed, workers, backend):
    root = tmp_path / "ckpt"
    ref = run(saved[0], root=str(root), steps=N, save_at=[K], layout=saved[1], workers=workers,
              backend=backend).ranks
    res = run(resumed[0], root=str(root), steps=N, layout=resumed[1], workers=workers, backend=backend).ranks
    assert res[0].result["resumed_from"] == K
    for r in res:  # states={"progress": ...}: each rank its own; a rank that did not exist at the save, rank 0's
        got = r.result["progress_restored"]
        assert (got["rank"], got["steps"]) == (r.rank if r.rank < saved[0] else 0, K), (r.rank, got)
    worst = 0.0
    for step in range(K + 1, N + 1):
        assert global_order(res, step) == global_order(ref, step), f"step {step}: other samples"
        a, b = ref[0].result["losses"][str(step)], res[0].result["losses"][str(step)]
        assert b == pytest.approx(a, rel=RTOL, abs=ATOL), f"step {step}: loss {b} vs {a}"
        worst = max(worst, abs(a - b) / abs(a))
    epoch0 = [i for s in range(1, K + 1) for i in global_order(ref, s)]
    epoch0 += [i for s in range(K + 1, EPOCH_STEPS + 1) for i in global_order(res, s)]
    assert sorted(epoch0) == list(range(96))
    for name, want in ref[0].result["params"].items():
        torch.testing.assert_close(torch.tensor(res[0].result["params"][name]), torch.tensor(want),
                                   rtol=RTOL, atol=ATOL)
    print(f"\n{backend}: {saved} -> {resumed}, {workers} workers: worst relative loss difference {worst:.2e}; "
          f"log: {[line for line in res[0].result['log'] if 'resharded' in line]}")


def test_async_stall_against_a_synchronous_save(tmp_path):
    saves = [2, 4, 6, 8]
    stall = {}
    for mode in (False, True):
        ranks = run(4, root=str(tmp_path / f"async-{mode}"), steps=8, save_at=saves, async_save=mode).ranks
        stall[mode] = statistics.median(s for r in ranks for s in r.result["stalls"][1:])
    ratio = stall[True] / stall[False]
    print(f"\nsharded save, 4 ranks, median stall: sync {stall[False] * 1e3:.1f} ms, "
          f"async {stall[True] * 1e3:.1f} ms (ratio {ratio:.2f})")
    assert ratio < 1.0, stall


def test_hal_run_relaunched_with_fewer_ranks_resumes_resharded(tmp_path):
    """The same job as a script under `hal run` (torchrun): 4 ranks to step 14 saving at 5, then
    relaunched with --nproc-per-node 2 from step 5: the uninterrupted run's batches and losses."""
    from types import SimpleNamespace

    from test_hal_run_device_types import hal_run

    script = Path(__file__).parent / "hal_run_scripts" / "reshard_job.py"
    root = tmp_path / "ckpt"
    for nproc, tag, extra in ((4, "ref", [str(K)]), (2, "res", [])):
        proc = hal_run("cpu", "--nproc-per-node", nproc, script, root, tmp_path / tag, N, *extra)
        assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = {tag: [SimpleNamespace(result=json.loads((tmp_path / f"{tag}.{r}").read_text())) for r in range(n)]
             for tag, n in (("ref", 4), ("res", 2))}
    assert ranks["res"][0].result["resumed_from"] == K
    for step in range(K + 1, N + 1):
        assert global_order(ranks["res"], step) == global_order(ranks["ref"], step)
        a, b = ranks["ref"][0].result["losses"][str(step)], ranks["res"][0].result["losses"][str(step)]
        assert b == pytest.approx(a, rel=RTOL, abs=ATOL), f"step {step}: loss {b} vs {a}"
    assert any("resharded" in line and "RNG state of rank(s) 2, 3 dropped" in line
               for line in ranks["res"][0].result["log"])


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_torchrun_elastic_job_that_loses_a_node_resumes_at_the_smaller_size(tmp_path):
    """Two torchrun agents on 127.0.0.1 (`--nnodes 1:2 --rdzv-backend c10d --max-restarts 1`, one
    rank each) run the FSDP2 job, saving sharded at step 5; at step 7 the second agent's node is
    killed (agent and rank, SIGKILL).  The first agent's rank fails its next collective, the agent
    re-forms the job with the one node left, and the job resumes from step 5 at world size 1 to
    step 14: the same global batches and losses as an uninterrupted 2-rank run."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    script = Path(__file__).parent / "hal_run_scripts" / "elastic_job.py"
    root, out, hold = tmp_path / "ckpt", tmp_path / "out", K + 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HAL_BACKEND": "cpu"}
    agents, logs = [], []
    for host in (1, 0):  # the first agent hosts the rendezvous store: the node that stays
        logs.append(open(tmp_path / f"agent{len(agents)}.log", "w"))
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "1",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "elastic",
             "--rdzv-conf", f"is_host={host},last_call_timeout=3", "--max-restarts", "1",
             "--monitor-interval", "0.5", str(script), str(root), str(out), str(N), str(K), str(hold)],
            env=env, stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(2 if host else 0)
    try:
        deadline = time.monotonic() + 240
        while not Path(f"{out}.holding").exists():
            assert time.monotonic() < deadline and agents[0].poll() is None, (tmp_path / "agent0.log").read_text()
            time.sleep(0.2)
        # the second node goes, agent and rank (torchrun starts its worker in a session of its own)
        for pid in [agents[1].pid, *descendants(agents[1].pid)]:
            _kill(pid)
        agents[1].wait(timeout=30)
        assert agents[0].wait(timeout=300) == 0, (tmp_path / "agent0.log").read_text()[-4000:]
    finally:
        for a in agents:
            for pid in descendants(a.pid):
                _kill(pid)
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
        for f in logs:
            f.close()
    res = [SimpleNamespace(result=json.loads(Path(f"{out}.0").read_text()))]
    assert (res[0].result["attempt"], res[0].result["world"], res[0].result["resumed_from"]) == (1, 1, K)
    assert any("saved by 2 rank(s)" in line and "loaded by 1" in line and "data position re-split" in line
               for line in res[0].result["log"]), res[0].result["log"]
    assert any(f"rank 0 failed at step {hold}" in line for line in res[0].result["log"]), res[0].result["log"]
    assert any(f"rank 1 sent no report (last step seen: {hold})" in line for line in res[0].result["log"])
    assert any(f"resumed at step {K}" in line and f"{hold - K} step(s) to redo" in line
               for line in res[0].result["log"])
    ref = run(2, root=str(tmp_path / "ref"), steps=N, save_at=[K], async_save=False).ranks
    for step in range(K + 1, N + 1):
        assert global_order(res, step) == global_order(ref, step), f"step {step}: other samples"
        a, b = ref[0].result["losses"][str(step)], res[0].result["losses"][str(step)]
        assert b == pytest.approx(a, rel=RTOL, abs=ATOL), f"step {step}: loss {b} vs {a}"
    for name, want in ref[0].result["params"].items():
        torch.testing.assert_close(torch.tensor(res[0].result["params"][name]), torch.tensor(want),
                                   rtol=RTOL, atol=ATOL)
    print("\n" + "\n".join(res[0].result["log"]))


SAMPLER_JOB = str(Path(__file__).with_name("_reshard_worker.py")) + ":distributed_sampler"


@pytest.mark.parametrize("old,new,drop_last", [(2, 4, False), (3, 2, False), (3, 2, True)])
def test_torchs_distributed_sampler_resumes_at_another_world_size(tmp_path, old, new, drop_last):
    """torch's DistributedSampler over 100 samples (uneven at 3 ranks), global batch 12: 4 steps at
    ``old`` ranks, saved; resumed at ``new`` ranks: epoch 0's samples once each (drop_last: but the
    new split's tail), then epoch 1 exactly as a DistributedSampler at ``new`` ranks orders it."""
    from torch.utils.data import DistributedSampler

    n, batch, root = 100, 12, str(tmp_path / "ckpt")
    kw = dict(root=root, n=n, global_batch=batch, drop_last=drop_last)
    before = spawn(SAMPLER_JOB, old, kwargs=dict(kw, steps=4, save_at=[4]), env=ENV, timeout=300)
    after = spawn(SAMPLER_JOB, new, kwargs=dict(kw, steps=40), env=ENV, timeout=300)
    assert before.ok and after.ok, before.first_error() + after.first_error()

    def seen(res, epoch):
        return [i for r in res.ranks for s, ids in r.result["ids"].items() if r.result["epochs"][s] == epoch
                for i in ids]
    first, rest = seen(before, 0), seen(after, 0)
    assert len(first) == 4 * batch and not set(first) & set(rest), "a sample of epoch 0 came twice"
    missed = n - len(set(first) | set(rest))
    assert missed == ((n - 4 * batch) % new if drop_last else 0), f"{missed} sample(s) of epoch 0 never came"
    for r in after.ranks:
        ds = DistributedSampler(range(n), num_replicas=new, rank=r.rank, shuffle=True, seed=11, drop_last=drop_last)
        ds.set_epoch(1)
        took = [i for s, ids in sorted(r.result["ids"].items(), key=lambda kv: int(kv[0]))
                if r.result["epochs"][s] == 1 for i in ids]
        assert took == list(ds), f"rank {r.rank}: epoch 1 is not DistributedSampler's order at {new} ranks"
    assert any("data position re-split" in line for line in after.ranks[0].result["log"])
