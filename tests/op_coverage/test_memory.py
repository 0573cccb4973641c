"""Bounded memory: scanning embedded weights must not hold them (let alone twice)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oc_models import embedded

ROOT = Path(__file__).resolve().parents[2]
PEAK = ("print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])")


def _peak_kib(code: str) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code + "\n" + PEAK], capture_output=True, text=True, env=env,
                         check=True, timeout=300).stdout
    return int(out.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc (Linux only)")
@pytest.mark.parametrize("tensors", [1, 256], ids=["one-weight", "256-weights"])
def test_scan_of_embedded_weights_stays_small(tmp_path, tensors):
    # 256 weights: 256 tensor headers spread through the file; reading them through a memory
    # map touched pages around every header (up to 2 MB each with large page-cache folios)
    mib = 128  # the 1 GiB case is in bench/bench_scan.py
    p = embedded(tmp_path, mib, tensors=tensors)
    small = embedded(tmp_path, 1, name="small.onnx", tensors=tensors)
    scan = "import op_coverage, op_coverage.scan, onnx\nr = op_coverage.scan({!r}, ['ort-cpu', 'ascend'], progress=False)\n"
    # the baseline scans a 1 MiB model of the same shape: profiles, rules and onnx's schemas are
    # loaded in both, so what grows is what the weights cost
    base = _peak_kib(scan.format(str(small)))
    # 256 square weights round down to a little under mib
    scanned = _peak_kib(scan.format(str(p)) + f"assert r.models[0].model['weight_bytes'] >= 0.99 * {mib} * 2**20")
    grown = (scanned - base) / 1024
    assert grown < mib * 0.1, f"scan grew peak RSS by {grown:.0f} MiB for a {mib} MiB model"
