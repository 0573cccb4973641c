import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_cli():
    """Run ``python -m op_coverage ...`` in a subprocess; returns CompletedProcess (text)."""
    def run(*args, cwd=None):
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.run([sys.executable, "-m", "op_coverage", *map(str, args)], capture_output=True,
                              text=True, env=env, cwd=cwd, timeout=300)
    return run


@pytest.fixture(autouse=True)
def _no_probe_cache(monkeypatch):
    """Tests probe onnxruntime afresh; test_probe_cache.py turns the cache on in a temp folder."""
    monkeypatch.setenv("HAL_PROBE_CACHE", "0")
