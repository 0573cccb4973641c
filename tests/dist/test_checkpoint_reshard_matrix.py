"""The longer resharding matrix (``make reshard``; marker ``reshard``, not in the default run).

Each case saves at one world size and layout and resumes at another (cpu/gloo; 4 -> 8 also on
the emulator, 8 devices), compared with the
uninterrupted run of the saving layout as in tests/dist/test_checkpoint_reshard.py: same
global batches in the same global order, losses and final parameters within rtol 1e-5
(float32), every sample of the epoch once.  Last, the stall of an asynchronous sharded save
(``Checkpointer.last_stall_s``, what the training loop waits for) against a synchronous one,
and the job relaunched by `hal run` (torchrun) with fewer ranks.
"""
import json
import statistics
from pathlib import Path

import pytest
import torch

from test_checkpoint_reshard import ATOL, EPOCH_STEPS, K, N, RTOL, global_order, run

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
