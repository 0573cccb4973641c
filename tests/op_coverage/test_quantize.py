"""op_coverage quantize: INT8 a target can run, what it costs, and what it refuses to write."""
import json

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from op_coverage.datafiles import read_json
from op_coverage.errors import NothingQuantized
from op_coverage.quantize import quantize

import q_models as qm

SCHEMA = jsonschema.Draft202012Validator(read_json("quantize.schema.json"))


def ops(path) -> set:
    m = onnx.load(str(path), load_external_data=False)
    found = set()

    def walk(g):
        for n in g.node:
            found.add(n.op_type)
            for a in n.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    walk(sub)
    walk(m.graph)
    return found


def onnxruntime_default_bytes(src, tmp_path, calibration=None, external=False) -> int:
    """Bytes (model and data file) of onnxruntime's own call with its defaults on *src*: ``quantize_dynamic``,
    or ``quantize_static`` on the *calibration* feeds."""
    from onnxruntime.quantization import QuantType, quantize_dynamic, quantize_static

    class Feeds:
        def __init__(self):
            self.it = iter(calibration or [])

        def get_next(self):
            return next(self.it, None)

    dst = tmp_path / "onnxruntime-own.onnx"
    if calibration is None:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, use_external_data_format=external)
    else:
        quantize_static(str(src), str(dst), Feeds(), use_external_data_format=external)
    data = tmp_path / "onnxruntime-own.onnx.data"
    return dst.stat().st_size + (data.stat().st_size if data.exists() else 0)


def written_bytes(out) -> int:
    data = out.with_name(out.name + ".data")
    return out.stat().st_size + (data.stat().st_size if data.exists() else 0)


