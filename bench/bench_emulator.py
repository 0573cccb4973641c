"""Two ratios, measured side by side in one run:

1. emulation tax: one training step (forward, backward, AdamW) on the emulated device
   ``emu`` / the same step on the CPU with raw torch;
2. hal overhead: the same CPU step written with hal (``hal.device()``, ``hal.autocast``-free,
   ``hal.synchronize()``) and under ``hal.redirect.enable()`` / raw torch on the CPU.

Usage: python bench/bench_emulator.py [--steps 30] [--repeats 5] [--json]
The figure reported for each variant is the median over repeats of the mean step time.

With ``--ops``, the small-op tax instead: the per-call cost of single ops (add, mul, linear,
softmax, layer_norm, silu, index_select, cat, copy_) on emu tensors against the same op on
CPU tensors, at a decode-sized (1, 64), a (16, 4096) and a (1024, 1024) input, in one
process.  Each repeat times a block of calls of the CPU op and of the emu op next to each
other (ABBA order across repeats); per op and size it prints microseconds per call (median
over repeats) and the ratio emu / cpu (the median of the per-repeat ratios, with their
spread).  Threads are torch's default; run it again under ``OMP_NUM_THREADS=1`` for one::

    python bench/bench_emulator.py --ops [--repeats 7] [--json]
    OMP_NUM_THREADS=1 python bench/bench_emulator.py --ops
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


OP_SHAPES = ((1, 64), (16, 4096), (1024, 1024))


def small_ops(shape, device, g):
    """name -> a no-argument call of one op on ``device`` tensors of ``shape`` (the same values
    on every device)."""
    n = shape[-1]
    x, y = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    w, b = torch.randn(n, n, generator=g) / n ** 0.5, torch.randn(n, generator=g)
    idx = torch.randperm(n, generator=g)[: n // 2]
    x, y, w, b, idx = (t.to(device) for t in (x, y, w, b, idx))
    out = torch.empty_like(x)
    F = torch.nn.functional
    return {
        "add": lambda: x + y,
        "mul": lambda: x * y,
        "linear": lambda: F.linear(x, w, b),
        "softmax": lambda: torch.softmax(x, -1),
        "layer_norm": lambda: F.layer_norm(x, (n,), b, b),
        "silu": lambda: F.silu(x),
        "index_select": lambda: x.index_select(-1, idx),
        "cat": lambda: torch.cat((x, y), -1),
        "copy_": lambda: out.copy_(x),
    }


def _calls_for(fn, block_s):
    """How many calls fill a block of about ``block_s`` seconds (at least 3)."""
    fn()
    t0 = time.perf_counter()
    fn()
    return max(3, int(block_s / max(time.perf_counter() - t0, 1e-7)))


def small_op_tax(edev, repeats, block_s, shapes=OP_SHAPES):
    """Rows of per-call microseconds on cpu and emu and the ratio emu / cpu, per op and shape."""
    rows = []
    for shape in shapes:
        g = torch.Generator().manual_seed(0)
        cpu = small_ops(shape, torch.device("cpu"), g)
        g = torch.Generator().manual_seed(0)
        emu = small_ops(shape, edev, g)
        for op in cpu:
            pair = {"cpu": cpu[op], "emu": emu[op]}
            torch.testing.assert_close(pair["emu"]().cpu(), pair["cpu"]())  # the same op, the same numbers
            calls = _calls_for(pair["cpu"], block_s)
            us = {"cpu": [], "emu": []}
            for r in range(repeats):
                for dev in (("cpu", "emu") if r % 2 == 0 else ("emu", "cpu")):
                    fn = pair[dev]
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    us[dev].append((time.perf_counter() - t0) / calls * 1e6)
            ratios = [e / c for e, c in zip(us["emu"], us["cpu"])]
            rows.append({"op": op, "shape": list(shape), "calls_per_block": calls,
                         "cpu_us": statistics.median(us["cpu"]), "emu_us": statistics.median(us["emu"]),
                         "emu_vs_cpu": statistics.median(ratios), "spread": [min(ratios), max(ratios)]})
    return rows


def main_ops(args):
    emu_backend = Registry(env={"HAL_BACKEND": "emu"}).selected().backend
    edev = emu_backend.device()
    rows = small_op_tax(edev, args.repeats, args.block_ms / 1e3)
    fell = emu_backend.fallback_report()
    res = {"baseline": "the same op on CPU tensors, same process, interleaved",
           "threads": torch.get_num_threads(), "repeats": args.repeats, "rows": rows,
           "emu_fallback_ops": [f"{r['op']} ({r['route']})" for r in fell]}
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"baseline: {res['baseline']} ({res['threads']} threads, median of {args.repeats} blocks "
          f"of about {args.block_ms:g} ms)")
    print(f"{'op':14s} {'shape':12s} {'cpu us':>10s} {'emu us':>10s} {'emu - cpu':>10s}  emu / cpu (spread)")
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        print(f"{r['op']:14s} {shape:12s} {r['cpu_us']:10.1f} {r['emu_us']:10.1f} "
              f"{r['emu_us'] - r['cpu_us']:10.1f}  {r['emu_vs_cpu']:.2f}x ({r['spread'][0]:.2f}-{r['spread'][1]:.2f})")
    print("ops that fell back on emu: " + (", ".join(res["emu_fallback_ops"]) or "none"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json", action="store_true")
    p.add_argument("--ops", action="store_true", help="the small-op tax: per-call cost of single ops, emu / cpu")
    p.add_argument("--block-ms", type=float, default=20.0, help="with --ops: milliseconds per timed block")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    if args.ops:
        return main_ops(args)
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
