"""The steps of op_coverage quantize, called one by one as a caller of the library would (a model's
numbers without writing it, a stricter gate on the same measurement, writing later)."""
import hashlib
import os
import re
import stat

import pytest

from hal.util.io import current_umask
from op_coverage.errors import BadOption, NothingQuantized
from op_coverage.quantize import (Gates, QuantizeOptions, check, choose, gate, load, make_feeds, measure, quantize,
                                  write)

import q_models as qm


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_choose_check_measure_and_gate_write_nothing_until_asked(tmp_path):
    src = qm.save(qm.bert_like(d=128), tmp_path / "bert.onnx")
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir(), work.mkdir()
    options = QuantizeOptions(runs=0, compare=False)
    source = load(src, "ort-cpu", options)
    checked = check(choose(make_feeds(source), work))
    assert checked.chosen.choice.format == "integer-dynamic" and checked.quantized_nodes["MatMul"] >= 5
    assert checked.path.parent.parent == work and checked.rescan["not_native"] == {}
    assert checked.size["quantized_bytes"] < checked.size["float_bytes"] / 3
    measured = measure(checked)
    assert [o.name for o in measured.outputs] == ["logits"] and measured.outputs[0].cosine >= 0.999
    verdict = gate(measured)
    assert verdict.ok and verdict.failed == ()
    # a stricter gate judges the same measurement again: nothing is run
    strict = gate(measured, Gates(max_error=0.0))
    assert not strict.ok and "logits: max abs error" in strict.failed[0] and "--max-error 0" in strict.failed[0]
    assert list(out.iterdir()) == []  # nothing written yet, nothing beside the model either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert.onnx", "out", "work"]
    # written later, it is the file quantize() writes with the same options, with a plain open()'s mode
    assert write(checked, out / "bert.int8.onnx") == out / "bert.int8.onnx"
    assert stat.S_IMODE(os.stat(out / "bert.int8.onnx").st_mode) == 0o666 & ~current_umask()
    rep = quantize(src, "ort-cpu", tmp_path / "again.onnx", options)
    assert rep.written and sha(tmp_path / "again.onnx") == sha(out / "bert.int8.onnx")
    assert rep.to_dict()["quantization"]["quantized_nodes"] == checked.quantized_nodes


def test_the_report_of_a_steps_run_is_what_quantize_reports(tmp_path):
    # the accuracy document a caller builds from measure() and gate() is quantize()'s "accuracy"
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    options = QuantizeOptions(runs=0, compare=False, dims={"n": 3}, gates=Gates(min_cosine=0.99))
    source = load(src, "ort-cpu", options, output=tmp_path / "cnn.int8.onnx")
    feeds = make_feeds(source)
    assert feeds.inputs["x"].shape == (3, 3, 32, 32) and feeds.calibration_source == "generated"
    work = tmp_path / ".work"
    work.mkdir()
    measured = measure(check(choose(feeds, work)))
    doc = quantize(src, "ort-cpu", tmp_path / "cnn.int8.onnx", options).to_dict()
    assert measured.to_dict(gate(measured)) == doc["accuracy"]
    assert doc["accuracy"]["gates"] == {"max_error": None, "min_cosine": 0.99, "ok": True, "failed": []}


def test_quantize_takes_options_and_fields_that_override_them(tmp_path):
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    base = QuantizeOptions(runs=5, compare=False, exclude=["Conv_1"])
    doc = quantize(src, "ort-cpu", tmp_path / "o.onnx", base, runs=0).to_dict()
    assert doc["latency"] is None and doc["baseline"] is None
    assert {"node": "Conv_1", "op_type": "Conv", "reason": "excluded by --exclude"} in \
        doc["quantization"]["kept_float_nodes"]


@pytest.mark.parametrize("fields, named", [
    ({"runs": -1}, "QuantizeOptions(runs=-1)"),
    ({"repeats": 0}, "QuantizeOptions(repeats=0)"),
    ({"mode": "fast"}, "QuantizeOptions(mode='fast')"),
    ({"dims": {"seq": 0}}, "QuantizeOptions(dims={'seq': 0})"),
    ({"seed": 1.5}, "QuantizeOptions(seed=1.5)"),
    ({"gates": Gates}, "QuantizeOptions(gates=<class"),
    ({"exclude": [5]}, "QuantizeOptions(exclude=[5])"),
])
def test_a_bad_option_is_a_named_usage_error(fields, named):
    with pytest.raises(BadOption) as e:
        QuantizeOptions(**fields)
    assert str(e.value).startswith(named) and re.fullmatch(r"\w+\(\w+=.*\): [^;]+; .+", str(e.value)), str(e.value)
    assert e.value.exit_code == 2 and isinstance(e.value, ValueError)


@pytest.mark.parametrize("fields, fix", [({"max_error": -1.0}, "pass 0 or more (--max-error X)"),
                                         ({"max_error": float("nan")}, "None for no gate"),
                                         ({"min_cosine": 1.5}, "(--min-cosine C)")])
def test_a_gate_no_model_could_pass_is_refused(fields, fix):
    with pytest.raises(BadOption, match=r"^Gates\(") as e:
        Gates(**fields)
    assert fix in str(e.value)


def test_options_are_immutable_and_keep_lists_as_tuples():
    o = QuantizeOptions(exclude=["a", "b"], inputs="x.npz", dims={"batch": 1, "seq": 128})
    assert o.exclude == ("a", "b") and o.inputs == ("x.npz",) and o.dim_values == {"batch": 1, "seq": 128}
    assert hash(o) == hash(QuantizeOptions(exclude=("a", "b"), inputs=["x.npz"], dims=(("batch", 1), ("seq", 128))))
    with pytest.raises(AttributeError):
        o.runs = 0


def test_the_cli_reports_a_gate_no_model_could_pass_as_a_usage_error(tmp_path, run_cli):
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    r = run_cli("quantize", src, "-t", "ort-cpu", "-o", tmp_path / "o.onnx", "--min-cosine", "2")
    assert r.returncode == 2 and "Gates(min_cosine=2.0)" in r.stderr and not (tmp_path / "o.onnx").exists()


def test_choose_names_every_try_when_the_target_runs_no_int8_form(tmp_path):
    src = qm.save(qm.small_cnn(), tmp_path / "cnn.onnx")
    source = load(src, "ascend", QuantizeOptions(runs=0))
    with pytest.raises(NothingQuantized, match="ascend") as e:
        choose(make_feeds(source), tmp_path)
    assert e.value.chosen.choice.format is None and len(e.value.chosen.choice.tried) >= 2