def run(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("build", [qm.bert_like, qm.llama_like], ids=["bert", "llama"])
def test_dynamic_int8_for_ort_cpu_shrinks_matmul_models_and_runs_faster(tmp_path, build):
    src = qm.save(build(), tmp_path / "float.onnx")
    rep = quantize(src, "ort-cpu", tmp_path / "int8.onnx", dims={"batch": 1, "seq": 128})
    doc = rep.to_dict()
    SCHEMA.validate(doc)
    out = doc["accuracy"]["outputs"][0]
    print(f"{build.__name__}: size {doc['size']['ratio']:.3f}x, latency {doc['latency']['ratio']:.3f}x "
          f"({doc['latency']['min']:.3f}-{doc['latency']['max']:.3f}), cosine {out['cosine']:.6f}, top-1 {out['top1']:.3f}")
    assert doc["quantization"]["format"] == "integer-dynamic"
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops(tmp_path / "int8.onnx")
    assert doc["size"]["ratio"] <= 0.35
    # never larger than onnxruntime's own default call on the same model (issue 23, item 3)
    assert written_bytes(tmp_path / "int8.onnx") <= onnxruntime_default_bytes(src, tmp_path)
    assert doc["baseline"]["size_vs_baseline"] <= 1.0
    assert doc["latency"]["ratio"] <= 1.0
    assert doc["rescan"]["not_native"] == {} and rep.exit_code() == 0
    assert out["cosine"] >= 0.999 and out["top1"] is not None and out["top1"] >= 0.9
    # the attention products (two activations) stay float, and the report says why
    assert {k["op_type"] for k in doc["quantization"]["kept_float_nodes"]} == {"MatMul"}


def test_static_int8_for_the_cnn_uses_the_calibration_set(tmp_path):
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    cal = tmp_path / "cal"
    cal.mkdir()
    rng = np.random.default_rng(3)
    for i in range(4):
        np.savez(cal / f"{i}.npz", x=rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    rep = quantize(src, "ort-cpu", tmp_path / "cnn.int8.onnx", mode="static", calibration=str(cal),
                   per_channel=True, dims={"n": 4})
    doc = rep.to_dict()
    SCHEMA.validate(doc)
    out = doc["accuracy"]["outputs"][0]
    print(f"cnn static: size {doc['size']['ratio']:.3f}x, latency {doc['latency']['ratio']:.3f}x, "
          f"cosine {out['cosine']:.6f}, top-1 {out['top1']:.3f}")
    q = doc["quantization"]
    assert q["format"] == "qoperator" and "QLinearConv" in ops(tmp_path / "cnn.int8.onnx")
    assert q["calibration"]["source"] == str(cal) and q["calibration"]["samples"] == 4
    assert not any("generated" in n for n in doc["notes"])
    assert doc["rescan"]["not_native"] == {}
    assert doc["size"]["ratio"] <= 0.4 and out["cosine"] >= 0.999 and out["top1"] == 1.0
    # one .npz with a leading sample axis is the same calibration set
    stacked = tmp_path / "stacked.npz"
    np.savez(stacked, x=np.stack([np.load(cal / f"{i}.npz")["x"] for i in range(4)]))
    doc2 = quantize(src, "ort-cpu", tmp_path / "cnn2.int8.onnx", mode="static", calibration=str(stacked),
                    runs=0).to_dict()
    assert doc2["quantization"]["calibration"]["samples"] == 4 and doc2["latency"] is None
    feeds = [{"x": x[None]} for x in np.load(stacked)["x"][:, 0]]
    assert written_bytes(tmp_path / "cnn2.int8.onnx") <= onnxruntime_default_bytes(src, tmp_path, feeds)


def test_target_without_integer_matmul_gets_qdq_and_a_clean_rescan(tmp_path):
    # nncase lists MatMulInteger and DynamicQuantizeLinear as unsupported, QuantizeLinear/DequantizeLinear as native
    src = qm.save(qm.bert_like(d=128), tmp_path / "bert.onnx")
    rep = quantize(src, "nncase", tmp_path / "bert.nncase.onnx", runs=0)
    doc = rep.to_dict()
    SCHEMA.validate(doc)
    got = ops(tmp_path / "bert.nncase.onnx")
    assert doc["quantization"]["format"] == "qdq"
    assert {"QuantizeLinear", "DequantizeLinear"} <= got and not got & {"MatMulInteger", "DynamicQuantizeLinear"}
    assert doc["rescan"]["not_native"] == {} and rep.exit_code() == 0
    assert doc["quantization"]["calibration"]["source"] == "generated"
    assert any("generated random inputs" in n for n in doc["notes"])
    assert "nncase lacks" in doc["quantization"]["tried"][0]["outcome"]


def test_op_types_whose_integer_form_the_target_lacks_stay_float_with_the_reason(tmp_path):
    # migraphx: MatMulInteger and DynamicQuantizeLinear (uint8) native, ConvInteger only for int8 inputs
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    doc = quantize(src, "migraphx", tmp_path / "cnn.mgx.onnx", runs=0).to_dict()
    kept = doc["quantization"]["kept_float_nodes"]
    assert {k["op_type"] for k in kept} == {"Conv"} and len(kept) == 2
    assert "ConvInteger" in kept[0]["reason"] and "uint8" in kept[0]["reason"]
    assert "ConvInteger" not in ops(tmp_path / "cnn.mgx.onnx") and "MatMulInteger" in ops(tmp_path / "cnn.mgx.onnx")
    assert doc["rescan"]["not_native"] == {}


def test_a_target_with_no_int8_form_writes_nothing_and_exits_7(tmp_path, run_cli):
    src = qm.save(qm.bert_like(d=128), tmp_path / "bert.onnx")
    with pytest.raises(NothingQuantized) as e:
        quantize(src, "ascend", tmp_path / "out.onnx")
    assert "ascend" in str(e.value) and "DynamicQuantizeLinear" in str(e.value)
    r = run_cli("quantize", src, "-t", "ascend", "-o", tmp_path / "out.onnx", "--json")
    assert r.returncode == 7, r.stderr
    doc = json.loads(r.stdout)
    SCHEMA.validate(doc)
    assert doc["error"]["kind"] == "nothing-quantized" and not doc["written"]
    assert not (tmp_path / "out.onnx").exists()


def test_accuracy_gates_exit_5_and_write_nothing(tmp_path, run_cli):
    src = qm.save(qm.llama_like(d=128, hidden=256, vocab=256), tmp_path / "llama.onnx")
    out = tmp_path / "out.onnx"
    # the model named relative to the current folder, as a user in its folder would (pre-processing once lost it)
    r = run_cli("quantize", src.name, "-t", "ort-cpu", "-o", out, "--max-error", "1e-6", "--runs", "0", "--json",
                cwd=tmp_path)
    assert r.returncode == 5, r.stderr
    doc = json.loads(r.stdout)
    SCHEMA.validate(doc)
    assert doc["quantization"]["pre_process"] == "ok"
    assert doc["accuracy"]["gates"]["ok"] is False and "--max-error" in doc["accuracy"]["gates"]["failed"][0]
    assert not out.exists() and not list(tmp_path.glob(".op_coverage-*"))
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", out, "--min-cosine", "0.9999999", "--runs", "0")
    assert r.returncode == 5 and "GATE FAILED" in r.stdout and "not written" in r.stderr
    assert not out.exists()
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", out, "--min-cosine", "0.99", "--max-error", "10", "--runs", "0",
                "--format", "md")
    assert r.returncode == 0, r.stderr
    assert out.exists() and "| accuracy | logits" in r.stdout


def test_external_data_stays_external_beside_the_output(tmp_path):
    src = qm.save(qm.bert_like(d=128), tmp_path / "ext.onnx", external=True)
    assert (tmp_path / "ext.onnx.data").exists()
    outdir = tmp_path / "out"
    outdir.mkdir()
    doc = quantize(src, "ort-cpu", outdir / "ext.int8.onnx", runs=0).to_dict()
    assert doc["external_data"] == "ext.int8.onnx.data" and (outdir / "ext.int8.onnx.data").exists()
    data = (tmp_path / "ext.onnx.data").stat().st_size
    assert doc["size"]["float_bytes"] > data  # the data file counts
    assert doc["size"]["ratio"] <= 0.35
    assert written_bytes(outdir / "ext.int8.onnx") <= onnxruntime_default_bytes(src, tmp_path, external=True)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 128)).astype(np.float32)}
    assert run(outdir / "ext.int8.onnx", feeds)[0].shape == (2, 8)


