"""Loading: bad inputs give one line and their exit code; weights are never read."""
import os

import onnx
import pytest

from oc_models import embedded, nested_control_flow, with_external
from op_coverage.errors import NotOnnx, TruncatedModel, UnknownOpset, UnsafeExternalData
from op_coverage.onnx.load import load_for_scan


def _one_error_line(proc, code):
    assert proc.returncode == code, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_missing_file_exit_10(run_cli, tmp_path):
    line = _one_error_line(run_cli("scan", tmp_path / "nope.onnx", "-t", "ort-cpu"), 10)
    assert "no such file" in line


def test_non_onnx_file_exit_11_names_what_it_is(run_cli, tmp_path):
    p = tmp_path / "model.pt"
    p.write_bytes(b"PK\x03\x04" + os.urandom(200))
    line = _one_error_line(run_cli("scan", p, "-t", "ort-cpu"), 11)
    assert "not an ONNX model" in line and "zip" in line


def test_truncated_file_exit_12(run_cli, tmp_path):
    src = embedded(tmp_path, 1)
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    line = _one_error_line(run_cli("scan", cut, "-t", "ort-cpu"), 12)
    assert "cut short" in line


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_data_path_traversal_exit_13(run_cli, tmp_path, location):
    model = with_external(tmp_path, location=location)
    line = _one_error_line(run_cli("scan", model, "-t", "ort-cpu"), 13)
    assert "outside" in line or "leaves" in line


def test_external_data_symlink_out_of_folder_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "real.bin").write_bytes(b"\0" * 16)
    inside = tmp_path / "model"
    inside.mkdir()
    (inside / "weights.bin").symlink_to(outside / "real.bin")
    model = with_external(inside, location="weights.bin", write_data=False)
    with pytest.raises(UnsafeExternalData, match="symlink"):
        load_for_scan(model)


def test_unknown_opset_exit_14(run_cli, tmp_path):
    m = nested_control_flow()
    m.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
    p = tmp_path / "future.onnx"
    p.write_bytes(m.SerializeToString())
    line = _one_error_line(run_cli("scan", p, "-t", "ort-cpu"), 14)
    assert "newer than" in line


def test_undeclared_domain_is_refused(tmp_path):
    m = nested_control_flow()
    del m.opset_import[2]  # com.microsoft used but no longer imported
    p = tmp_path / "undeclared.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(UnknownOpset, match="com.microsoft"):
        load_for_scan(p)


def test_empty_and_text_files_are_not_onnx(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "text.onnx").write_text("hello, this is not a model\n")
    for name in ("empty.onnx", "text.onnx"):
        with pytest.raises(NotOnnx):
            load_for_scan(tmp_path / name)


def test_external_data_is_never_read(tmp_path):
    model = with_external(tmp_path, dims=(256, 256))
    os.chmod(tmp_path / "weights.bin", 0)  # unreadable: any read would fail
    loaded = load_for_scan(model)
    assert loaded.external_files[0].bytes == 256 * 256 * 4
    assert loaded.external_files[0].exists


def test_missing_external_file_is_a_warning_not_an_error(tmp_path):
    model = with_external(tmp_path, write_data=False)
    loaded = load_for_scan(model)
    assert any("missing" in w for w in loaded.warnings)


def test_model_over_2gb_with_external_data(tmp_path):
    # 3 GiB of weights in a sparse file: the scan reads only the small .onnx
    model = with_external(tmp_path, dims=(3 * 1024, 1024, 256))
    assert (tmp_path / "weights.bin").stat().st_size == 3 * 2**30
    loaded = load_for_scan(model)
    assert loaded.external_weight_bytes == 3 * 2**30
    assert loaded.file_bytes < 10_000


def test_embedded_weights_are_elided_not_copied(tmp_path):
    p = embedded(tmp_path, 16)
    loaded = load_for_scan(p)
    w = loaded.model.graph.initializer[0]
    assert w.raw_data == b"" and list(w.dims) == [4096, 1024]
    assert loaded.embedded_weight_bytes >= 16 * 2**20
    assert loaded.model.ByteSize() < 10_000


def test_truncated_inside_a_tensor_is_detected(tmp_path):
    p = embedded(tmp_path, 1)
    data = p.read_bytes()
    (tmp_path / "t.onnx").write_bytes(data[:-100])
    with pytest.raises(TruncatedModel):
        load_for_scan(tmp_path / "t.onnx")


@pytest.mark.parametrize("depth", [33, 340])
def test_if_nest_too_deep_for_protobuf_is_one_line_exit_11(run_cli, tmp_path, depth):
    from oc_models import if_nest_bytes
    p = tmp_path / "deep.onnx"
    p.write_bytes(if_nest_bytes(depth))  # 340 levels: RecursionError traceback before; 33: "corrupt protobuf"
    line = _one_error_line(run_cli("scan", p, "-t", "ort-cpu", "--no-plugins"), 11)
    assert "nested too deeply" in line and "100 message levels" in line and "flatten" in line


def test_deepest_if_nest_protobuf_reads_scans_with_short_paths(tmp_path):
    import json
    import subprocess
    import sys

    from oc_models import if_nest_bytes
    p = tmp_path / "deep.onnx"
    p.write_bytes(if_nest_bytes(32))  # the deepest onnx and onnxruntime load
    # the scan's own peak memory, its VmHWM at exit: RUSAGE_CHILDREN here is the session's largest child (a
    # 2-rank training run of tests/llmstack takes more than the bound), and a child's ru_maxrss starts at the
    # pytest process's (exec keeps the high-water mark of the memory it replaces)
    peak = tmp_path / "peak_kib"
    watch = ("import atexit, os, runpy, sys\n"
             "def peak():\n"
             "    hwm = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
             "    open(os.environ['PEAK_FILE'], 'w').write(hwm)\n"
             "atexit.register(peak)\n"
             "sys.argv = ['op_coverage', *sys.argv[1:]]\n"
             "runpy.run_module('op_coverage', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", watch, "scan", str(p), "-t", "ort-cpu", "--no-plugins", "--json"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PEAK_FILE=str(peak)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # before: each unnamed If put its generated name (path included) into its body's path, so paths
    # doubled per level and 28 levels took 20 GB
    assert int(peak.read_text()) < 1_000_000  # KiB
    rows = json.loads(proc.stdout)["models"][0]["ops"]
    assert {r["op_type"]: r["count"] for r in rows} == {"Identity": 32, "If": 31}
    step = "/If_0.then_branch"
    for loc in (loc for r in rows for loc in r["locations"]):
        assert loc["path"].startswith("main") and len(loc["path"]) <= len("main" + step * 31), loc["path"]
        if loc["path"] != "main":  # a generated name is the path and the op's place in its graph
            assert loc["node"].startswith(loc["path"] + "/") and loc["node"].count("/") == loc["path"].count("/") + 1
