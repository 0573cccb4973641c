"""What tracing costs, and how long a scan of a trace takes.

1. Trace overhead: for corpus scripts (CUDA-written, run to their end), the whole command a user
   runs, each in a fresh process, interleaved in every repeat:

   * ``HAL_BACKEND=emu hal run --quiet script.py``      — the named baseline: a plain emulator run;
   * ``op_coverage trace script.py --quiet -o ops.json`` — the same run, recording every op.

   Prints the median wall time of each, the ratio trace / plain run, and its spread.

2. Scan: ``op_coverage.torch.scan.scan_trace`` of each trace against ascend, mlu, musa, xpu, mps
   and gcu, in process, median over repeats (milliseconds; the first call, which loads the op
   lists and the planner's cache, reported apart), and the whole ``op_coverage scan ops.json``
   command in a fresh process.

    python bench/bench_trace.py                  # 3 scripts, 3 repeats
    python bench/bench_trace.py --repeats 5 mnist_cnn vae
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPTS = os.path.join(ROOT, "tests", "corpus", "scripts")
DEFAULT = ("mnist_cnn", "vae", "transformer_lm")
TARGETS = ["ascend", "mlu", "musa", "xpu", "mps", "gcu"]


def _timed(cmd, env, cwd):
    start = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"bench_trace: {' '.join(cmd)} failed ({r.returncode}): {r.stderr[-800:]}")
    return took


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scripts", nargs="*", default=list(DEFAULT))
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS="1", HAL_RUN_QUIET="1")
    env.pop("HAL_EMU_OPS", None)
    tmp = tempfile.mkdtemp(prefix="bench-trace-")
    ratios, traces = [], {}
    print(f"trace overhead: whole commands, fresh processes, interleaved, median of {a.repeats}")
    for name in a.scripts:
        script = os.path.join(SCRIPTS, name + ".py")
        out = os.path.join(tmp, name + ".json")
        plain = [sys.executable, "-m", "hal", "run", "--quiet", script]
        trace = [sys.executable, "-m", "op_coverage", "trace", script, "--quiet", "-o", out]
        times = {"plain": [], "trace": []}
        for _ in range(a.repeats):
            times["plain"].append(_timed(plain, dict(env, HAL_BACKEND="emu"), tmp))
            times["trace"].append(_timed(trace, env, tmp))
        per = [t / b for t, b in zip(times["trace"], times["plain"])]
        ratios.append(statistics.median(per))
        traces[name] = out
        print(f"  {name + '.py':24} plain emu {statistics.median(times['plain']):6.2f}s  traced "
              f"{statistics.median(times['trace']):6.2f}s  trace/plain {statistics.median(per):.2f}x "
              f"(spread {min(per):.2f}-{max(per):.2f})")
    print(f"  median over scripts: trace/plain {statistics.median(ratios):.2f}x "
          f"(spread {min(ratios):.2f}-{max(ratios):.2f})")

    sys.path.insert(0, ROOT)
    from op_coverage.torch.scan import scan_trace
    from op_coverage.torch.trace import load
    print(f"scan of a trace against {', '.join(TARGETS)} (in process, plans included)")
    for name, path in traces.items():
        trace = load(path)
        start = time.perf_counter()
        scan_trace(trace, TARGETS)
        first = (time.perf_counter() - start) * 1e3
        runs = []
        for _ in range(max(5, a.repeats)):
            start = time.perf_counter()
            scan_trace(trace, TARGETS)
            runs.append((time.perf_counter() - start) * 1e3)
        cmd = [sys.executable, "-m", "op_coverage", "scan", path, "-t", ",".join(TARGETS), "--json"]
        whole = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            whole.append(time.perf_counter() - start)
        print(f"  {name + '.json':24} {len(trace['ops']):4d} ops  first {first:7.1f} ms  then "
              f"{statistics.median(runs):6.1f} ms (spread {min(runs):.1f}-{max(runs):.1f})  whole command "
              f"{statistics.median(whole):.2f}s")
    print(json.dumps({"trace_over_plain_median": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    main()
