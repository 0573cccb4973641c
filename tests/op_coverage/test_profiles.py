"""Target profiles: bundled data is valid and cited; verdicts follow op, opset and dtype."""
import json
from pathlib import Path

import jsonschema
import onnx
import pytest
from onnx import TensorProto, helper

from oc_models import N, vi
from op_coverage import list_targets
from op_coverage.datafiles import bundled_profiles, read_json
from op_coverage.errors import BadProfile, UnknownTarget
from op_coverage.onnx.inventory import build_inventory
from op_coverage.onnx.load import load_for_scan
from op_coverage.targets.catalog import load_targets

EXPECTED = {"ort-cpu", "ort-cuda", "ort-dml", "tensorrt", "ascend", "openvino", "migraphx", "musa", "rknn",
            "nncase", "axera"}


def test_bundled_profiles_validate_and_name_their_source():
    schema = read_json("profile.schema.json")
    found = set()
    for fname, data in bundled_profiles():
        jsonschema.Draft202012Validator(schema).validate(data)
        assert data["source"]["repo"] and data["source"]["commit"], fname
        assert data["entries"], fname
        found.add(data["name"])
    assert found == EXPECTED


def test_targets_lists_provenance_and_live_probe():
    rows = {r["name"]: r for r in list_targets()}
    assert EXPECTED | {"ort-live"} <= set(rows)
    assert rows["ascend"]["kind"] == "onnx" and rows["ascend"]["profile_kind"] == "published-table"
    assert "Ascend-msit" in rows["ascend"]["provenance"]
    assert rows["ort-live"]["profile_kind"] == "live-probe"
    assert "cann" in rows["ascend"]["aliases"]


def _node(tmp_path, op, dtype=TensorProto.FLOAT, opset=17, domain=""):
    g = helper.make_graph([N(op, ["x"], ["y"], domain=domain)], "g", [vi("x", dtype, [2])], [vi("y", dtype, [2])])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 9
    p = tmp_path / f"{op}.onnx"
    onnx.save(m, p)
    return build_inventory(load_for_scan(p)).nodes[0]


def test_dtype_restriction_gives_reason(tmp_path):
    ts = load_targets(use_plugins=False)
    # Relu has float kernels; no runtime registers it for bool
    assert ts.get("ort-cuda").judge(_node(tmp_path, "Relu", TensorProto.FLOAT)).status == "native"
    v = ts.get("ort-cpu").judge(_node(tmp_path, "Relu", TensorProto.BOOL))
    assert v.status == "unsupported" and "dtype bool" in v.reason


def test_ort_gpu_profile_falls_back_to_cpu_kernel(tmp_path):
    ts = load_targets(use_plugins=False)
    node = _node(tmp_path, "Relu", TensorProto.INT32)  # CPU has int32 Relu, CUDA does not list it
    cpu, cuda = ts.get("ort-cpu").judge(node), ts.get("ort-cuda").judge(node)
    assert cpu.status == "native"
    assert cuda.status == "host-fallback" and "ort-cpu" in cuda.reason


def test_partial_maps_to_native_with_restriction(tmp_path):
    ts = load_targets(use_plugins=False)
    v = ts.get("tensorrt").judge(_node(tmp_path, "Resize"))
    assert v.status == "native" and v.restriction


