#!/usr/bin/env python3
"""The torchtitan recipes of tests/llmstack/torchtitan.json with torchtitan 0.3's configs, through hal run.

torchtitan 0.3 replaced the TOML files by config functions (``--module llama3 --config
llama3_debugmodel``) and needs torch >= 2.14: ``make llmstack-torch214`` builds that environment and
runs this.  Each recipe (one process, FSDP2, TP and PP at 2 ranks) runs on cpu and emu with CUDA graphs
left on (0.3's default) for the one-process run, and with ``--training.disable_cuda_graphs`` for all, on
the tokenizer and data set of tests/llmstack/titan_assets.py.  Printed per run: the losses, or the line
that names the failure.  Exit 0 when every run trained or ended in one of the known limits (LIMITS: the
CUDA-graph refusal naming torchtitan's switch, torch's FlexAttention without a CPU backward or outside
its device list -- 0.3's llama3 has no SDPA attention); 1 on any other failure.

    python scripts/titan03_recipes.py [--json]
    python scripts/titan03_recipes.py --backends cuda --recipes titan_single    # on a GPU (make gpu-check)
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "corpus"))
sys.path.insert(0, os.path.join(ROOT, "tests", "llmstack"))
import check_plain_cpu as corpus  # noqa: E402
import titan_assets  # noqa: E402

LOSS = r"^\[rank{rank}\]:\[titan\] .* step:\s*\d+\s+loss:\s*([0-9.]+)"
#: the ends this environment is known to reach, each with what it is
LIMITS = {
    "(CUDA graphs) is not supported": "hal: no CUDA graphs off CUDA; the error names --training.disable_cuda_graphs",
    "FlexAttention does not support backward on CPU": "torch: no FlexAttention backward on the CPU",
    "FlexAttention is only supported on": "torch: FlexAttention refuses devices outside its list",
}
#: name -> (processes, the rank that prints the loss, 0.3 parallelism overrides, local batch size)
RECIPES = {
    "titan_single": (1, 0, [], 4),
    "titan_fsdp2": (2, 0, ["--parallelism.data_parallel_shard_degree", "2"], 2),
    "titan_tp2": (2, 0, ["--parallelism.data_parallel_shard_degree", "1", "--parallelism.tensor_parallel_degree", "2"],
                  4),
    "titan_pp2": (2, 1, ["--parallelism.data_parallel_shard_degree", "1", "--parallelism.pipeline_parallel_degree", "2",
                         "--parallelism.pipeline_parallel_schedule", "1F1B"], 4),
}


def command(name, assets, graphs):
    n, _, parallel, batch = RECIPES[name]
    # every rank's lines, prefixed: a rank that fails first takes the others down with it
    return [shutil.which("hal") or "hal", "run", f"--nproc-per-node={n}", "--role", "rank", "--tee", "3",
            "-m", "torchtitan.train", "--module", "llama3",
            "--config", "llama3_debugmodel", "--hf_assets_path", os.path.join(assets, "tokenizer"),
            "--dataloader.dataset", "c4", "--dataloader.dataset_path", os.path.join(assets, "c4_local"),
            "--training.seq_len", str(titan_assets.SEQ_LEN), "--training.local_batch_size", str(batch),
            "--training.steps", "6", "--checkpoint.no-enable", "--validator.no-enable", *parallel,
            *([] if graphs else ["--training.disable_cuda_graphs"])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--backends", default="cpu,emu", help="comma-separated hal backends (default: cpu,emu)")
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, of {', '.join(RECIPES)}")
    args = ap.parse_args(argv)
    recipes = args.recipes.split(",")
    unknown = [n for n in recipes if n not in RECIPES]
    if unknown:
        ap.error(f"unknown recipe {unknown[0]!r}: choose from {', '.join(RECIPES)}")
    import torch
    import torchtitan
    rows = []
    with tempfile.TemporaryDirectory(prefix="titan03_") as assets:
        titan_assets.make_data(assets)
        # the one-process recipe with CUDA graphs on (0.3's default) and off, the others off
        runs = [(n, b, g) for b in args.backends.split(",") for n in recipes
                for g in ((True, False) if n == "titan_single" else (False,))]
        for name, backend, graphs in runs:
            env = dict(os.environ, HAL_BACKEND=backend, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
            rc, secs, _, out, err = corpus.run_once(command(name, assets, graphs), 900, env=env)
            losses = re.findall(LOSS.format(rank=RECIPES[name][1]), out, flags=re.MULTILINE)
            # the failure: a known limit met by any rank (the others fail after it), else the first error line
            error = None if rc == 0 else next(
                (line.split(":", 1)[1] for line in err.splitlines() for key in LIMITS
                 if key in line and re.match(r"^\[rank\d+\]:[\w.]+(Error|NotSupported): ", line)),
                corpus.first_error_line(err, out))
            limit = next((why for key, why in LIMITS.items() if error and key in error), None)
            rows.append({"recipe": name, "backend": backend, "cuda_graphs": graphs, "rc": rc, "seconds": round(secs, 1),
                         "losses": losses, "error": error, "known_limit": limit,
                         "ok": (rc == 0 and len(losses) == 6) or limit is not None})
            if not args.json:
                r = rows[-1]
                what = " ".join(losses) if rc == 0 else f"{error}  [{limit or 'UNEXPECTED'}]"
                print(f"{name:13} {backend:3} graphs {'on ' if graphs else 'off'} {secs:6.1f}s {what}", flush=True)
    summary = {"torch": torch.__version__, "torchtitan": torchtitan.__version__, "runs": rows,
               "ok": all(r["ok"] for r in rows)}
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        print()
    else:
        print(f"torch {torch.__version__}, torchtitan {torchtitan.__version__}: "
              f"{sum(r['rc'] == 0 for r in rows)}/{len(rows)} runs trained, "
              f"{sum(r['known_limit'] is not None for r in rows)} ended in a known limit, "
              f"{sum(not r['ok'] for r in rows)} unexpected")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
