"""hal accept --onnx: each target's ONNX profile, op_coverage's scan and rewrite of the export for it
(section 2) and the INT8 model op_coverage quantize's steps make of it (section 6), built from a small
export without a training run (the full command line runs in test_accept.py)."""
import json
from pathlib import Path

import onnx
import pytest

from hal_accept import AcceptOptions, AcceptUsageError, Target, terminal, to_html
from hal_accept.accept import inference, operators
from hal_accept.cli import main
from hal_accept.onnx_model import int8_section, onnx_targets

from onnx_models import mlp_with_gelu

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "train_gelu_mlp.py"
SCHEMA = json.loads((HERE.parents[1] / "hal_accept" / "accept.schema.json").read_text())
MUSA, CPU, EMU = Target("emu", "musa-2.7"), Target("cpu"), Target("emu")


@pytest.fixture
def export(tmp_path):
    return mlp_with_gelu(tmp_path / "mlp.onnx")


def _options(export, tmp_path, targets=(MUSA, CPU, EMU), **kw):
    return AcceptOptions(str(SCRIPT), targets=targets, onnx=export, workdir=tmp_path / "work", **kw).check()


def _valid(part, name):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(json.dumps(part)), {"$ref": f"#/$defs/{name}", "$defs": SCHEMA["$defs"]})


def _page(sections):
    report = {"script": str(SCRIPT), "script_args": [], "reference": "cpu", "targets": ["emu:musa-2.7", "cpu", "emu"],
              "steps": 4, "created": "now", "verdict": "accepted", "exit_code": 0, "gates": [], "runs": {},
              "sections": sections}
    return terminal(report), to_html(report)


def test_a_target_is_judged_by_its_backends_onnx_profile_or_the_report_says_it_has_none(export, tmp_path):
    found = onnx_targets(_options(export, tmp_path, targets=(MUSA, Target("ascend"), Target("cuda"), EMU,
                                                             Target("emu", "mlu-2.4"))))
    assert found["emu:musa-2.7"] == ("musa", "backends/musa/onnx.profile.json: the ONNX profile of the torch "
                                             "profile musa-2.7's toolchain")
    assert found["ascend"][0] == "ascend" and found["ascend"][1].startswith("backends/ascend/onnx.profile.json")
    assert found["cuda"][0] == "ort-cuda" and "aliased 'cuda'" in found["cuda"][1]  # op_coverage's own alias
    assert found["emu"][0] is None and "op_coverage targets --kind onnx" in found["emu"][1]
    none, why = found["emu:mlu-2.4"]
    assert none is None and "no public ONNX operator list for Cambricon" in why  # op_coverage's reason, not a guess


def test_section_2_shows_what_each_onnx_target_lacks_and_the_verified_rewrite(export, tmp_path):
    section = operators(_options(export, tmp_path), None, {})  # no aten trace: the ONNX part stands alone
    _valid(section["targets"]["emu:musa-2.7"]["onnx"], "onnx")
    musa = section["targets"]["emu:musa-2.7"]["onnx"]
    assert musa["onnx_target"] == "musa" and musa["nodes_by_status"] == {"native": 2, "host-fallback": 1,
                                                                          "unsupported": 0}
    [gelu] = musa["needs_attention"]
    assert (gelu["op"], gelu["nodes"], gelu["status"]) == ("Gelu", 1, "host-fallback")
    assert gelu["replacement"].startswith("replaceable via gelu.pattern (5 nodes: Add, Constant, Div, Erf, Mul)")
    rw = musa["rewrite"]
    assert rw["replaced"] == {"Gelu": 1} and rw["verified"] is True and rw["remaining"] == {}
    assert rw["verification"]["outputs"][0]["max_abs"] <= rw["verification"]["outputs"][0]["atol"]
    written = onnx.load(rw["written"])
    assert Path(rw["written"]).parent == tmp_path / "work" / "onnx"
    assert "Gelu" not in {n.op_type for n in written.graph.node} and "Erf" in {n.op_type for n in written.graph.node}
    cpu = section["targets"]["cpu"]["onnx"]
    assert cpu["onnx_target"] == "ort-cpu" and cpu["needs_attention"] == [] and cpu["rewrite"] is None
    assert section["targets"]["emu"]["onnx"]["onnx_target"] is None
    assert section["verdict"] == "not_checked"  # the aten ops were not traced here; the ONNX part does not hide it
    assert "emu:musa-2.7: musa: 2 of 3 nodes native; Gelu x1 host-fallback" in section["summary"]
    assert any(e.startswith("op_coverage rewrite ") and "-t musa" in e for e in section["evidence"])
    text, page = _page({"operators": section})
    assert "emu:musa-2.7: ONNX: musa: 2 of 3 nodes native; Gelu x1 host-fallback: replaceable via gelu.pattern" in text
    assert "1 node(s) replaced, verified in onnxruntime, 0 not native left" in text
    assert "emu: ONNX: no ONNX profile for the backend emu" in text
    assert "ONNX export on musa" in page and "replaceable via gelu.pattern" in page


