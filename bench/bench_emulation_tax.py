"""Emulation tax over the corpus: each CUDA-written script of tests/corpus, run as a user runs
it, on the emulated accelerator against the CPU.

For every script (DDP ones at 2 ranks) three commands run in fresh processes, interleaved
in every repeat so that load from elsewhere hits them alike:

* ``python script.py``                    — raw torch on the CPU (the named baseline);
* ``HAL_BACKEND=cpu hal run script.py``   — the same script through hal, on the CPU;
* ``HAL_BACKEND=emu hal run script.py``   — through hal, on the emulated accelerator.

It prints, per script, the median wall time of each and the ratios emu / hal-cpu (the
emulation tax: the same hal run, only the device differs) and emu / raw; then the median and
the spread (min, max) of each ratio over the corpus.

    python bench/bench_emulation_tax.py                    # whole corpus, 3 repeats
    python bench/bench_emulation_tax.py --repeats 5 mnist_cnn word_lm_lstm
    python bench/bench_emulation_tax.py --json > tax.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(os.path.dirname(HERE), "tests", "corpus")
sys.path.insert(0, CORPUS)
import check_plain_cpu as corpus  # noqa: E402

VARIANTS = ("raw", "hal_cpu", "emu")


def _command(entry, variant):
    if variant == "raw":
        return corpus.command_for(entry), None
    backend = "cpu" if variant == "hal_cpu" else "emu"
    return corpus.command_for(entry, hal=backend), backend


def _time(entry, variant, timeout):
    cmd, backend = _command(entry, variant)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HAL_RUN_QUIET="1")
    if backend:
        env["HAL_BACKEND"] = backend
    rc, secs, _, out, err = corpus.run_once(cmd, timeout, env=env)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {rc}): {corpus.first_error_line(err, out)}")
    return secs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scripts", nargs="*", help="corpus script names (default: all)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    entries = [e for e in corpus.load_manifest()["scripts"]
               if not args.scripts or e["script"][:-3] in {s.removesuffix(".py") for s in args.scripts}]
    rows = []
    for entry in entries:
        times = {v: [] for v in VARIANTS}
        for r in range(args.repeats):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))  # ABC, CBA, ...
            for v in order:
                times[v].append(_time(entry, v, args.timeout))
        med = {v: statistics.median(ts) for v, ts in times.items()}
        row = {"script": entry["script"], "ranks": entry.get("nproc_per_node") or 1,
               "median_s": {v: round(m, 3) for v, m in med.items()},
               "tax_emu_over_hal_cpu": round(med["emu"] / med["hal_cpu"], 3),
               "emu_over_raw": round(med["emu"] / med["raw"], 3),
               "hal_cpu_over_raw": round(med["hal_cpu"] / med["raw"], 3)}
        rows.append(row)
        if not args.json:
            print(f"{entry['script']:28s} raw {med['raw']:6.2f}s  hal cpu {med['hal_cpu']:6.2f}s  "
                  f"emu {med['emu']:6.2f}s   emu/hal-cpu {row['tax_emu_over_hal_cpu']:.2f}x  "
                  f"emu/raw {row['emu_over_raw']:.2f}x", flush=True)
    summary = {}
    for key in ("tax_emu_over_hal_cpu", "emu_over_raw", "hal_cpu_over_raw"):
        vals = [r[key] for r in rows]
        summary[key] = {"median": round(statistics.median(vals), 3), "min": min(vals), "max": max(vals)}
    result = {"baseline": "raw torch on the CPU (python script.py); tax = emu / hal run on the CPU",
              "repeats": args.repeats, "threads": 1, "when": time.strftime("%Y-%m-%d %H:%M"),
              "scripts": rows, "summary": summary}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        s = summary
        print(f"\nbaseline: raw torch on the CPU, each command in a fresh process, median of {args.repeats} "
              f"interleaved runs, 1 intra-op thread, {len(rows)} scripts")
        print(f"emulation tax   emu / hal run cpu   median {s['tax_emu_over_hal_cpu']['median']:.2f}x "
              f"(min {s['tax_emu_over_hal_cpu']['min']:.2f}x, max {s['tax_emu_over_hal_cpu']['max']:.2f}x)")
        print(f"emu / raw cpu                       median {s['emu_over_raw']['median']:.2f}x "
              f"(min {s['emu_over_raw']['min']:.2f}x, max {s['emu_over_raw']['max']:.2f}x)")
        print(f"hal run cpu / raw cpu               median {s['hal_cpu_over_raw']['median']:.2f}x "
              f"(min {s['hal_cpu_over_raw']['min']:.2f}x, max {s['hal_cpu_over_raw']['max']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
