"""What the redirection (``hal run`` / ``hal.redirect.enable()``) costs on the CPU.

Baseline: raw torch on the CPU, the same model and step, measured side by side.

1. per step, in one process: one training step (forward, backward, optimizer step, and the
   script's per-batch ``.cuda()`` / ``.to("cuda")``) of a small MLP + AdamW and a small CNN
   + SGD, under ``hal.redirect.enable()`` on the cpu backend, against the same step in raw
   torch (``.to("cpu")`` in place of the CUDA moves).  Variants are interleaved inside each
   repeat, so that load from other processes hits them alike;
2. the whole command, in fresh processes: ``HAL_BACKEND=cpu hal run script.py`` against
   ``python script.py`` for a short device-agnostic training script (start-up included),
   interleaved, repeated.

3. per call: the wrappers alone (``x.to("cpu")``, ``torch.zeros(3)``), and the caller check
   that gives torch's own code the real ``torch.cuda.is_available()`` (called from a module
   named ``torch.*``), each against the same call in raw torch.

Times are CPU time (the step's thread; the command's process and its children), which
other processes on a shared machine do not inflate as they do wall time.  Each timed block
starts after ``gc.collect()``: the shim is enabled and undone around its blocks, and the
garbage that leaves would otherwise be collected inside the next block (``hal run``
enables it once).  Each line prints
the median and the spread (min-max) over repeats, and the ratio against
raw torch: the median of the ratios of blocks measured next to each other (ABBA order, so
that a drift of the machine's load cancels), with their spread.

Usage: python bench/bench_redirect_overhead.py [--steps 20] [--repeats 15] [--runs 7] [--json]
"""
import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import torch

import hal.redirect
from hal.plugin.registry import Registry


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    return model, lambda p: torch.optim.AdamW(p, lr=1e-3), (64, 256)


def cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    return model, lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), (32, 3, 32, 32)


def make_step(build, device):
    """A CUDA script's step: batches moved with .cuda() / .to(device) each step."""
    model, make_opt, shape = build()
    if device == "cuda":
        model = model.cuda()
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(*shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g)

    def step():
        xb = x.cuda(non_blocking=True) if device == "cuda" else x.to(device, non_blocking=True)
        yb = y.to(device)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def per_step(steps, repeats, backend):
    shim = lambda: hal.redirect.enable(backend)  # noqa: E731 - on only while its variant runs
    out = {}
    for name, build in (("mlp_adamw", mlp), ("cnn_sgd", cnn)):
        with shim():
            shimmed = make_step(build, "cuda")
        variants = {"raw": (make_step(build, "cpu"), contextlib.nullcontext), "shim": (shimmed, shim)}
        for step, ctx in variants.values():
            with ctx():
                for _ in range(5):
                    step()
        times = {k: [] for k in variants}
        for r in range(repeats):
            # ABBA: a slow drift of the machine's load hits both variants alike
            for k in (["raw", "shim", "shim", "raw"] if r % 2 == 0 else ["shim", "raw", "raw", "shim"]):
                step, ctx = variants[k]
                with ctx():
                    gc.collect()  # garbage of earlier blocks (and of enabling the shim) is not this block's
                    t0 = time.thread_time()
                    for _ in range(steps):
                        step()
                    times[k].append((time.thread_time() - t0) / steps * 1e3)
        out[name] = times
    return out


SCRIPT = textwrap.dedent("""
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    for _ in range({steps}):
        loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
        opt.zero_grad(); loss.backward(); opt.step()
    print(dev, float(loss))
""")


