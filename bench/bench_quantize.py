"""Wall time of ``op_coverage quantize -t ort-cpu`` against onnxruntime's own ``quantize_dynamic`` on the same model.

Models: tests/op_coverage/q_embed_models.py (LLaMA-like with tied embeddings, BERT-like, LSTM LM;
vocabulary 8192, width 64), exported once into a temporary folder.

Each timing is a fresh process (imports included), the way a user runs either:
  * hal: ``python -m op_coverage quantize M -t ort-cpu -o OUT``, default flags: the format choice
    (with onnxruntime's default result as a candidate), the rescan, the onnx.checker pass, the
    accuracy check, the latency runs (10 x 3) and the side-by-side with onnxruntime's default call;
  * hal --runs 0 --no-compare: the same without the latency runs and the side-by-side
    (the quantization, the rescan and the accuracy check, as the goal counts them);
  * onnxruntime: ``python -c "quantize_dynamic(M, OUT, weight_type=QuantType.QInt8)"``.
Every contender reads compiled bytecode, as an installed package does (pip writes it at install
time, and Python writes it on the first import of a source checkout): the children get a
``PYTHONPYCACHEPREFIX`` in the bench's temporary folder, filled by the warm-up runs, and
``PYTHONDONTWRITEBYTECODE`` is dropped for them.  Without that, on a machine that sets
``PYTHONDONTWRITEBYTECODE``, every ``op_coverage`` run compiles its ~70 modules from source
(about 0.04 s of CPU) while onnxruntime reads its cached bytecode from site-packages;
``--source-compile`` measures that way.
The three run in turn, the order rotating every repeat, so machine load hits all alike; the
ratio per repeat is hal / onnxruntime, and the bench prints its median with min and max, then
the sizes (float, hal's result, onnxruntime's) from one ``--json`` run.  A second line per model
gives the same for CPU time (user + system of the process), which other work on a shared machine
moves far less than wall time.

Usage: python bench/bench_quantize.py [--repeats 7] [--models llama,bert,lstm]
Goal (issue 23, item 5): hal / onnxruntime <= 1.5.
"""
import argparse
import json
import os
import resource
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
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def bytecode_cache(folder: Path) -> None:
    """Let the children write and read compiled bytecode in *folder* (see the module docstring)."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(folder)


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process running *cmd*."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-1000:]}")
    return dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--models", default="llama,bert,lstm")
    ap.add_argument("--source-compile", action="store_true",
                    help="keep this environment's PYTHONDONTWRITEBYTECODE: op_coverage compiles its modules every run")
    a = ap.parse_args()
    import q_embed_models as qe
    quantize = [sys.executable, "-m", "op_coverage", "quantize"]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        if not a.source_compile:
            bytecode_cache(d / "pycache")
        print(f"bytecode: {'compiled from source every run' if a.source_compile else 'cached (as installed)'}")
        print(f"{'model':8} {'hal s':>6} {'min s':>6} {'ort s':>6}  {'hal/ort median (min-max)':26} "
              f"{'min/ort':18} size: float, hal, onnxruntime")
        for name in a.models.split(","):
            src = qe.export(name, d / f"{name}.onnx")
            cmds = {"hal": [*quantize, str(src), "-t", "ort-cpu", "-o", str(d / "hal.onnx")],
                    "min": [*quantize, str(src), "-t", "ort-cpu", "-o", str(d / "min.onnx"), "--runs", "0",
                            "--no-compare"],
                    "ort": [sys.executable, "-c", ORT, str(src), str(d / "ort.onnx")]}
            times = {k: [] for k in cmds}
            cpu = {k: [] for k in cmds}
            for k in cmds:  # warm the file cache
                timed(cmds[k])
            keys = list(cmds)
            for i in range(a.repeats):
                for k in keys[i % 3:] + keys[:i % 3]:
                    wall, used = timed(cmds[k])
                    times[k].append(wall)
                    cpu[k].append(used)
            r = [h / o for h, o in zip(times["hal"], times["ort"])]
            rm = [h / o for h, o in zip(times["min"], times["ort"])]
            rc = [h / o for h, o in zip(cpu["hal"], cpu["ort"])]
            rcm = [h / o for h, o in zip(cpu["min"], cpu["ort"])]
            med = {k: statistics.median(v) for k, v in times.items()}
            doc = json.loads(subprocess.run([*cmds["hal"], "--json", "--runs", "0"], capture_output=True, text=True,
                                            env=ENV).stdout)
            fb, hb, ob = doc["size"]["float_bytes"], doc["size"]["quantized_bytes"], doc["baseline"]["bytes"]
            print(f"{name:8} {med['hal']:6.2f} {med['min']:6.2f} {med['ort']:6.2f}  {spread(r):26} {spread(rm):18} "
                  f"{fb / 1e6:.2f} MB, {hb / fb:.3f}x, {ob / fb:.3f}x (hal/onnxruntime {hb / ob:.4f})")
            print(f"{'  cpu':8} {statistics.median(cpu['hal']):6.2f} {statistics.median(cpu['min']):6.2f} "
                  f"{statistics.median(cpu['ort']):6.2f}  {spread(rc):26} {spread(rcm):18} (user + system seconds; "
                  f"load average {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
