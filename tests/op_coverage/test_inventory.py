"""Inventory: every node, with path, opset and types; counts equal an independent onnx walk."""
from pathlib import Path

import onnx

from oc_models import count_nodes_with_onnx, nested_control_flow
from op_coverage.onnx.inventory import build_inventory
from op_coverage.onnx.load import load_for_scan

EXAMPLE = Path(__file__).resolve().parents[2] / "op_coverage" / "examples" / "tiny_block.onnx"


def _inv(tmp_path, model):
    p = tmp_path / "m.onnx"
    onnx.save(model, p)
    return build_inventory(load_for_scan(p))


def test_counts_match_onnx_walk_for_nested_control_flow(tmp_path):
    model = nested_control_flow()
    inv = _inv(tmp_path, model)
    assert dict(inv.op_counts()) == count_nodes_with_onnx(model)
    assert inv.op_counts()[("ai.onnx", "Scan")] == 1  # three levels down: If > Loop > Scan


def test_counts_match_onnx_walk_for_bundled_example():
    model = onnx.load(EXAMPLE)
    inv = build_inventory(load_for_scan(EXAMPLE))
    assert dict(inv.op_counts()) == count_nodes_with_onnx(model)


def test_paths_reach_subgraphs_and_functions(tmp_path):
    inv = _inv(tmp_path, nested_control_flow())
    by_type = {n.op_type: n for n in inv.nodes}
    assert by_type["Scan"].path == "main/top_if.then_branch/the_loop.body"
    assert by_type["Add"].path in ("main/top_if.then_branch/the_loop.body/Scan_0.body", "function:custom.local.Twice")
    assert inv.functions == {"custom.local.Twice": ["main/Twice_1"]}
    fn_nodes = [n for n in inv.nodes if n.path == "function:custom.local.Twice"]
    assert [n.op_type for n in fn_nodes] == ["Add"]


def test_generated_names_are_stable_and_unique(tmp_path):
    a = [n.name for n in _inv(tmp_path, nested_control_flow()).nodes]
    b = [n.name for n in _inv(tmp_path, nested_control_flow()).nodes]
    assert a == b
    assert len(set(a)) == len(a)


def test_opsets_dtypes_and_weights(tmp_path):
    inv = build_inventory(load_for_scan(EXAMPLE))
    assert inv.opsets == {"ai.onnx": 20, "com.microsoft": 1, "local": 1}
    gemm = next(n for n in inv.nodes if n.name == "mlp_up")
    assert gemm.input_dtypes == ["float", "float", "float"]
    assert gemm.input_shapes[1] == [32, 64]
    assert gemm.version == 13  # schema since_version that opset 20 resolves to
    w = inv.weight_bytes_by_op()
    assert w[("ai.onnx", "Gemm")] == (32 * 64 + 64 + 64 * 32 + 32) * 4
    assert inv.weight_bytes == sum(w.values())