def whole_command(runs, steps):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(SCRIPT.format(steps=steps))
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
        env.update(HAL_BACKEND="cpu", HAL_RUN_QUIET="1", OMP_NUM_THREADS="1")
        cmds = {"raw": [sys.executable, path], "hal_run": [sys.executable, "-m", "hal", "run", path]}
        times = {k: [] for k in cmds}
        for r in range(runs + 1):
            for k in (list(cmds) if r % 2 == 0 else list(reversed(cmds))):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(cmds[k], env=env, capture_output=True, text=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                dt = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                if proc.returncode != 0:
                    raise SystemExit(f"{' '.join(cmds[k])} failed:\n{proc.stderr[-2000:]}")
                if r:  # the first round warms the file cache
                    times[k].append(dt)
    return times


CALLS = {"x.to('cpu')": "x.to('cpu')", "torch.zeros(3)": "torch.zeros(3)",
         "torch.cuda.is_available() from torch": "is_available()"}


def call_costs(backend, number=20000, repeats=7):
    """ns per call: raw torch, then under the shim (the last from a torch-internal caller)."""
    import timeit
    x = torch.ones(4)
    # a function whose globals say it is torch's own code, as the DataLoader or an optimizer is
    inside = {"__name__": "torch._bench_internal", "torch": torch}
    exec("def is_available():\n    return torch.cuda.is_available()", inside)
    env = {"torch": torch, "x": x, "is_available": inside["is_available"]}

    def measure():
        return {k: [t / number * 1e9 for t in timeit.repeat(stmt, globals=env, number=number, repeat=repeats)]
                for k, stmt in CALLS.items()}
    raw = measure()
    with hal.redirect.enable(backend):
        shim = measure()
    return {k: {"raw": raw[k], "shim": shim[k]} for k in CALLS}


def _paired(values, base):
    """Ratios of the variant to the baseline measured next to it, one per repeat."""
    return [v / b for v, b in zip(values, base)]


def _line(label, values, base, unit):
    med = statistics.median(values)
    ratios = _paired(values, base)
    return (f"  {label:20s} {med:9.3f} {unit}  (spread {min(values):.3f}-{max(values):.3f})  "
            f"ratio {statistics.median(ratios):.3f}x (paired, spread {min(ratios):.3f}-{max(ratios):.3f})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="steps per timed block")
    p.add_argument("--repeats", type=int, default=15, help="ABBA repeats of the per-step timing")
    p.add_argument("--runs", type=int, default=7, help="fresh processes per command")
    p.add_argument("--script-steps", type=int, default=200, help="training steps of the command's script")
    p.add_argument("--no-command", action="store_true", help="measure the per-step cost only")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    backend = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend

    steps = per_step(args.steps, args.repeats, backend)
    calls = call_costs(backend)
    command = None if args.no_command else whole_command(args.runs, args.script_steps)
    res = {
        "baseline": "raw torch on the CPU (same model, step and script)",
        "clock": "CPU time: time.thread_time per step, user+sys of the child per command",
        "machine": {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__},
        "per_step_ms": steps,
        "command_s": command,
        "call_ns": calls,
        "ratio": {f"{k}_step": statistics.median(_paired(v["shim"], v["raw"])) for k, v in steps.items()},
    }
    if command is not None:
        res["ratio"]["command"] = statistics.median(_paired(command["hal_run"], command["raw"]))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"baseline: {res['baseline']}; CPU time, {torch.get_num_threads()} thread; {args.repeats} ABBA "
          f"repeats of {args.steps}-step blocks; ratio = median of the per-repeat ratios")
    for k, v in steps.items():
        print(f"{k}: ms/step")
        print(_line("raw torch", v["raw"], v["raw"], "ms"))
        print(_line("hal.redirect (cpu)", v["shim"], v["raw"], "ms"))
    print("per call: ns (min of 7 x 20000 calls)")
    for k, v in calls.items():
        print(f"  {k:38s} raw {min(v['raw']):6.0f}  shim {min(v['shim']):6.0f}  "
              f"(+{min(v['shim']) - min(v['raw']):.0f} ns)")
    if command is None:
        return
    print(f"whole command ({args.script_steps}-step script, fresh processes, median of {args.runs}): CPU s")
    print(_line("python script.py", command["raw"], command["raw"], "s"))
    print(_line("hal run script.py", command["hal_run"], command["raw"], "s"))


if __name__ == "__main__":
    main()