def test_section_6_shows_int8_size_and_accuracy_and_says_generation_was_not_checked(export, tmp_path):
    options = _options(export, tmp_path)
    section = inference(None, int8_section(options))
    _valid(section["int8"], "int8")
    assert section["verdict"] == "info"  # no INT8 gate given: reported, not judged (as op_coverage quantize)
    assert section["summary"].endswith("; generation not checked (no --model)")
    assert any(n.startswith("generation (TTFT, TPOT") for n in section["not_checked"])
    cpu = section["int8"]["targets"]["cpu"]
    assert cpu["status"] == "quantized" and cpu["quantized_nodes"] == {"MatMul": 2}
    size = cpu["size"]
    assert size["quantized_bytes"] < size["float_bytes"] / 3 and size["ratio"] == pytest.approx(
        size["quantized_bytes"] / size["float_bytes"], abs=1e-4)
    [out] = cpu["accuracy"]["outputs"]
    assert out["name"] == "y" and 0 < out["max_abs"] < 0.1 and out["cosine"] > 0.999
    int8_ops = {n.op_type for n in onnx.load(cpu["written"]).graph.node}
    assert "MatMulInteger" in int8_ops and "MatMul" not in int8_ops
    musa = section["int8"]["targets"]["emu:musa-2.7"]
    assert musa["status"] == "nothing_quantized" and "no INT8 form musa runs natively" in musa["why"]
    assert musa["written"] is None
    assert section["int8"]["targets"]["emu"]["onnx_target"] is None
    text, page = _page({"inference": section})
    assert f"cpu: INT8: ort-cpu, integer-dynamic: {size['float_bytes']} -> {size['quantized_bytes']} bytes" in text
    assert "emu:musa-2.7: INT8: musa runs no INT8 form of the model's ops; it stays float" in text
    assert "INT8 of the ONNX export" in page and str(size["quantized_bytes"]) in page


def test_an_int8_gate_fails_section_6_and_writes_nothing_as_quantize_does(export, tmp_path):
    strict = int8_section(_options(export, tmp_path, targets=(CPU,), int8_max_error=1e-6))
    assert strict["verdict"] == "fail" and strict["gates"]["holds"] is False
    assert strict["targets"]["cpu"]["within_gates"] is False and strict["targets"]["cpu"]["written"] is None
    assert list((tmp_path / "work" / "onnx").glob("*.int8.onnx")) == []
    loose = int8_section(_options(export, tmp_path, targets=(CPU,), int8_max_error=0.5, int8_min_cosine=0.99))
    assert loose["verdict"] == "pass" and loose["gates"]["holds"] is True
    assert "gates (max abs error <= 0.5, cosine >= 0.99) hold" in loose["summary"]
    # with generation too, a failed INT8 gate fails the section; generation keeps its own figures
    generation = {"verdict": "pass", "summary": "greedy generation", "targets": {}, "evidence": ["hal run ..."]}
    assert inference(generation, strict)["verdict"] == "fail"
    assert inference(generation, loose)["verdict"] == "pass"
    # a target whose ONNX profile runs no INT8 form cannot hold a gate that was asked for
    assert int8_section(_options(export, tmp_path, targets=(MUSA,), int8_min_cosine=0.9))["verdict"] == "fail"


def test_a_missing_or_non_onnx_export_is_a_usage_error_naming_the_file_and_the_fix(tmp_path, capsys):
    with pytest.raises(AcceptUsageError, match=r"onnx '.*missing.onnx': no such file; give the ONNX export"):
        AcceptOptions(str(SCRIPT), onnx=str(tmp_path / "missing.onnx")).check()
    text = tmp_path / "model.onnx"
    text.write_text("not a model\n")
    with pytest.raises(AcceptUsageError, match="not an ONNX model .*; pass a .onnx file written by onnx.save or "
                                               "torch.onnx.export"):
        AcceptOptions(str(SCRIPT), onnx=str(text)).check()
    with pytest.raises(AcceptUsageError, match=r"give the export too \(--onnx model.onnx\)"):
        AcceptOptions(str(SCRIPT), int8_min_cosine=0.99).check()
    assert main(["--onnx", str(text), str(SCRIPT)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hal accept: error: onnx '{text}': not an ONNX model") and len(err.splitlines()) == 1
