"""`hal conformance`'s ccl check on cpu (gloo) and on the emulator (emuccl), 2 ranks: every c10d op
of the list gives what gloo gives on the same CPU data; a skip names the torch behaviour behind it."""
import os

import pytest

from hal.conformance import op_ids, run_conformance

pytestmark = [pytest.mark.dist]

#: ops that cannot apply on a backend here, and the words their reason must contain
KNOWN_SKIPS = {"cpu": {"eager_init": "device_id only for an accelerator",
                       "split_group": "torch.accelerator.is_available() is False"}}


@pytest.mark.parametrize("backend", ["cpu", pytest.param("emu", marks=pytest.mark.emu)])
def test_every_ccl_op_agrees_with_gloo(backend):
    report = run_conformance(backend, only=["ccl"])
    row = next(r for r in report["checks"] if r["id"] == "ccl")
    ops = {o["id"]: o for o in row["ops"]}
    assert list(ops) == op_ids()
    failed = {k: o["error"] for k, o in ops.items() if o["status"] == "failed"}
    assert failed == {}
    skipped = {k: o["error"] for k, o in ops.items() if o["status"] == "skipped"}
    expected = KNOWN_SKIPS.get(backend, {})
    assert set(skipped) == set(expected), skipped
    for k, words in expected.items():
        assert words in skipped[k]
    assert row["status"] == "pass" and report["verdict"] == "pass"


@pytest.mark.emu
def test_a_selection_of_ops_runs_alone_and_reports_the_compile_backend():
    report = run_conformance("emu", only=["ccl"], ccl_ops=["split_group", "functional_compiled"])
    ops = next(r for r in report["checks"] if r["id"] == "ccl")["ops"]
    assert [(o["id"], o["status"]) for o in ops] == [("split_group", "ok"), ("functional_compiled", "ok")]
    assert "torch.compile(backend='aot_eager'" in ops[1]["note"]


@pytest.mark.emu
def test_an_op_that_disagrees_with_gloo_fails_the_check_by_name(monkeypatch, clean_registry):
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.syspath_prepend(here)
    env = {**os.environ, "HAL_PLUGINS": "_wrong_ccl_backend",
           "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    report = run_conformance("wrongccl", only=["ccl"], env=env,
                             ccl_ops=["all_reduce", "reduce_scatter_tensor", "coalesced_reduce_scatter_tensor"])
    row = next(r for r in report["checks"] if r["id"] == "ccl")
    status = {o["id"]: o["status"] for o in row["ops"]}
    # the coalesced form runs the same wrong reduce-scatter per tensor: both are named
    assert status == {"all_reduce": "ok", "reduce_scatter_tensor": "failed",
                      "coalesced_reduce_scatter_tensor": "failed"}
    bad = next(o for o in row["ops"] if o["id"] == "reduce_scatter_tensor")
    assert "differs from gloo" in bad["error"]
    assert row["status"] == "fail" and "reduce_scatter_tensor" in row["reason"] and report["verdict"] == "fail"
