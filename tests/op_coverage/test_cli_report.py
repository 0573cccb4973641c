"""The CLI contract: exit codes, formats, JSON schema, atomic output, folders, 80 columns."""
import csv
import io
import json

import jsonschema
import onnx
from onnx import TensorProto, helper

from oc_models import N, nested_control_flow, vi
from op_coverage import render, scan
from op_coverage.datafiles import read_json
from op_coverage.report.csvfmt import COLUMNS


def _model(tmp_path, op, name=None, opset=20):
    g = helper.make_graph([N(op, ["x"], ["y"], name="n0")], "g", [vi("x", TensorProto.FLOAT, [2, 3])],
                          [vi("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    p = tmp_path / (name or f"{op}.onnx")
    onnx.save(m, p)
    return p


def test_exit_0_when_everything_is_native(run_cli, tmp_path):
    r = run_cli("scan", _model(tmp_path, "Relu"), "-t", "ort-cpu,ort-cuda")
    assert r.returncode == 0, r.stderr
    assert "100.0%" in r.stdout


def test_exit_3_for_host_fallback_and_fail_on_unsupported_relaxes_it(run_cli, tmp_path):
    p = _model(tmp_path, "Gelu")  # the MUSA EP has no Gelu kernel; the CPU EP does
    assert run_cli("scan", p, "-t", "musa").returncode == 3
    assert run_cli("scan", p, "-t", "musa", "--fail-on", "unsupported").returncode == 0


def test_exit_4_for_unsupported_and_fail_on_never(run_cli, tmp_path):
    p = _model(tmp_path, "Gelu")  # not in the Ascend ATC map
    r = run_cli("scan", p, "-t", "ascend", "--json")
    assert r.returncode == 4
    doc = json.loads(r.stdout)
    assert doc["models"][0]["ops"][0]["support"]["ascend"]["status"] == "unsupported"
    assert run_cli("scan", p, "-t", "ascend", "--fail-on", "never").returncode == 0


def test_exit_15_bad_profile_16_unknown_target_2_usage(run_cli, tmp_path):
    p = _model(tmp_path, "Relu")
    (tmp_path / "bad.json").write_text("{not json")
    r = run_cli("scan", p, "--profile", tmp_path / "bad.json")
    assert r.returncode == 15 and "not valid JSON" in r.stderr
    r = run_cli("scan", p, "-t", "tpu9000")
    assert r.returncode == 16 and len(r.stderr.strip().splitlines()) == 1
    assert run_cli("scan", p, "--format", "pdf").returncode == 2


def test_exit_17_unwritable_output(run_cli, tmp_path):
    r = run_cli("scan", _model(tmp_path, "Relu"), "-t", "ort-cpu", "-o", tmp_path / "no" / "such" / "dir.json")
    assert r.returncode == 17 and "cannot write" in r.stderr


def test_json_validates_against_published_schema(tmp_path):
    onnx.save(nested_control_flow(), tmp_path / "nested.onnx")
    report = scan(tmp_path / "nested.onnx", ["ort-cpu", "ort-cuda", "tensorrt", "ascend", "ort-live"])
    doc = json.loads(render(report, "json"))
    jsonschema.Draft202012Validator(read_json("report.schema.json")).validate(doc)
    ops = {(o["domain"], o["op_type"]): o for o in doc["models"][0]["ops"]}
    assert ops[("com.microsoft", "FastGelu")]["support"]["ascend"]["status"] == "unsupported"
    assert ops[("com.microsoft", "FastGelu")]["support"]["ort-cuda"]["status"] == "native"
    assert ops[("custom.local", "Twice")]["function"] == "custom.local.Twice"
    assert all(o["replacement"] is None for o in doc["models"][0]["ops"])


def test_csv_has_msit_analyze_columns_first(tmp_path):
    report = scan(_model(tmp_path, "Gelu"), ["ascend", "ort-cuda"])
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert list(rows[0])[:8] == ["ori_op_name", "ori_op_type", "op_name", "op_type", "soc_type", "engine",
                                 "is_supported", "details"]
    assert list(rows[0]) == COLUMNS
    asc = next(r for r in rows if r["soc_type"] == "ascend")
    assert asc["ori_op_name"] == "n0" and asc["is_supported"] == "FALSE" and "Gelu" in asc["details"]


def test_table_fits_80_columns_with_all_targets(run_cli):
    r = run_cli("scan", "--no-progress")  # the bundled example, every target
    assert r.returncode == 4  # the example has ops some targets lack
    assert "scanning the bundled example" in r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "\033[" not in r.stdout  # not a TTY: no colour
    for target in ("ascend", "ort-cuda", "tensorrt", "musa", "ort-live"):
        assert target in r.stdout


def test_markdown_and_html_name_reasons(tmp_path):
    report = scan(_model(tmp_path, "Gelu"), ["ascend"])
    md = render(report, "md")
    assert "| `Gelu` | 1 | **unsupported** |" in md and "msit" in md
    html = render(report, "html")
    assert html.startswith("<!DOCTYPE html>") and "class='unsupported'" in html and "<script" not in html


def test_output_file_is_written_atomically(run_cli, tmp_path):
    out = tmp_path / "report.md"
    out.write_text("old")
    r = run_cli("scan", _model(tmp_path, "Relu"), "-t", "ort-cpu", "--format", "md", "-o", out)
    assert r.returncode == 0 and r.stdout == ""
    assert out.read_text().startswith("# Operator coverage")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_folder_scan_reports_every_model_and_bad_files(run_cli, tmp_path):
    _model(tmp_path, "Relu", "a.onnx")
    sub = tmp_path / "sub"
    sub.mkdir()
    _model(sub, "Gelu", "b.onnx")
    (sub / "broken.onnx").write_bytes(b"\x08\x07\x12")
    r = run_cli("scan", tmp_path, "-t", "ort-cpu", "--json")
    doc = json.loads(r.stdout)
    assert sorted(m["path"].rsplit("/", 1)[1] for m in doc["models"]) == ["a.onnx", "b.onnx"]
    assert doc["errors"][0]["kind"] == "truncated"
    assert r.returncode == 12 and "broken.onnx" in r.stderr


def test_help_teaches_with_examples(run_cli):
    r = run_cli("scan", "--help")
    assert "examples:" in r.stdout and "exit codes:" in r.stdout and "--fail-on" in r.stdout


def test_targets_json(run_cli):
    r = run_cli("targets", "--json")
    doc = json.loads(r.stdout)
    names = {t["name"] for t in doc["targets"]}
    assert {"ascend", "ort-cuda", "ort-live", "musa"} <= names
