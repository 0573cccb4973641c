"""Wall time of ``op_coverage quantize -t ort-cpu`` against onnxruntime's own ``quantize_dynamic`` on the same model.

Models: tests/op_coverage/q_embed_models.py (LLaMA-like with tied embeddings, BERT-like, LSTM LM;
vocabulary 8192, width 64), exported once into a temporary folder.

Each timing is a fresh process (imports included), the way a user runs either:
  * hal: ``python -m op_coverage quantize M -t ort-cpu -o OUT --json --runs 0 --no-compare``
    (the format choice, the rescan, the onnx.checker pass and the accuracy check; no latency
    runs and no side-by-side, which measures onnxruntime's call a second time);
  * hal+compare: the same with the side-by-side (``--no-compare`` dropped);
  * onnxruntime: ``python -c "quantize_dynamic(M, OUT, weight_type=QuantType.QInt8)"``.
The three run in turn, the order rotating every repeat, so machine load hits all alike; the
ratio per repeat is hal / onnxruntime, and the bench prints its median with min and max.

Usage: python bench/bench_quantize.py [--repeats 5] [--models llama,bert,lstm]
Goal (issue 23, item 5): hal / onnxruntime <= 1.5.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "op_coverage"))

ORT = ("import sys; from onnxruntime.quantization import quantize_dynamic, QuantType; "
       "quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8)")


def timed(cmd: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-1000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", default="llama,bert,lstm")
    a = ap.parse_args()
    import q_embed_models as qe
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        print(f"{'model':8} {'hal s':>7} {'+cmp s':>7} {'ort s':>7}  hal/ort median (min-max)   +cmp/ort median")
        for name in a.models.split(","):
            src = qe.export(name, d / f"{name}.onnx")
            cmds = {"hal": [sys.executable, "-m", "op_coverage", "quantize", str(src), "-t", "ort-cpu", "-o",
                            str(d / "hal.onnx"), "--json", "--runs", "0", "--no-compare"],
                    "cmp": [sys.executable, "-m", "op_coverage", "quantize", str(src), "-t", "ort-cpu", "-o",
                            str(d / "cmp.onnx"), "--json", "--runs", "0"],
                    "ort": [sys.executable, "-c", ORT, str(src), str(d / "ort.onnx")]}
            times = {k: [] for k in cmds}
            for k in cmds:  # warm the file cache
                timed(cmds[k])
            keys = list(cmds)
            for i in range(a.repeats):
                for k in keys[i % 3:] + keys[:i % 3]:
                    times[k].append(timed(cmds[k]))
            r = [h / o for h, o in zip(times["hal"], times["ort"])]
            rc = [h / o for h, o in zip(times["cmp"], times["ort"])]
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{name:8} {med['hal']:7.2f} {med['cmp']:7.2f} {med['ort']:7.2f}  {statistics.median(r):.2f}x "
                  f"({min(r):.2f}-{max(r):.2f})           {statistics.median(rc):.2f}x ({min(rc):.2f}-{max(rc):.2f})")


if __name__ == "__main__":
    main()
