"""op_coverage quantize on embedding-dominated models (vocabulary 8192, width 64): every op type
onnxruntime quantizes, node-by-node fallback, and the side-by-side with onnxruntime's own call."""
import json

import onnx
import pytest
from onnxruntime.quantization import QuantType, quantize_dynamic, registry

from op_coverage.errors import NothingQuantized
from op_coverage.quantize import quantize
from op_coverage.quantize.choice import formats
from op_coverage.report.quantize import render_quantize

import q_embed_models as qe

MODELS = ("llama", "bert", "lstm")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The three models exported once per test module: name -> path."""
    d = tmp_path_factory.mktemp("embed")
    return {n: qe.export(n, d / f"{n}.onnx") for n in MODELS}


def int8_tables(path) -> set:
    m = onnx.load(str(path))
    return {t.name for t in m.graph.initializer if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
            and len(t.dims) == 2
            and t.dims[0] >= qe.VOCAB}


def test_formats_ask_for_every_op_type_of_onnxruntimes_registries():
    f = formats()["formats"]
    assert f["integer-dynamic"]["quantize"] == list(dict.fromkeys(list(registry.IntegerOpsRegistry) + ["Gemm"]))
    assert f["qoperator"]["quantize"] == list(registry.QLinearOpsRegistry)
    assert f["qdq"]["quantize"] == list(registry.QDQRegistry)
    assert {"Gather", "LSTM", "Attention", "EmbedLayerNormalization"} <= set(f["integer-dynamic"]["quantize"])


@pytest.mark.parametrize("name", MODELS)
def test_ort_cpu_int8_is_no_larger_than_onnxruntimes_default(exported, tmp_path, run_cli, name):
    src = exported[name]
    ort_default = tmp_path / "ort.onnx"
    quantize_dynamic(str(src), str(ort_default), weight_type=QuantType.QInt8)
    out = tmp_path / "int8.onnx"
    work = tmp_path / "cwd"  # the user's folder: onnxruntime's scratch files must not land in it
    work.mkdir()
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", out, "--json", "--runs", "3", "--repeats", "1", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in work.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".op_coverage")) == []
    doc = json.loads(r.stdout)
    q = doc["quantization"]
    print(f"{name}: {doc['size']['ratio']:.3f}x float; onnxruntime default {doc['baseline']['ratio']:.3f}x; "
          f"hal/onnxruntime {doc['baseline']['size_vs_baseline']:.3f}")
    assert out.stat().st_size <= ort_default.stat().st_size
    assert doc["size"]["ratio"] <= 0.35 and q["format"] == "integer-dynamic"
    assert int8_tables(out), "the token table is stored as 8-bit integers (Gather on it, then DequantizeLinear)"
    assert q["quantized_nodes"].get("Gather", 0) >= 1
    assert doc["rescan"]["not_native"] == {}
    assert all(o["cosine"] >= 0.999 for o in doc["accuracy"]["outputs"])
    b = doc["baseline"]  # side by side: the same measures of onnxruntime's own result
    assert b["call"].startswith("quantize_dynamic") and b["bytes"] == ort_default.stat().st_size
    assert b["latency"]["ratio"] > 0 and b["accuracy"][0]["cosine"] >= 0.999 and b["float_here"] == []
    if name == "lstm":
        assert q["quantized_nodes"].get("LSTM") == 2
    assert "onnxruntime  quantize_dynamic(model, out, weight_type=QuantType.QInt8)" in render_quantize(doc, "table")


@pytest.mark.zoo  # 6 quantizations (~1.5 s each); the default run covers tensorrt on bert below
@pytest.mark.parametrize("target", ["nncase", "tensorrt"])
@pytest.mark.parametrize("name", MODELS)
def test_other_targets_stay_within_1_1x_of_onnxruntime_or_name_the_float_nodes(exported, tmp_path, name, target):
    doc = quantize(exported[name], target, tmp_path / "int8.onnx", runs=0).to_dict()
    b = doc["baseline"]
    assert doc["written"] and doc["rescan"]["not_native"].keys() <= {"LessOrEqual", "GreaterOrEqual", "And",
                                                                       "IsNaN", "Cast"}  # in the float model already
    assert not doc["introduced"].keys() & {"MatMulInteger", "DynamicQuantizeLinear"}
    assert b["size_vs_baseline"] <= 1.1 or b["float_here"], b
    if b["size_vs_baseline"] > 1.1:  # LSTM: no QDQ form in onnxruntime; named
        assert {k["op_type"] for k in b["float_here"]} == {"LSTM"}
    assert doc["size"]["ratio"] <= 0.35


def test_nodes_the_target_lacks_go_back_to_float_one_by_one(exported, tmp_path):
    # tensorrt: the QDQ form of the attention's activation x activation MatMuls brings a uint8/shape op it lacks;
    # those nodes stay float by name, the weight MatMuls stay quantized
    doc = quantize(exported["bert"], "tensorrt", tmp_path / "int8.onnx", runs=0, compare=False).to_dict()
    q = doc["quantization"]
    by_node = q["kept_float_by_node"]
    assert by_node and "MatMul" in q["op_types"] and q["quantized_nodes"]["MatMul"] >= 12
    listed = {k["node"]: k["reason"] for k in q["kept_float_nodes"]}
    for node, why in by_node.items():
        assert listed[node] == why["reason"] and "tensorrt does not run its qdq form natively" in why["reason"]
    assert any(t.get("excluded_nodes") for t in q["tried"]) and doc["baseline"] is None


def test_ascend_runs_no_int8_form_of_these_models(exported, tmp_path):
    with pytest.raises(NothingQuantized, match="ascend"):
        quantize(exported["bert"], "ascend", tmp_path / "int8.onnx", runs=0)
    assert not (tmp_path / "int8.onnx").exists()


@pytest.mark.parametrize("name", MODELS)
def test_pre_processing_skips_symbolic_shapes_without_changing_what_is_quantized(exported, tmp_path, name):
    from op_coverage.quantize.ort import _pre_process
    from test_quantize import quantized_census
    without, without_bytes = quantized_census(exported[name], tmp_path, symbolic=False)
    if name == "bert":  # onnxruntime's symbolic pass gives up on it ("Incomplete symbolic shape inference")
        assert _pre_process(exported[name], tmp_path / "sym.onnx", False, symbolic=True) is not None
        assert without["MatMul"] == 12 and without["Gather"] >= 1
        return
    with_sym, with_bytes = quantized_census(exported[name], tmp_path, symbolic=True)
    assert without == with_sym and without_bytes <= with_bytes
