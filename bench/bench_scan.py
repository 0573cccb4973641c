"""Scan time and peak memory on a ~1 GB model with embedded weights, against named baselines.

The model is the shape of a real network: 256 weight tensors (a chain of MatMuls), so the
scan meets 256 tensor headers spread through the file.  Per repeat, interleaved on the same
warm file:
  * raw read: ``cat model.onnx > /dev/null`` (the page cache cannot be dropped without root,
    so the first read warms it and every contender is timed warm);
  * ``op_coverage scan model.onnx`` with its default targets (hal's plugin profiles
    included), wall clock and peak RSS of the process;
  * the same with named targets (``-t ort-cpu,ascend,tensorrt``);
  * ``op_coverage.scan()`` in-process, after imports.
Once: ``onnx.load(path)`` (what a naive scanner does) and onnxruntime's usability checker.

Usage: python bench/bench_scan.py [--mb 1024] [--tensors 256] [--repeats 5] [--keep DIR]
Prints the median ratio to the raw read with its spread (min-max over repeats).
Goal (issue 13): default targets <= 2x raw read, peak RSS <= 0.1x the file size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys, time
t = time.perf_counter()
{body}
dt = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(dt, int(hwm) * 1024)  # VmHWM: this process's peak RSS (ru_maxrss would include the forking parent)
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def child(body: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(body=body)], capture_output=True, text=True,
                         env=_env(), check=True).stdout.split()
    return float(out[-2]), int(out[-1])


def timed(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one process (``wait4`` gives that child's own)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return time.perf_counter() - t, ru.ru_maxrss * 1024


def spread(xs: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(statistics.median(xs))} (min {fmt.format(min(xs))}, max {fmt.format(max(xs))})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--tensors", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", help="folder to build the model in (default: a temp folder)")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=a.keep) as d:
        # built in a child: a forked child's ru_maxrss starts at its parent's RSS, so the
        # parent must stay small for the scan's peak RSS to be its own
        path = Path(d) / "big.onnx"
        build = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests' / 'op_coverage')!r})\n"
                 f"from pathlib import Path\nfrom oc_models import embedded\n"
                 f"embedded(Path({d!r}), {a.mb}, tensors={a.tensors})")
        subprocess.run([sys.executable, "-c", build], check=True, env=_env())
        size = path.stat().st_size
        cat_cmd = ["sh", "-c", f"cat '{path}' > /dev/null"]
        scan_cmd = [sys.executable, "-m", "op_coverage", "scan", str(path), "--fail-on", "never", "--no-progress"]
        named = scan_cmd + ["-t", "ort-cpu,ascend,tensorrt"]
        in_proc = (f"import op_coverage, op_coverage.scan, onnx\nts = op_coverage.load_targets()\n"
                   f"t = time.perf_counter()\n"
                   f"r = op_coverage.scan({str(path)!r}, 'all', target_set=ts, progress=False)")
        timed(cat_cmd)  # warm the page cache for every contender alike
        # and ort-live's probe cache (~/.cache/hal/op_coverage), as a user's second scan finds it
        t_first = timed(scan_cmd)[0]
        rows = {k: [] for k in ("cat", "scan", "scan_rss", "named", "inproc", "inproc_rss")}
        for _ in range(a.repeats):  # interleaved: machine noise hits every contender alike
            rows["cat"].append(timed(cat_cmd)[0])
            t, rss = timed(scan_cmd)
            rows["scan"].append(t)
            rows["scan_rss"].append(rss)
            rows["named"].append(timed(named)[0])
            t, rss = child(in_proc)
            rows["inproc"].append(t)
            rows["inproc_rss"].append(rss)
        ratio = [s / c for s, c in zip(rows["scan"], rows["cat"])]
        ratio_named = [s / c for s, c in zip(rows["named"], rows["cat"])]
        ratio_in = [s / c for s, c in zip(rows["inproc"], rows["cat"])]
        base_t, base_rss = child("import op_coverage, op_coverage.scan, onnx")
        load_t, load_rss = child(f"import onnx\nm = onnx.load({str(path)!r})")
        checker, _ = timed([sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(path)])
        print(f"model: {size / 2**20:.0f} MiB, {a.tensors} embedded weight tensors ({path.name}); "
              f"machine: {os.cpu_count()}-core CPU; {a.repeats} interleaved repeats, median (min, max)")
        print(f"first scan (probes onnxruntime unless its cache already knows them): {t_first:.3f} s")
        print(f"raw read (cat > /dev/null, warm):        {spread(rows['cat'])} s")
        print(f"op_coverage scan, default targets (CLI): {spread(rows['scan'])} s   "
              f"ratio to raw read {spread(ratio, '{:.2f}')}x")
        print(f"op_coverage scan, -t 3 targets (CLI):    {spread(rows['named'])} s   "
              f"ratio to raw read {spread(ratio_named, '{:.2f}')}x")
        print(f"op_coverage.scan('all') in-process (after imports): {spread(rows['inproc'])} s   "
              f"ratio to raw read {spread(ratio_in, '{:.2f}')}x")
        print(f"imports alone (op_coverage, onnx): peak RSS {base_rss / 2**20:.0f} MiB")
        rss = rows["scan_rss"]
        print(f"peak RSS, scan CLI default targets: {spread([r / 2**20 for r in rss], '{:.0f}')} MiB = "
              f"{spread([r / size for r in rss], '{:.3f}')} x file size (goal <= 0.1x)")
        print(f"peak RSS, in-process scan: {statistics.median(rows['inproc_rss']) / 2**20:.0f} MiB "
              f"(imports alone {base_rss / 2**20:.0f} MiB)")
        print(f"onnx.load (naive): {load_t:.3f} s, peak RSS {load_rss / 2**20:.0f} MiB "
              f"({load_rss / size:.2f} x file size)")
        print(f"ORT usability checker (wall): {checker:.3f} s")


if __name__ == "__main__":
    main()
