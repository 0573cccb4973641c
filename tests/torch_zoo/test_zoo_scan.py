"""Each architecture's trace of one training step, scanned against ascend-2.13, mlu, musa, xpu and
mps (issue 12, item 7): what each vendor's op list says about the ops the step sends to the device.

The expectations are the vendors' own registration lists (hal/data/torch): Cambricon's
torch_mlu is for torch 2.4, which has no ``_safe_softmax`` (the math attention path of torch 2.5+
calls it, so a 2.13 trace meets it: a skew the report names); torch_npu registers no
``_embedding_bag_backward`` and falls back to the CPU; every other op of these steps has a kernel
or a composite on all five.
"""
import pytest
import torch

from tests.torch_zoo.conftest import step_on, traced_step
from tests.torch_zoo.models import ARCHITECTURES

pytestmark = pytest.mark.emu
TARGETS = ["ascend-2.13", "mlu", "musa", "xpu", "mps"]
EXPECTED = {
    "transformer_lm": {("_safe_softmax", "mlu-2.4", "host-fallback"), ("isneginf", "mlu-2.4", "host-fallback")},
    "gru_recommender": {("_embedding_bag_backward", "ascend-2.13", "host-fallback")},
}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_architecture_scanned_against_five_vendors(emu_one_thread, name):
    from op_coverage.torch.scan import scan_trace
    from op_coverage.torch.trace import make_trace
    rows = traced_step(step_on(name, emu_one_thread, ARCHITECTURES))
    report = scan_trace(make_trace(rows, {"kind": "factory", "target": name}, 1, 0.0, "end",
                                   torch.__version__), TARGETS, plan=False)
    model = report.models[0]
    assert [t.name for t in model.targets] == ["ascend-2.13", "mlu-2.4", "musa-2.7", "xpu-2.13", "mps-2.13"]
    assert all(set(r.support) == set(report.target_names) for r in model.rows)
    found = {(r.op_type, t, s["status"]) for r in model.rows for t, s in r.support.items() if s["status"] != "native"}
    assert found == EXPECTED.get(name, set())
    assert report.exit_code() == (3 if name in EXPECTED else 0)
    assert any("skew" in w and "mlu" in w for w in model.warnings)  # a 2.13 trace against torch_mlu's 2.4 list
