"""Scan time and peak memory on a ~1 GB model with embedded weights, against named baselines.

Baselines measured in the same run, on the same file:
  * raw read: ``cat model.onnx > /dev/null`` (page cache dropped is not possible without root,
    so the first read warms the cache and both are timed warm);
  * onnxruntime's usability checker: ``python -m onnxruntime.tools.check_onnx_model_mobile_usability``;
  * ``onnx.load(path)`` (what a naive scanner does).

Usage: python bench/bench_scan.py [--mb 1024] [--keep DIR]
Prints ratios; goal: scan <= 3x raw read, scan peak RSS well under the file size.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "op_coverage"))

CHILD = """
import resource, sys, time
t = time.perf_counter()
{body}
dt = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(dt, int(hwm) * 1024)  # VmHWM: this process's peak RSS (ru_maxrss would include the forking parent)
"""


def child(body: str) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD.format(body=body)], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    return float(out[-2]), int(out[-1])


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--keep", help="folder to build the model in (default: a temp folder)")
    a = ap.parse_args()
    from oc_models import embedded

    with tempfile.TemporaryDirectory(dir=a.keep) as d:
        path = embedded(Path(d), a.mb)
        size = path.stat().st_size
        timed(["cat", str(path)])  # warm the page cache for every contender alike
        cat = min(timed(["sh", "-c", f"cat '{path}' > /dev/null"]) for _ in range(3))
        base_t, base_rss = child("import op_coverage, op_coverage.scan, onnx")
        scan_t, scan_rss = child(f"import op_coverage, op_coverage.scan, onnx\n"
                                 f"ts = op_coverage.load_targets(use_plugins=False)\n"
                                 f"t = time.perf_counter()\n"
                                 f"r = op_coverage.scan({str(path)!r}, ['ort-cpu', 'ascend', 'tensorrt'], target_set=ts, progress=False)")
        load_t, load_rss = child(f"import onnx\nm = onnx.load({str(path)!r})")
        checker = timed([sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(path)])
        # scan_t is measured inside the process after imports; add them back for a fair wall-clock view
        wall = timed([sys.executable, "-m", "op_coverage", "scan", str(path), "-t", "ort-cpu,ascend,tensorrt",
                      "--fail-on", "never", "--no-progress"])
        print(f"model: {size / 2**20:.0f} MiB embedded weights ({path.name}); machine: {os.cpu_count()}-core CPU")
        print(f"raw read (cat > /dev/null, warm): {cat:8.3f} s")
        print(f"op_coverage.scan (in-process):    {scan_t:8.3f} s   ratio to raw read {scan_t / cat:5.2f}x")
        print(f"op_coverage scan CLI (wall):      {wall:8.3f} s   (process start and imports included)")
        print(f"onnx.load (naive):                {load_t:8.3f} s   ratio to raw read {load_t / cat:5.2f}x")
        print(f"ORT usability checker (wall):     {checker:8.3f} s")
        print(f"peak RSS: scan {scan_rss / 2**20:.0f} MiB (imports alone {base_rss / 2**20:.0f} MiB; "
              f"scan adds {(scan_rss - base_rss) / 2**20:.0f} MiB = {(scan_rss - base_rss) / size:.3f} x file size); "
              f"onnx.load {load_rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
