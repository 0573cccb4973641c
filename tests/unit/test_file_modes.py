"""Every file hal writes gets the mode a plain open() would: 0o666 less the umask (mkstemp gives 0600)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hal.util.io import atomic_write, current_umask

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_umask_is_read_without_changing_it(umask):
    assert current_umask() == umask
    assert current_umask() == umask


def test_atomic_write_new_and_replaced_files_honour_the_umask(umask, tmp_path):
    p = tmp_path / "report.json"
    atomic_write(p, "{}")
    assert _mode(p) == 0o666 & ~umask
    atomic_write(p, "{\"again\": 1}")
    assert _mode(p) == 0o666 & ~umask and json.loads(p.read_text()) == {"again": 1}


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "op_coverage", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_op_coverage_report_and_rewritten_model_with_its_data_honour_the_umask(umask, tmp_path):
    w = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Gelu", ["h"], ["y"])],
                          "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=1024)
    r = _cli("scan", tmp_path / "m.onnx", "-t", "ort-cpu", "--no-plugins", "-o", tmp_path / "report.txt")
    assert r.returncode == 0, r.stderr
    r = _cli("rewrite", tmp_path / "m.onnx", "-t", "ort-cpu", "--without", "Gelu", "-o", tmp_path / "out.onnx")
    assert r.returncode == 0, r.stderr + r.stdout
    for name in ("report.txt", "out.onnx", "out.onnx.data"):  # the data file was 0600 (onnx writes it so)
        assert _mode(tmp_path / name) == 0o666 & ~umask, name


def test_checkpoint_files_and_latest_honour_the_umask(tmp_path):
    torch = pytest.importorskip("torch", reason="hal.checkpoint saves torch state")
    import hal.checkpoint as ckpt
    old = os.umask(0o022)
    try:
        ckpt.save(tmp_path, 1, model=torch.nn.Linear(2, 2))
    finally:
        os.umask(old)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert tmp_path / "latest" in files
    assert {p.name: oct(_mode(p)) for p in files} == {p.name: oct(0o644) for p in files}