def test_matmuls_inside_if_branches_are_quantized(tmp_path):
    src = qm.save(qm.with_if(), tmp_path / "if.onnx")
    doc = quantize(src, "ort-cpu", tmp_path / "if.int8.onnx", runs=0).to_dict()
    assert doc["checked"] and doc["quantization"]["quantized_nodes"] == {"MatMul": 2}
    assert "MatMulInteger" in ops(tmp_path / "if.int8.onnx")
    assert doc["accuracy"]["outputs"][0]["cosine"] >= 0.999 and doc["rescan"]["not_native"] == {}
    # onnxruntime's default call leaves the branches float: 4x larger
    assert written_bytes(tmp_path / "if.int8.onnx") * 3 <= onnxruntime_default_bytes(src, tmp_path)
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    for cond in (True, False):
        want = run(src, {"x": x, "cond": np.array(cond)})[0]
        got = run(tmp_path / "if.int8.onnx", {"x": x, "cond": np.array(cond)})[0]
        assert np.corrcoef(want.ravel(), got.ravel())[0, 1] > 0.999


def test_dynamic_batch_axis_survives(tmp_path):
    src = qm.save(qm.bert_like(d=128), tmp_path / "bert.onnx")
    quantize(src, "ort-cpu", tmp_path / "bert.int8.onnx", runs=0, compare=False)
    assert written_bytes(tmp_path / "bert.int8.onnx") <= onnxruntime_default_bytes(src, tmp_path)  # without the baseline too
    m = onnx.load(str(tmp_path / "bert.int8.onnx"))
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch, seq in ((1, 3), (5, 17)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 128)).astype(np.float32)
        assert run(tmp_path / "bert.int8.onnx", {"x": x})[0].shape == (batch, 8)


def test_exclude_keeps_named_nodes_float_and_unknown_names_are_usage_errors(tmp_path, run_cli):
    src = qm.save(qm.bert_like(d=128), tmp_path / "bert.onnx")
    doc = quantize(src, "ort-cpu", tmp_path / "a.onnx", exclude=["MatMul_1"], runs=0).to_dict()
    assert {"node": "MatMul_1", "op_type": "MatMul", "reason": "excluded by --exclude"} in \
        doc["quantization"]["kept_float_nodes"]
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", tmp_path / "b.onnx", "--exclude", "no_such_node")
    assert r.returncode == 2 and "no_such_node" in r.stderr


def test_bad_inputs_get_the_scan_exit_codes(tmp_path, run_cli):
    assert run_cli("quantize", tmp_path / "missing.onnx", "-t", "ort-cpu", "-o", tmp_path / "o.onnx").returncode == 10
    (tmp_path / "junk.onnx").write_bytes(b"{not a model")
    assert run_cli("quantize", tmp_path / "junk.onnx", "-t", "ort-cpu", "-o", tmp_path / "o.onnx").returncode == 11
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    assert run_cli("quantize", src, "-t", "nope", "-o", tmp_path / "o.onnx").returncode == 16
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", tmp_path / "o.onnx", "--mode", "static",
                "--calibration", tmp_path / "none.npz", "--json")
    assert r.returncode == 18 and json.loads(r.stdout)["error"]["kind"] == "bad-inputs"
    assert not (tmp_path / "o.onnx").exists()


