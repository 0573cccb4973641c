"""Two ratios, measured side by side in one run:

1. emulation tax: one training step (forward, backward, AdamW) on the emulated device
   ``emu`` / the same step on the CPU with raw torch;
2. hal overhead: the same CPU step written with hal (``hal.device()``, ``hal.autocast``-free,
   ``hal.synchronize()``) and under ``hal.redirect.enable()`` / raw torch on the CPU.

Usage: python bench/bench_emulator.py [--steps 30] [--repeats 5] [--json]
The figure reported for each variant is the median over repeats of the mean step time.
"""
import argparse
import contextlib
import copy
import json
import logging
import statistics
import time
import warnings

import torch

import hal
import hal.emu
import hal.redirect
from hal.plugin.registry import Registry


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                               torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def step_fn(model, x, y, sync=lambda: None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
    return step


def timed_all(variants, steps, repeats, contexts):
    """Median over repeats of the mean step time; variants are interleaved in each repeat so
    that load from other processes on a shared machine hits them alike."""
    for k, step in variants.items():
        with contexts.get(k, contextlib.nullcontext)():
            for _ in range(3):
                step()
    means = {k: [] for k in variants}
    for _ in range(repeats):
        for k, step in variants.items():
            with contexts.get(k, contextlib.nullcontext)():
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                means[k].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in means.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(args.batch, 256, generator=g), torch.randint(0, 10, (args.batch,), generator=g)

    # the emulator registers first: torch's autograd engine sizes its device queues at the
    # first backward pass of the process
    emu_backend = Registry(env={"HAL_BACKEND": "emu"}).selected().backend
    base = make_model()
    cpu_backend = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend
    dev, edev = cpu_backend.device(), emu_backend.device()
    variants = {
        "raw_cpu": step_fn(copy.deepcopy(base), x, y),
        "hal_cpu": step_fn(copy.deepcopy(base).to(dev), x.to(dev), y.to(dev), cpu_backend.synchronize),
        "emu": step_fn(copy.deepcopy(base).to(edev), x.to(edev), y.to(edev), emu_backend.synchronize),
    }
    shim = lambda: hal.redirect.enable(cpu_backend)  # noqa: E731 - on only while its variant runs
    with shim():
        variants["hal_redirect_cpu"] = step_fn(copy.deepcopy(base).cuda(), x.cuda(), y.cuda(),
                                               torch.cuda.synchronize)
    t = timed_all(variants, args.steps, args.repeats, {"hal_redirect_cpu": shim})
    raw, hal_cpu, shim, emu = t["raw_cpu"], t["hal_cpu"], t["hal_redirect_cpu"], t["emu"]
    fell = emu_backend.fallback_report()  # the emulator is not hal's selected backend here

    res = {
        "baseline": "raw torch on the CPU, same model and step, same process",
        "threads": torch.get_num_threads(), "batch": args.batch, "steps": args.steps, "repeats": args.repeats,
        "step_ms": {"raw_cpu": raw * 1e3, "hal_cpu": hal_cpu * 1e3, "hal_redirect_cpu": shim * 1e3,
                    "emu": emu * 1e3},
        "ratio": {"emu_vs_raw_cpu": emu / raw, "hal_cpu_vs_raw_cpu": hal_cpu / raw,
                  "hal_redirect_cpu_vs_raw_cpu": shim / raw},
        "emu_fallback_ops": [f"{r['op']} ({r['route']})" for r in fell],
    }
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"baseline: {res['baseline']} ({res['threads']} thread, batch {args.batch}, "
          f"median of {args.repeats} x {args.steps} steps)")
    for k, v in res["step_ms"].items():
        print(f"  {k:18s} {v:8.3f} ms/step")
    print(f"emulation tax      emu / raw cpu          = {res['ratio']['emu_vs_raw_cpu']:.2f}x")
    print(f"hal overhead       hal cpu / raw cpu      = {res['ratio']['hal_cpu_vs_raw_cpu']:.3f}x")
    print(f"redirect overhead  hal run cpu / raw cpu  = {res['ratio']['hal_redirect_cpu_vs_raw_cpu']:.3f}x")
    print("ops that fell back on emu: " + ", ".join(res["emu_fallback_ops"]))


if __name__ == "__main__":
    main()
