"""op_coverage rewrite end to end: subgraphs and functions, external data, verification, exit codes."""
import hashlib
import json

import jsonschema
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rw_helpers import lacking, ops_in, run
from op_coverage.datafiles import read_json
from op_coverage.rewrite import rewrite_model

N = helper.make_node
F = TensorProto.FLOAT


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def control_flow_model() -> onnx.ModelProto:
    """Gelu inside an If branch reading an outer value; Softmax inside a Loop body; LayerNorm in a local function."""
    then_g = helper.make_graph([N("Gelu", ["x"], ["t"])], "then", [], [_vi("t", [2, 8])])
    else_g = helper.make_graph([N("Neg", ["x"], ["e"])], "else", [], [_vi("e", [2, 8])])
    body = helper.make_graph(
        [N("Softmax", ["c_in"], ["sm"], axis=-1), N("Add", ["sm", "x"], ["c_out"]), N("Identity", ["cond"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond", [], TensorProto.BOOL), _vi("c_in", [2, 8])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("c_out", [2, 8])])
    fn = helper.make_function("local", "Norm", ["A", "S"], ["B"],
                              [N("LayerNormalization", ["A", "S"], ["B"], axis=-1)],
                              opset_imports=[helper.make_opsetid("", 20)])
    g = helper.make_graph(
        [N("If", ["flag"], ["branch"], then_branch=then_g, else_branch=else_g),
         N("Loop", ["trip", "", "branch"], ["looped"], body=body),
         N("Norm", ["looped", "scale"], ["y"], domain="local")],
        "cf", [_vi("flag", [], TensorProto.BOOL), _vi("x", [2, 8]), _vi("trip", [], TensorProto.INT64)],
        [_vi("y", [2, 8])], [numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "scale")])
    m = helper.make_model(g, functions=[fn], opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("local", 1)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def test_rewrite_reaches_subgraphs_and_functions_and_keeps_outputs():
    m = control_flow_model()
    res = rewrite_model(m, lacking("Gelu,Softmax,LayerNormalization"))
    onnx.checker.check_model(res.model, full_check=True)
    assert not ops_in(res.model) & {"Gelu", "Softmax", "LayerNormalization"}, ops_in(res.model)
    assert res.replaced == {"Gelu": 1, "Softmax": 1, "LayerNormalization": 1}
    rng = np.random.default_rng(0)
    for flag in (True, False):
        feeds = {"flag": np.array(flag), "x": rng.standard_normal((2, 8)).astype(np.float32),
                 "trip": np.array(3, np.int64)}
        np.testing.assert_allclose(run(res.model, feeds)[0], run(m, feeds)[0], rtol=1e-4, atol=1e-5)


def test_blocked_op_names_the_leaf_that_blocks_it():
    m = control_flow_model()
    res = rewrite_model(m, lacking("Gelu,Erf,Exp"))  # every Erf composition needs Exp
    assert res.blocked["Gelu"]["status"] == "blocked"
    assert res.blocked["Gelu"]["blocked_by"] == ["Exp"]
    assert any("Exp: no function body and no rule" in r for r in res.blocked["Gelu"]["reasons"])
    assert "Gelu" in ops_in(res.model)  # left as it was


def _external_model(folder):
    w = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    g = helper.make_graph([N("Gemm", ["x", "W", "b"], ["h"], alpha=0.5), N("Gelu", ["h"], ["y"])], "ext",
                          [_vi("x", ["batch", 64])], [_vi("y", ["batch", 32])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.ones(32, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    p = folder / "model.onnx"
    onnx.save_model(m, str(p), save_as_external_data=True, location="model.weights", size_threshold=1024)
    return p


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_cli_rewrite_keeps_external_data_external_beside_the_output(run_cli, tmp_path):
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir(), out_dir.mkdir()
    src = _external_model(src_dir)
    before = _digest(src_dir)
    r = run_cli("rewrite", src, "-t", "ort-cpu", "--without", "Gemm,Gelu", "-o", out_dir / "new.onnx", "--json",
                "--dim", "batch=3")
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(r.stdout)
    jsonschema.Draft202012Validator(read_json("rewrite.schema.json")).validate(doc)
    assert doc["verification"]["ok"] and doc["verification"]["outputs"][0]["shape"] == [3, 32]
    assert doc["rescan"]["not_native"] == {} and doc["replaced"] == {"Gemm": 1, "Gelu": 1}
    assert sorted(p.name for p in out_dir.iterdir()) == ["new.onnx", "new.onnx.data"]
    assert _digest(src_dir) == before  # the original and its weights are untouched
    out = onnx.load(str(out_dir / "new.onnx"), load_external_data=False)
    locs = {e.value for t in out.graph.initializer for e in t.external_data if e.key == "location"}
    assert locs == {"new.onnx.data"}
    assert not ops_in(out) & {"Gemm", "Gelu"}


def test_cli_verification_failure_writes_nothing_and_exits_5(run_cli, tmp_path):
    src = _external_model(tmp_path)
    out = tmp_path / "out.onnx"
    # Erf's replacement is approximate; zero tolerance makes the difference visible
    r = run_cli("rewrite", src, "-t", "ort-cpu", "--without", "Gelu,Erf", "-o", out, "--atol", "0", "--rtol", "0")
    assert r.returncode == 5, r.stderr + r.stdout
    assert "not written" in r.stderr and "FAIL" in r.stdout
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".op_coverage-")]  # no temp left behind


def test_cli_blocked_ops_exit_4_and_are_listed(run_cli, tmp_path):
    g = helper.make_graph([N("Det", ["x"], ["d"]), N("Relu", ["d"], ["y"])], "t",
                          [_vi("x", [2, 3, 3])], [_vi("y", [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, tmp_path / "det.onnx")
    r = run_cli("rewrite", tmp_path / "det.onnx", "-t", "ort-cpu", "--without", "Det", "-o", tmp_path / "o.onnx")
    assert r.returncode == 4, r.stderr
    assert "Det: no composition; blocked by Det" in r.stdout and "still not native: Det x1" in r.stdout
    assert (tmp_path / "o.onnx").exists()


def test_cli_inputs_file_is_used_and_bad_inputs_exit_18(run_cli, tmp_path):
    src = _external_model(tmp_path)
    np.savez(tmp_path / "in.npz", x=np.full((5, 64), 0.25, np.float32))
    r = run_cli("rewrite", src, "-t", "ort-cpu", "--without", "Gelu", "-o", tmp_path / "o.onnx",
                "--inputs", tmp_path / "in.npz", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verification"]["outputs"][0]["shape"] == [5, 32]
    np.savez(tmp_path / "bad.npz", z=np.zeros(3, np.float32))
    r = run_cli("rewrite", src, "-t", "ort-cpu", "--without", "Gelu", "-o", tmp_path / "o2.onnx",
                "--inputs", tmp_path / "bad.npz")
    assert r.returncode == 18 and "z is not an input" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o2.onnx").exists()


def test_scan_report_says_replaceable_via_the_plan(tmp_path):
    from op_coverage import render, scan
    p = _external_model(tmp_path)
    rep = scan(p, ["ascend"], progress=False)
    row = next(r for r in rep.models[0].rows if r.op_type == "Gelu")
    plan = row.replacement["ascend"]
    assert plan["status"] == "replaceable" and plan["via"][0] == "gelu.pattern"  # cheaper than the body
    assert "Gelu" not in plan["leaves"]
    for fmt in ("table", "md", "csv"):
        assert "replaceable via gelu.pattern" in render(rep, fmt), fmt
    assert json.loads(render(rep, "json"))["models"][0]["ops"][0]["replacement"]["ascend"]["status"] == "replaceable"


def test_identical_nodes_reuse_one_plan_with_their_own_names():
    nodes = []
    prev = "x"
    for i in range(3):
        nodes += [N("LayerNormalization", [prev, "s"], [f"l{i}"], axis=-1), N("Gelu", [f"l{i}"], [f"g{i}"])]
        prev = f"g{i}"
    g = helper.make_graph(nodes, "chain", [_vi("x", ["b", 4, 16])], [_vi(prev, ["b", 4, 16])],
                          [numpy_helper.from_array(np.linspace(0.5, 2, 16).astype(np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    res = rewrite_model(m, lacking("LayerNormalization,Gelu"))
    onnx.checker.check_model(res.model, full_check=True)  # SSA: every copied name is fresh
    assert res.replaced == {"LayerNormalization": 3, "Gelu": 3}
    x = np.random.default_rng(2).standard_normal((2, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(run(res.model, {"x": x})[0], run(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_cli_rewrite_generates_scalar_bool_and_scalar_float_inputs(run_cli, tmp_path):
    g = helper.make_graph([N("Gelu", ["x"], ["gx"]), N("Mul", ["gx", "s"], ["h"]), N("Where", ["c", "h", "x"], ["y"])],
                          "scalar_inputs", [_vi("c", [], TensorProto.BOOL), _vi("s", []), _vi("x", [2, 3])],
                          [_vi("y", [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    onnx.save(m, tmp_path / "m.onnx")
    r = run_cli("rewrite", tmp_path / "m.onnx", "-t", "ort-cpu", "--without", "Gelu", "-o", tmp_path / "o.onnx",
                "--json")
    assert r.returncode == 0, r.stderr  # was 6: "Unable to handle object of type <class 'numpy.bool'>"
    assert json.loads(r.stdout)["verification"]["ok"]


def _json_doc(proc):
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(read_json("rewrite.schema.json")).validate(doc)
    assert doc["exit_code"] == proc.returncode and not doc["written"]
    return doc


def test_cli_rewrite_json_is_printed_on_every_exit(run_cli, tmp_path):
    # exit 6: onnxruntime cannot run the original (an op of a domain it has no kernels for)
    g = helper.make_graph([N("Gelu", ["x"], ["h"]), N("Blur", ["h"], ["y"], domain="vendor.ops")], "t",
                          [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("vendor.ops", 1)])
    m.ir_version = 10
    onnx.save(m, tmp_path / "vendor.onnx")
    r = run_cli("rewrite", tmp_path / "vendor.onnx", "-t", "ort-cpu", "--without", "Gelu", "-o", tmp_path / "o.onnx",
                "--json")
    assert r.returncode == 6, r.stderr
    doc = _json_doc(r)  # printed nothing before
    assert doc["error"]["kind"] == "cannot-verify" and "onnxruntime cannot run the original" in doc["error"]["message"]
    assert doc["replaced"] == {"Gelu": 1} and doc["checked"]
    # exit 10 (no such model) and exit 2 (no -o): the document says why
    r = run_cli("rewrite", tmp_path / "missing.onnx", "-t", "ort-cpu", "-o", tmp_path / "o.onnx", "--json")
    assert r.returncode == 10 and _json_doc(r)["error"]["kind"] == "not-found"
    r = run_cli("rewrite", tmp_path / "vendor.onnx", "-t", "ort-cpu", "--json")
    assert r.returncode == 2 and "-o/--output is required" in _json_doc(r)["error"]["message"]
    # exit 5 still carries the verification
    src = _external_model(tmp_path)
    r = run_cli("rewrite", src, "-t", "ort-cpu", "--without", "Gelu,Erf", "-o", tmp_path / "o.onnx", "--atol", "0",
                "--rtol", "0", "--json")
    assert r.returncode == 5 and _json_doc(r)["verification"]["ok"] is False