def test_help_lists_examples_and_exit_codes(run_cli):
    r = run_cli("quantize", "--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "exit codes:" in r.stdout
    assert "--min-cosine" in r.stdout and "  7 " in r.stdout


def quantized_census(src, tmp_path, symbolic: bool):
    """(quantized nodes per op type, file bytes) of the integer-dynamic form after pre-processing with or without
    onnxruntime's symbolic shape inference."""
    from op_coverage.quantize.choice import formats
    from op_coverage.quantize.ort import _pre_process, quantize_once, untyped_values
    from op_coverage.quantize.census import _census
    fmt = formats()["formats"]["integer-dynamic"]
    pre, out = tmp_path / f"pre-{symbolic}.onnx", tmp_path / f"q-{symbolic}.onnx"
    assert _pre_process(src.resolve(), pre.resolve(), False, symbolic=symbolic) is None
    assert untyped_values(pre) == []  # what makes quantize skip the symbolic pass
    quantize_once(pre, out, fmt, fmt["variants"][0], fmt["quantize"], exclude=[], per_channel=False,
                  calibration=None, external=False)
    return _census(onnx.load(str(out)), fmt, {}, [])[0], out.stat().st_size


@pytest.mark.parametrize("build", [qm.bert_like, qm.llama_like, qm.small_cnn], ids=["bert", "llama", "cnn"])
def test_pre_processing_without_symbolic_shapes_quantizes_the_same_nodes(tmp_path, build):
    # onnx's shape inference types every value of these models, so quantize skips sympy's symbolic pass:
    # the same nodes are quantized and the file is no larger
    src = qm.save(build(), tmp_path / "float.onnx")
    (with_sym, with_bytes), (without, without_bytes) = (quantized_census(src, tmp_path, s) for s in (True, False))
    assert without == with_sym and without_bytes <= with_bytes


def test_onnxruntimes_default_result_is_written_when_it_is_the_smaller(tmp_path):
    # bert_like: pre-processing fuses MatMul + Add, onnxruntime's call on the model as given is a few hundred
    # bytes smaller; it runs on ort-cpu, so that file is written and the report says so
    src = qm.save(qm.bert_like(), tmp_path / "bert.onnx")
    doc = quantize(src, "ort-cpu", tmp_path / "int8.onnx", runs=0).to_dict()
    SCHEMA.validate(doc)
    tried = doc["quantization"]["tried"]
    ours = [t["bytes"] for t in tried if t["outcome"] == "ok" and "call" not in t]
    theirs = [t for t in tried if t.get("call") == "onnxruntime's default"]
    assert len(theirs) == 1 and theirs[0]["outcome"] == "ok"
    assert doc["size"]["quantized_bytes"] == min(ours + [theirs[0]["bytes"]]) == written_bytes(tmp_path / "int8.onnx")
    if theirs[0]["bytes"] < min(ours):
        assert doc["baseline"]["same_file"] and any("wrote that one" in n for n in doc["notes"])
    assert doc["size"]["quantized_bytes"] <= onnxruntime_default_bytes(src, tmp_path)
    # an --exclude (or --per-channel) is the user's: onnxruntime's default call is not a candidate then
    doc = quantize(src, "ort-cpu", tmp_path / "ex.onnx", runs=0, exclude=["MatMul_1"]).to_dict()
    assert not any(t.get("call") for t in doc["quantization"]["tried"])


def test_model_bytes_reads_a_rewritten_file_again(tmp_path):
    """model_bytes remembers each file's external-data names by path, size and modification time: a model
    saved again under the same name (now with its weights inside) is measured afresh, not from memory."""
    from op_coverage.quantize.metrics import model_bytes
    p = tmp_path / "m.onnx"
    qm.save(qm.small_cnn(), p, external=True)
    assert model_bytes(p) == p.stat().st_size + (tmp_path / "m.onnx.data").stat().st_size
    qm.save(qm.small_cnn(), p)
    assert model_bytes(p) == p.stat().st_size  # the stale data file beside it is no longer named


def test_cosine_is_the_same_whatever_blas_threads():
    """The report's cosine is numpy's pairwise sum, so it does not change with the BLAS thread count
    (a long dot product through OpenBLAS is split over its threads) and is within a few ulps of the exact value."""
    import math
    import os
    import subprocess
    import sys
    code = ("import numpy as np; from op_coverage.quantize.metrics import accuracy; "
            "r = np.random.default_rng(0); w = r.standard_normal((2, 2, 8192)).astype(np.float32); "
            "print(repr(accuracy('out', w, w + 1e-2 * r.standard_normal(w.shape).astype(np.float32)).cosine))")
    got = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n)).stdout.strip()
           for n in ("1", "4")}
    assert len(got) == 1, got
    r = np.random.default_rng(0)
    w = r.standard_normal((2, 2, 8192)).astype(np.float32)
    g = (w + 1e-2 * r.standard_normal(w.shape).astype(np.float32)).astype(np.float64).ravel()
    w = w.astype(np.float64).ravel()
    exact = math.fsum(w * g) / math.sqrt(math.fsum(w * w) * math.fsum(g * g))
    assert abs(float(got.pop()) - exact) < 1e-13
