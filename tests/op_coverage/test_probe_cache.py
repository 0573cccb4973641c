"""ort-live answers kept per onnxruntime build: a scan from the cache reads the same as a probing one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from oc_models import nested_control_flow

pytest.importorskip("onnxruntime", reason="ort-live probes the installed onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "op_coverage" / "examples" / "tiny_block.onnx"

CHILD = """
import io, json, sys
from contextlib import redirect_stdout
from op_coverage.cli import main
out = {{}}
for fmt in ("table", "json", "md"):
    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["scan", {path!r}, "--format", fmt, "--no-progress", "--no-plugins", "--fail-on", "never"])
    out[fmt] = buf.getvalue()
print(json.dumps({{"out": out, "ort_imported": "onnxruntime" in sys.modules}}))
"""


def _scan(path, env):
    r = subprocess.run([sys.executable, "-c", CHILD.format(path=str(path))], capture_output=True, text=True,
                       env=env, timeout=300, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def _env(tmp_path, cache="1"):
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                XDG_CACHE_HOME=str(tmp_path / "cache"), HAL_PROBE_CACHE=cache)


@pytest.mark.parametrize("model", ["tiny_block", "nested_control_flow"])
def test_a_scan_from_the_cache_prints_what_a_probing_scan_prints_without_onnxruntime(tmp_path, model):
    path = TINY
    if model == "nested_control_flow":
        path = tmp_path / "nested.onnx"
        onnx.save(nested_control_flow(), path)
    uncached = _scan(path, _env(tmp_path, cache="0"))
    first = _scan(path, _env(tmp_path))
    second = _scan(path, _env(tmp_path))
    assert uncached["ort_imported"] and first["ort_imported"]
    assert not second["ort_imported"]  # every probe answered from the cache
    assert first["out"] == uncached["out"]
    assert second["out"] == uncached["out"]
    assert "ort-live" in second["out"]["table"]
    files = list((tmp_path / "cache" / "hal" / "op_coverage").glob("ort-live-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["schema"] == "op_coverage.ort_live_probes/1" and data["verdicts"]
    assert data["runtime"]["providers"]


def test_a_new_signature_is_probed_and_added(tmp_path):
    _scan(TINY, _env(tmp_path))
    path = tmp_path / "nested.onnx"
    onnx.save(nested_control_flow(), path)
    r = _scan(path, _env(tmp_path))
    assert r["ort_imported"]  # Loop/If bodies hold ops the tiny model has not
    assert not _scan(path, _env(tmp_path))["ort_imported"]


def test_cache_off_writes_nothing(tmp_path):
    _scan(TINY, _env(tmp_path, cache="0"))
    assert not list(tmp_path.rglob("ort-live-*.json"))


def test_another_onnxruntime_build_uses_another_file(tmp_path, monkeypatch):
    from op_coverage.targets import ort_live_cache as probe_cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HAL_PROBE_CACHE", "1")
    a = probe_cache.ProbeCache()
    assert a.build and a.path.endswith(f"ort-live-{a.build}.json")
    a.put("k", {"status": "native"})
    a.save()
    assert probe_cache.ProbeCache().verdicts == {"k": {"status": "native"}}
    assert probe_cache.ProbeCache(build="0" * 16).verdicts == {}
