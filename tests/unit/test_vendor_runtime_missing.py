"""A vendor package installed without its runtime (torch_npu without the CANN toolkit) is told in one line:
what is installed, what is missing, how to set it up and check it -- by the probe, by the load, and by every
hal command when torch's device-extension autoload makes ``import torch`` itself fail.  The real package:
run in a venv with torch-npu installed (PyPI has it; no CANN here) with TORCH_DEVICE_BACKEND_AUTOLOAD=0 for
pytest itself, where the last test runs hal as a user would (autoload on)."""
import os
import importlib.util
import subprocess
import sys

import pytest

from hal.plugin.facts import builtin_runtime
from hal.plugin.kit import VendorPlugin
from hal.plugin.probe import ProbeContext, TorchFacts
from hal.plugin.spec import Status, builtin_spec
from hal.plugin.torch_import import explain


def _context(tmp_path, env, has_module=True):
    return ProbeContext(root=tmp_path, env=env, torch=TorchFacts(version="2.14.0"),
                        find_spec=lambda name: object() if has_module else None)


def test_the_probe_names_the_missing_cann_and_its_fix(tmp_path):
    plugin = VendorPlugin(builtin_spec("ascend"), runtime=builtin_runtime("ascend"))
    result = plugin.probe(_context(tmp_path, {}))
    assert result.status is Status.NOT_INSTALLED
    assert "torch_npu" in result.reason and "is installed but the CANN toolkit is not set up" in result.reason
    assert "ASCEND_HOME_PATH is unset" in result.reason and "set_env.sh" in result.reason
    assert "npu-smi info" in result.reason and "\n" not in result.reason


def test_a_set_up_toolkit_leaves_the_device_question_to_the_nodes(tmp_path):
    (tmp_path / "opt" / "cann").mkdir(parents=True)
    plugin = VendorPlugin(builtin_spec("ascend"), runtime=builtin_runtime("ascend"))
    assert plugin.probe(_context(tmp_path, {"ASCEND_HOME_PATH": "/opt/cann"})).status is Status.NO_DEVICE
    assert "is not a folder" in plugin.probe(_context(tmp_path, {"ASCEND_HOME_PATH": "/opt/gone"})).reason


def test_without_the_package_the_runtime_is_not_mentioned(tmp_path):
    plugin = VendorPlugin(builtin_spec("ascend"), runtime=builtin_runtime("ascend"))
    result = plugin.probe(_context(tmp_path, {}, has_module=False))
    assert result.status is Status.NOT_INSTALLED and result.reason == "torch_npu is not installed"


def test_torchs_autoload_failure_becomes_one_line(monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    try:
        try:
            raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")
        except ImportError as cause:  # what torch 2.14's _import_device_backends raises, from the extension's error
            raise RuntimeError("Failed to load the backend extension: torch_npu. You can disable extension "
                               "auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.") from cause
    except RuntimeError as exc:
        line = explain(exc)
    assert line.startswith("import torch failed: it loads the installed device extension torch_npu")
    assert "libhccl.so" in line and "ASCEND_HOME_PATH is unset" in line and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in line
    assert explain(RuntimeError("something else")) is None


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is None,
                    reason="needs torch-npu installed (a venv with torch 2.14.0 and torch-npu 2.14.0 from PyPI, pytest run "
                           "with TORCH_DEVICE_BACKEND_AUTOLOAD=0)")
def test_the_real_package_without_cann():
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_HOME_PATH", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    out = subprocess.run([sys.executable, "-m", "hal", "list"], capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 3 and len(lines) == 1, out.stderr
    assert "torch_npu 2.14" in lines[0] and "the CANN toolkit is not set up" in lines[0]
