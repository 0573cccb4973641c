"""emuccl, the emulator's out-of-tree c10d backend, at 2 ranks (real processes, real gloo)."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.emu]
WORKER = os.path.join(os.path.dirname(__file__), "_emu_ddp_worker.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emuccl")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, WORKER, str(tmp / f"r{r}.json")],
                              env={**env, "RANK": str(r)}, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    errs = [p.communicate(timeout=180)[1] for p in procs]
    for p, err in zip(procs, errs):
        assert p.returncode == 0, err[-2000:]
    return [json.loads((tmp / f"r{r}.json").read_text()) for r in range(2)]


def test_allreduce_sums_across_ranks(two_ranks):
    for out in two_ranks:
        assert out["allreduce"] == [3.0] * 4


def test_ddp_gradients_equal_the_full_batch_gradient(two_ranks):
    for out in two_ranks:
        torch.testing.assert_close(torch.tensor(out["ddp_grad"]), torch.tensor(out["ref_grad"]),
                                   rtol=1e-5, atol=1e-6)


def test_group_runs_on_the_registered_backend(two_ranks):
    assert all("emuccl" in out["group_backend"] for out in two_ranks)


def test_sync_batch_norm_equals_batch_norm_over_the_full_batch(two_ranks):
    for out in two_ranks:
        for mine, ref in (("syncbn_out", "bn_out"), ("syncbn_grad_x", "bn_grad_x"),
                          ("syncbn_grad_w", "bn_grad_w"), ("syncbn_running_mean", "bn_running_mean")):
            torch.testing.assert_close(torch.tensor(out[mine]), torch.tensor(out[ref]), rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{mine} vs {ref}: {m}")


def test_a_reused_tensor_whose_storage_or_layout_changed_is_gathered_from_its_current_bytes(two_ranks):
    # emuccl keeps each emu tensor's host view between calls (tests/dist/_emu_ddp_worker.py changes
    # the tensors between all_gather_into_tensor calls): no stale view, no device memory kept
    views = two_ranks[0]["host_views"]
    assert views == two_ranks[1]["host_views"]
    assert views["first"] == [1.0] * 4 + [2.0] * 4
    assert views["storage_resized"] == [11.0] * 4 + [12.0] * 4
    assert views["input_set"] == views["output_data_swapped"] == [100.0] * 4 + [101.0] * 4
    assert views["output_reshaped"] == [[100.0] * 4, [101.0] * 4]
    assert views["input_restrided"] == [100.0, 100.0, 101.0, 101.0]
    assert views["bytes_kept_after_del"] == 0
