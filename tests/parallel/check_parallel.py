#!/usr/bin/env python3
"""Run the parallelism corpus (tests/parallel/manifest.json) and compare every case with one process.

Each case is a script of scripts/ run at its ``nproc`` ranks on a backend (``HAL_BACKEND=B hal
run --nproc-per-node N`` for the CUDA-written ones, ``torchrun`` for those written with hal's
API); the reference is the same model in one process on the whole global batch (the script with
``--reference``, once per backend: every script's reference is tiny_model.train_reference).  A
case passes when it exits 0, every step's loss is within the case's tolerance of the
reference's, and every parameter (gathered whole with ``full_tensor()``, merged over the ranks
for pipeline stages) is within it too.

    python tests/parallel/check_parallel.py                           # every case on cpu and emu
    python tests/parallel/check_parallel.py --backend emu fsdp2 tp    # two cases on the emulator
    python tests/parallel/check_parallel.py --default --json          # the default-run subset, JSON

Exit status 0 when every selected case passes.
"""
import argparse
import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
MANIFEST = os.path.join(HERE, "manifest.json")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "corpus"))
import check_plain_cpu as corpus  # noqa: E402  (run_once, first_error_line)

BACKENDS = ("cpu", "emu")
TIMEOUT_S = 600


def load_manifest(path=MANIFEST):
    with open(path) as f:
        return json.load(f)


def _env(backend):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC"))}
    env.update(HAL_BACKEND=backend, PYTHONWARNINGS="ignore", HAL_RUN_QUIET="1")
    return env


def command(case, out, reference=False):
    """The command line of ``case`` writing to ``out`` (its reference: one process, ``--reference``)."""
    script = os.path.join(SCRIPTS, case["script"])
    torchrun = case["launcher"] == "torchrun"
    if reference:
        launch = [sys.executable] if torchrun else [sys.executable, "-m", "hal", "run"]
        return [*launch, script, "--out", out, "--reference"]
    n = f"--nproc-per-node={case['nproc']}"
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", n] if torchrun
              else [sys.executable, "-m", "hal", "run", n])
    return [*launch, script, *case["args"], "--out", out]


def load_run(out):
    """Losses (rank 0's) and the parameters of every rank, merged (a stage holds only its own)."""
    files = sorted(f for f in os.listdir(out) if f.startswith("rank") and f.endswith(".pt"))
    runs = [torch.load(os.path.join(out, f)) for f in files]
    params = {}
    for r in runs:
        for name, value in r["params"].items():
            params.setdefault(name, []).append(value)
    return {"losses": runs[0]["losses"], "params": params, "ranks": len(runs),
            "rank_losses_agree": all(r["losses"] == runs[0]["losses"] for r in runs)}


def compare(run, ref, tol):
    """Problems of ``run`` against ``ref`` at tolerance ``tol`` (empty: it passes), and the largest differences."""
    problems = []
    losses = [abs(a - b) for a, b in zip(run["losses"], ref["losses"])]
    if len(run["losses"]) != len(ref["losses"]):
        problems.append(f"{len(run['losses'])} losses, the reference has {len(ref['losses'])}")
    loss_diff = max(losses, default=float("inf"))
    if loss_diff > tol["loss"]:
        step = losses.index(loss_diff)
        problems.append(f"step {step} loss {run['losses'][step]:.7g} vs {ref['losses'][step]:.7g} "
                        f"(|diff| {loss_diff:.2g} > {tol['loss']:g})")
    if not run["rank_losses_agree"]:
        problems.append("the ranks report different losses")
    missing = sorted(set(ref["params"]) - set(run["params"]))
    extra = sorted(set(run["params"]) - set(ref["params"]))
    if missing or extra:
        problems.append(f"parameters missing {missing[:3]} / unknown {extra[:3]}")
    param_diff, worst = 0.0, None
    for name, values in run["params"].items():
        if name not in ref["params"]:
            continue
        want = ref["params"][name][0]
        for v in values:
            d = (v - want).abs().max().item() if v.shape == want.shape else float("inf")
            if d > param_diff:
                param_diff, worst = d, name
    if param_diff > tol["param"]:
        problems.append(f"parameter {worst} differs by {param_diff:.2g} > {tol['param']:g}")
    return problems, {"loss": loss_diff, "param": param_diff}


def run_case(case, backend, ref, tol, workdir):
    out = os.path.join(workdir, f"{case['name']}-{backend}")
    rc, wall, _, stdout, stderr = corpus.run_once(command(case, out), TIMEOUT_S, env=_env(backend))
    result = {"case": case["name"], "backend": backend, "nproc": case["nproc"], "seconds": round(wall, 1),
              "tolerance": case["tolerance"]}
    if rc != 0 or not os.path.isdir(out):
        return dict(result, ok=False, error=corpus.first_error_line(stderr, stdout), rc=rc)
    problems, diffs = compare(load_run(out), ref, tol)
    return dict(result, ok=not problems, problems=problems, max_diff=diffs)


def reference(case, backend, workdir):
    out = os.path.join(workdir, f"reference-{backend}")
    rc, _, _, stdout, stderr = corpus.run_once(command(case, out, reference=True), TIMEOUT_S, env=_env(backend))
    if rc != 0:
        raise SystemExit(f"the reference run on {backend} failed: {corpus.first_error_line(stderr, stdout)}")
    return load_run(out)


def check(cases, backends, manifest, workdir, echo=None):
    """Every case on every backend, as a list of results (``ok``, ``max_diff`` or ``error``)."""
    results = []
    for backend in backends:
        ref = reference(cases[0], backend, workdir)
        for case in cases:
            r = run_case(case, backend, ref, manifest["tolerances"][case["tolerance"]], workdir)
            results.append(r)
            if echo:
                echo(r)
    return results


def line(r):
    if r["ok"]:
        d = r["max_diff"]
        return (f"PASS {r['backend']:4} {r['case']:28} {r['nproc']} ranks  loss diff {d['loss']:.1e}  "
                f"param diff {d['param']:.1e}  ({r['tolerance']}, {r['seconds']} s)")
    why = "; ".join(r["problems"]) if "problems" in r else r["error"]
    return f"FAIL {r['backend']:4} {r['case']:28} {r['nproc']} ranks  {why}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable; default: cpu and emu")
    parser.add_argument("--default", action="store_true", help="only the cases of the default pytest run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", help="folder for the runs' outputs (default: a temporary one)")
    args = parser.parse_args(argv)
    manifest = load_manifest()
    cases = [c for c in manifest["cases"] if (not args.cases or c["name"] in args.cases)
             and (not args.default or c["default"])]
    unknown = set(args.cases) - {c["name"] for c in manifest["cases"]}
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; the manifest has {[c['name'] for c in manifest['cases']]}")
    with tempfile.TemporaryDirectory(prefix="parallel_") as tmp:
        workdir = args.keep or tmp
        results = check(cases, args.backend or BACKENDS, manifest, workdir,
                        echo=None if args.json else lambda r: print(line(r), flush=True))
    if args.json:
        print(json.dumps({"schema": "hal.parallel-results/1", "results": results}, indent=1))
    else:
        for backend in args.backend or BACKENDS:
            rows = [r for r in results if r["backend"] == backend]
            print(f"{backend}: {sum(r['ok'] for r in rows)}/{len(rows)} cases pass")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