def test_unknown_op_in_onnx_domain(tmp_path):
    g = helper.make_graph([N("Convx", ["x"], ["y"])], "g", [vi("x", TensorProto.FLOAT, [2])],
                          [vi("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "convx.onnx"
    onnx.save(m, p)
    node = build_inventory(load_for_scan(p)).nodes[0]
    v = load_targets(use_plugins=False).get("ascend").judge(node)
    assert v.status == "unsupported" and "not an operator of ai.onnx" in v.reason


def test_user_profile_extends_targets(tmp_path):
    prof = {"format": "op_coverage.profile/1", "name": "my-npu", "kind": "user",
            "source": {"doc": "vendor datasheet v1"},
            "unlisted": {"status": "host-fallback", "reason": "runs on the host"},
            "entries": [{"domain": "ai.onnx", "op": "Relu", "since": 1, "until": None, "dtypes": ["float"],
                         "status": "native"}]}
    f = tmp_path / "my.json"
    f.write_text(json.dumps(prof))
    ts = load_targets([str(f)], use_plugins=False)
    p = ts.resolve_names(["my-npu"])[0]
    assert p.judge(_node(tmp_path, "Relu")).status == "native"
    assert p.judge(_node(tmp_path, "Tanh")).status == "host-fallback"


def test_bad_profile_and_unknown_target(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"name": "x", "entries": [{"op": "Relu", "status": "maybe"}]}))
    with pytest.raises(BadProfile, match="entries/0/status"):
        load_targets([str(f)], use_plugins=False)
    with pytest.raises(UnknownTarget, match="choose from"):
        load_targets(use_plugins=False).resolve_names(["no-such-chip"])
    with pytest.raises(UnknownTarget, match="Cambricon"):
        load_targets(use_plugins=False).resolve_names(["cambricon"])


def test_plugin_profiles_through_hal_hook(monkeypatch):
    import op_coverage.targets.catalog as targets
    prof = {"name": "emu", "kind": "plugin", "entries": [{"op": "Add", "status": "native"}]}
    monkeypatch.setattr(targets, "plugin_profiles", lambda: [("hal-emulator", prof), ("broken", {"nope": 1})])
    ts = load_targets()
    assert "emu" not in ts.profiles  # plugins load lazily: a bundled target never pays for them
    assert ts.get("emu").origin == "hal plugin hal-emulator"
    assert any("broken" in p for p in ts.problems)


def test_live_probe_uses_onnxruntime(tmp_path):
    ts = load_targets(use_plugins=False)
    live = ts.get("ort-live")
    ok = live.judge(_node(tmp_path, "Relu"))
    assert ok.status == "native" and "onnxruntime session" in ok.provenance
    bad = live.judge(_node(tmp_path, "Relu", TensorProto.BOOL))  # no CPU kernel for bool Relu
    assert bad.status == "unsupported" and "onnxruntime" in bad.reason


def test_profile_schema_is_published_beside_the_data():
    root = Path(__file__).resolve().parents[2] / "op_coverage" / "data"
    assert (root / "profile.schema.json").is_file() and (root / "report.schema.json").is_file()


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT8])
def test_migraphx_mul_takes_the_types_of_add_sub_div(tmp_path, dtype):
    # the doc's Mul row lacks int8/int32; the parser handles Add, Div, Mul, Sub alike
    ts = load_targets(use_plugins=False)
    mx = ts.get("migraphx")
    verdicts = {op: mx.judge(_node(tmp_path, op, dtype)) for op in ("Add", "Sub", "Div", "Mul")}
    assert {op: v.status for op, v in verdicts.items()} == dict.fromkeys(verdicts, "native")
    assert "parse_binary_op.cpp" in verdicts["Mul"].provenance


def _qdq_nodes(tmp_path, zero_point=TensorProto.INT8):
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("z", zero_point, [], [0])]
    g = helper.make_graph([N("QuantizeLinear", ["x", "s", "z"], ["q"]), N("DequantizeLinear", ["q", "s", "z"], ["y"])],
                          "g", [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    p = tmp_path / "qdq.onnx"
    onnx.save(m, p)
    return build_inventory(load_for_scan(p)).nodes


def test_a_source_that_lists_the_main_tensors_types_only_does_not_fail_the_zero_point(tmp_path):
    """TensorRT's table gives QuantizeLinear float types (its x); the int8 zero point is T2's."""
    ts = load_targets(use_plugins=False)
    quant, _ = _qdq_nodes(tmp_path)
    v = ts.get("tensorrt").judge(quant)
    assert v.status == "native", v
    assert "int8 (T2)" in v.restriction and "not judged" in v.restriction
    # a source that lists integer types judges the zero point: migraphx lists int32, not int8
    m = ts.get("migraphx").judge(quant)
    assert m.status == "unsupported" and "dtype int8" in m.reason
    # and onnxruntime, which lists both parameters' types, runs it without a note
    o = ts.get("ort-cpu").judge(quant)
    assert o.status == "native" and "not judged" not in o.restriction
