"""Random DTensors through `hal run` at 2 ranks on the emulator: DTensor's RNG tracker reads the device
generator's (seed, offset) state, as on CUDA (tests/dist/hal_run_scripts/dtensor_rng.py).  On cpu DTensor
keeps no tracker (both ranks draw their shards alike), so the emulator is the only backend here."""
import json
from pathlib import Path

import pytest

from test_hal_run_device_types import hal_run

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.emu]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "dtensor_rng.py"


def run(tmp_path, seed, name="run"):
    out = tmp_path / f"{name}.json"
    proc = hal_run("emu", "--nproc-per-node", 2, SCRIPT, out, seed)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((tmp_path / (out.name if r == 0 else f"{out.name}.{r}")).read_text()) for r in range(2)]


def test_random_dtensors_and_meta_init_under_fsdp2_agree_across_ranks(tmp_path):
    ranks = run(tmp_path, 0)
    for seen in ranks:
        assert seen["first"] == seen["again"]  # a seed reproduces every draw
        assert seen["fsdp_full"] == ranks[0]["fsdp_full"]
    first = [seen["first"] for seen in ranks]
    assert first[0]["full"] == first[1]["full"]
    # each rank drew its own shard (its offset moved to the shard's place), and the shards are the full tensor
    assert first[0]["local"] != first[1]["local"]
    assert first[0]["local"] + first[1]["local"] == first[0]["full"]
    # replicated tensors and dropout on a replicated activation: the same draw on every rank
    assert first[0]["replicated_local"] == first[1]["replicated_local"]
    assert first[0]["dropout_local"] == first[1]["dropout_local"] and 0.0 in first[0]["dropout_local"]
    # FSDP2 meta init: each rank initialised its own rows; HSDP's replicated parameters are equal everywhere
    weight = "0.weight"
    assert ranks[0]["fsdp_local"][weight] != ranks[1]["fsdp_local"][weight]
    assert ranks[0]["fsdp_local"][weight] + ranks[1]["fsdp_local"][weight] == ranks[0]["fsdp_full"][weight]
    assert ranks[0]["hsdp_local"] == ranks[1]["hsdp_local"]


@pytest.mark.long  # three 2-rank runs (about 60 s on 2 cores)
def test_the_same_seed_gives_the_same_tensors_in_another_run(tmp_path):
    one, two, other = run(tmp_path, 0, "one"), run(tmp_path, 0, "two"), run(tmp_path, 1, "other")
    assert one[0]["first"]["full"] == two[0]["first"]["full"]
    assert one[0]["fsdp_full"] == two[0]["fsdp_full"] and one[0]["hsdp_local"] == two[0]["hsdp_local"]
    assert one[0]["first"]["full"] != other[0]["first"]["full"]
