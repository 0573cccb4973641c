"""Every checked collective gives the right values on 2 and 4 real gloo ranks."""
from pathlib import Path

import pytest

from hal.dist.launch import spawn

SCEN = str(Path(__file__).with_name("scenarios.py"))
pytestmark = [pytest.mark.dist]


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_correct(n):
    res = spawn(f"{SCEN}:collectives", n, timeout=90, env={"HAL_BACKEND": "cpu"})
    assert res.ok, res.first_error()
    for r, out in enumerate(o.result for o in res.ranks):
        assert out["rank"] == r and out["world_size"] == n
        assert out["all_reduce"] == [n * (n + 1) / 2] * 3
        assert out["all_gather"] == [v for k in range(n) for v in (k, k + 0.5)]
        # input on rank k is arange(2n) * (k + 1); rank r keeps the sum of chunk r
        total = sum(k + 1 for k in range(n))
        assert out["reduce_scatter"] == [(2 * r) * total, (2 * r + 1) * total]
        # ReduceOp.AVG, through hal.dist and through torch.distributed's own function (FSDP2's call)
        assert out["reduce_scatter_avg"] == [(2 * r) * total / n, (2 * r + 1) * total / n]
        assert out["reduce_scatter_avg_torch"] == [(2 * r) * total / n, (2 * r + 1) * total / n]
        assert out["broadcast"] == [7.0, 8.0]
        assert out["all_to_all"] == [10 * k + r for k in range(n)]
