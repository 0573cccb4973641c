"""The parts of c10d a framework touches, through `hal run` at 2 ranks on cpu (gloo: the
ground truth) and on the emulator (emuccl, a Python process group as an out-of-tree CCL may
be): group names, `init_process_group(device_id=...)`, `new_group`, `init_device_mesh("cuda")`,
DTensor, FSDP2 against one process, DCP, and NCCL's `ReduceOp.PREMUL_SUM` (hal's gloo path on cpu,
emuccl's own on the emulator) in every collective that takes an op
(tests/dist/hal_run_scripts/c10d_parts.py and premul_sum.py).  One `hal run` per backend."""
import json
import math
from pathlib import Path

import pytest

from test_hal_run_device_types import hal_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "c10d_parts.py"


@pytest.fixture(scope="module", params=["cpu", pytest.param("emu", marks=pytest.mark.emu)])
def ranks(request, tmp_path_factory):
    """(backend, what each of the 2 ranks saw)."""
    tmp = tmp_path_factory.mktemp(f"c10d-{request.param}")
    proc = hal_run(request.param, "--nproc-per-node", 2, SCRIPT, tmp / "out.json", tmp / "ckpt")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return request.param, [json.loads((tmp / ("out.json" if r == 0 else f"out.json.{r}")).read_text())
                           for r in range(2)]


def test_device_mesh_dtensor_fsdp2_and_dcp_at_two_ranks(ranks):
    backend, seen_by = ranks
    for r, seen in enumerate(seen_by):
        assert seen["group_name"] == "0" and seen["new_group_name"] == "1"
        assert seen["mesh"] == [backend, "0"]
        assert seen["dtensor"] == [[4.0 * r + i for i in range(4)], [float(i) for i in range(8)]]
        # FSDP2 over 2 ranks trains as one process does on the whole batch
        assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(seen["fsdp"], seen["single"])), seen
        assert seen["dcp_restored"] is True and seen["local_device"] == backend


def _data(n, r):
    """What premul_sum.py's rank r feeds a collective of n elements."""
    return [i * (r + 1) + 10.0 * r for i in range(n)]


def _premul_sum(n, factors, offset=0):
    """The sum over ranks of each rank's factor times its data: what PREMUL_SUM must give."""
    return [sum(f * (_data(n, r)[i] + offset) for r, f in enumerate(factors)) for i in range(n)]


HALF, PER_RANK = [0.5, 0.5], [0.25, 0.5]   # PREMUL_SUM(0.5); a tensor factor of 0.25 * (rank + 1)


def _mine(values, r, n):
    return values[r * n:(r + 1) * n]


def test_premul_sum_in_every_collective_that_takes_an_op(ranks):
    # gloo alone raises "Cannot use ReduceOp.PREMUL_SUM with Gloo" at each of these
    _, seen_by = ranks
    for r, s in enumerate(seen_by):
        p = s["premul_sum"]
        assert p["reduce_scatter_tensor"] == _mine(_premul_sum(8, HALF), r, 4)
        assert p["rs_input_after"] == _data(8, r)      # the caller's input is left as it was
        assert p["reduce_scatter_tensor_async_tensor_factor"] == _mine(_premul_sum(8, PER_RANK), r, 4)
        assert p["reduce_scatter_single"] == _mine(_premul_sum(6, HALF), r, 3)
        assert p["all_reduce"] == p["all_reduce_bf16"] == _premul_sum(5, HALF)
        assert p["all_reduce_async_tensor_factor"] == _premul_sum(5, PER_RANK)
        assert p["reduce"] == (_premul_sum(5, HALF) if r == 0 else None)
        assert p["reduce_scatter"] == _premul_sum(2, PER_RANK, offset=r)
        assert p["reduce_scatter_inputs_after"] == [[x + j for x in _data(2, r)] for j in range(2)]
        assert p["all_reduce_coalesced"] == [_premul_sum(3, HALF), _premul_sum(2, HALF)]
        assert p["coalesced_reduce_scatter_tensor"] == [_mine(_premul_sum(4, HALF), r, 2),
                                                        _mine(_premul_sum(6, HALF), r, 3)]
        assert p["coalesced_all_reduce"] == [_premul_sum(2, HALF), _premul_sum(3, HALF)]
        # FSDP2's default op, and SUM, as they were
        assert p["reduce_scatter_tensor_avg"] == _mine(_premul_sum(8, HALF), r, 4)
        assert p["all_reduce_sum"] == _premul_sum(5, [1, 1])
        # as on NCCL, whose premul-sum takes floating-point data alone: an error that says so
        assert "PREMUL_SUM on a torch.int64 tensor" in p["int64_error"] and "ReduceOp.SUM" in p["int64_error"]


def test_fsdp2_with_a_gradient_divide_factor_matches_one_process(ranks):
    _, seen_by = ranks
    for s in seen_by:
        fsdp, single = s["premul_sum"]["fsdp_grads"], s["premul_sum"]["one_process_grads"]
        assert [len(g) for g in fsdp] == [len(g) for g in single]
        for a, b in zip(fsdp, single):
            assert all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-7) for x, y in zip(a, b)), (a, b)
