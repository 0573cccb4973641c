"""hal.ops per call, across sizes: from a decode step's (1, 64) to a training step's (4096, 4096).

Baselines, measured in the same process and interleaved with the hal call:
  * torch: the composition a model runs without hal (``F.rms_norm``, ``F.layer_norm``,
    ``silu(a) * b``, ``F.gelu``, ``softmax(scale * x)``, Hugging Face's rotate-half rotary);
  * host (cpu only): the C++ host kernel through its tensor layer (``hal.ops.host.*``), i.e.
    what the op costs minus hal.ops' own dispatch.

Per (device, op, size, dtype, pass): the per-call time of each contender (median over
``--repeats`` blocks, each block a calibrated number of calls, blocks in ABC CBA order) with
its spread (min-max), the ratio hal / torch (median of the ratios of blocks measured next to
each other, with their spread) and the difference in microseconds.  ``fwd`` times the
forward; ``fwd+bwd`` a forward and a backward against a fixed upstream gradient.

Each thread setting runs in a fresh process: the default thread count, and
``OMP_NUM_THREADS=1`` (torch's intra-op threads and the host kernels' OpenMP alike).

Usage: python bench/bench_ops_sizes.py [--devices cpu,emu] [--threads default,1]
           [--dtypes float32,bfloat16,float16] [--repeats 5] [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = ((1, 64), (1, 4096), (16, 4096), (256, 4096), (4096, 4096))
QUICK_SIZES = ((1, 64), (16, 4096), (1024, 1024))
OPS = ("rms_norm", "layer_norm", "swiglu", "gelu", "softmax", "rotary_embedding")
BLOCK_S = 0.01  # one block's target duration


# -- worker: one process, one thread setting -------------------------------------------
def _cases(torch, F, hal_ops, host, op, rows, cols, dtype, dev):
    """(inputs, {contender: fn(*inputs)}) for one op and size; None when it does not apply."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(dev)

    on_cpu = dev.type == "cpu"
    if op == "rms_norm":
        args = (r(rows, cols), r(cols))
        fns = {"hal": lambda x, w: hal_ops.rms_norm(x, w, 1e-6),
               "torch": lambda x, w: F.rms_norm(x, (cols,), w, 1e-6),
               "host": lambda x, w: host.rms_norm(x, w, 1e-6)}
    elif op == "layer_norm":
        args = (r(rows, cols), r(cols), r(cols))
        fns = {"hal": lambda x, w, b: hal_ops.layer_norm(x, w, b, 1e-5),
               "torch": lambda x, w, b: F.layer_norm(x, (cols,), w, b, 1e-5),
               "host": lambda x, w, b: host.layer_norm(x, w, b, 1e-5)}
    elif op == "swiglu":
        args = (r(rows, 2 * cols),)

        def torch_swiglu(x):
            a, b = x.chunk(2, dim=-1)
            return F.silu(a) * b
        fns = {"hal": hal_ops.swiglu, "torch": torch_swiglu, "host": host.swiglu}
    elif op == "gelu":
        args = (r(rows, cols),)
        fns = {"hal": lambda x: hal_ops.gelu(x, "tanh"), "torch": lambda x: F.gelu(x, approximate="tanh"),
               "host": lambda x: host.gelu(x, "tanh")}
    elif op == "softmax":
        args = (r(rows, cols),)
        fns = {"hal": lambda x: hal_ops.softmax(x, scale=0.125), "torch": lambda x: torch.softmax(x * 0.125, -1),
               "host": lambda x: host.softmax(x, None, False, 0.125)}
    elif op == "rotary_embedding":
        head = 64 if cols <= 64 else 128
        heads = max(1, cols // head)
        ang = torch.outer(torch.arange(float(rows)), torch.rand(head // 2, generator=g))
        cos, sin = ang.cos().to(dtype).to(dev), ang.sin().to(dtype).to(dev)
        cos2, sin2 = torch.cat((cos, cos), -1)[:, None, :], torch.cat((sin, sin), -1)[:, None, :]
        args = (r(1, rows, heads, head),)

        def rotate_half(x):
            x1, x2 = x[..., : head // 2], x[..., head // 2:]
            return torch.cat((-x2, x1), dim=-1)
        fns = {"hal": lambda x: hal_ops.rotary_embedding(x, cos, sin),
               "torch": lambda x: x * cos2 + rotate_half(x) * sin2,
               "host": lambda x: host.rotary_embedding(x, cos, sin, False, 1)}
    else:
        raise ValueError(op)
    if not on_cpu:
        fns.pop("host")
    return args, fns


def _with_backward(torch, fn, args, out_like):
    leaves = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    grad = torch.randn(out_like.shape, generator=torch.Generator().manual_seed(1)).to(out_like.dtype) \
        .to(out_like.device)

    def step():
        for leaf in leaves:
            leaf.grad = None
        fn(*leaves).backward(grad)
    return step


def _calibrate(fn, sync):
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        dt = time.perf_counter() - t
        if dt >= BLOCK_S / 4 or n >= 1 << 16:
            return max(1, int(n * BLOCK_S / max(dt, 1e-9)))
        n *= 4


def _measure(fns, repeats, sync):
    """Per-call seconds of each contender per repeat, blocks in ABC CBA order."""
    names = list(fns)
    for k in names:  # warm: lazy initialisation, caches, the allocator
        t = time.perf_counter()
        while time.perf_counter() - t < BLOCK_S:
            fns[k]()
        sync()
    counts = {k: _calibrate(fns[k], sync) for k in names}
    times = {k: [] for k in names}
    for rep in range(repeats):
        for k in (names if rep % 2 == 0 else names[::-1]):
            fn, n = fns[k], counts[k]
            t = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            times[k].append((time.perf_counter() - t) / n)
    return times


def worker(args):
    import warnings

    import torch
    import torch.nn.functional as F

    import hal
    import hal.ops as hal_ops
    from hal.ops import host

    warnings.simplefilter("ignore")
    if args.device == "emu":
        os.environ["HAL_BACKEND"] = "emu"
        hal.reset_registry()
    dev = torch.device("cpu") if args.device == "cpu" else hal.device()
    sync = hal.synchronize if args.device != "cpu" else (lambda: None)
    rows_out = []
    for op in args.ops:
        for rows, cols in args.sizes:
            for dtype_name in args.dtypes:
                dtype = getattr(torch, dtype_name)
                for pass_ in ("fwd", "fwd+bwd"):
                    inputs, fns = _cases(torch, F, hal_ops, host, op, rows, cols, dtype, dev)
                    if pass_ == "fwd+bwd":
                        fns.pop("host", None)  # the tensor layer has no autograd
                        out = fns["torch"](*inputs)
                        fns = {k: _with_backward(torch, fn, inputs, out) for k, fn in fns.items()}
                    else:
                        fns = {k: (lambda fn=fn: fn(*inputs)) for k, fn in fns.items()}
                    times = _measure(fns, args.repeats, sync)
                    rows_out.append({"device": args.device, "op": op, "rows": rows, "cols": cols,
                                     "dtype": dtype_name, "pass": pass_, "times_s": times})
    json.dump({"threads": torch.get_num_threads(), "rows": rows_out}, sys.stdout)


# -- driver -----------------------------------------------------------------------------
def summarize(row):
    t = row["times_s"]
    med = {k: statistics.median(v) for k, v in t.items()}
    ratios = [a / b for a, b in zip(t["hal"], t["torch"])]
    out = {k: row[k] for k in ("device", "op", "rows", "cols", "dtype", "pass")}
    out["us"] = {k: round(m * 1e6, 2) for k, m in med.items()}
    out["us_spread"] = {k: [round(min(v) * 1e6, 2), round(max(v) * 1e6, 2)] for k, v in t.items()}
    out["hal_over_torch"] = round(statistics.median(ratios), 3)
    out["ratio_spread"] = [round(min(ratios), 3), round(max(ratios), 3)]
    out["hal_minus_torch_us"] = round((med["hal"] - med["torch"]) * 1e6, 2)
    if "host" in med:
        out["hal_minus_host_us"] = round((med["hal"] - med["host"]) * 1e6, 2)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", default="cpu,emu", help="comma list of cpu, emu (default: both)")
    p.add_argument("--threads", default="default,1", help="comma list: default and/or thread counts")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", default=None, help="e.g. 1x64,16x4096 (rows x cols; default: the sweep)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="three sizes, float32 only, 3 repeats")
    p.add_argument("--json", metavar="FILE", help="write every row (with raw times) to FILE")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.ops = args.ops.split(",")
    args.dtypes = args.dtypes.split(",")
    if args.sizes:
        args.sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    elif args.quick:
        args.sizes, args.dtypes, args.repeats = list(QUICK_SIZES), ["float32"], 3
    else:
        args.sizes = list(SIZES)
    if args.worker:
        return worker(args)

    results = []
    for threads in args.threads.split(","):
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        if threads != "default":
            env["OMP_NUM_THREADS"] = threads
        for device in args.devices.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", device,
                   "--ops", ",".join(args.ops), "--dtypes", ",".join(args.dtypes), "--repeats", str(args.repeats),
                   "--sizes", ",".join(f"{r}x{c}" for r, c in args.sizes)]
            print(f"# {device}, threads={threads}: {len(args.ops) * len(args.sizes) * len(args.dtypes) * 2} "
                  "cases ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"bench_ops_sizes: the {device} worker failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            data = json.loads(proc.stdout)
            rows = [dict(summarize(r), threads=threads, torch_threads=data["threads"]) for r in data["rows"]]
            results.extend(rows)
            print(f"\n{device}, threads={threads} (torch threads {data['threads']}); per call in us, median "
                  f"[min-max] of {args.repeats}; ratio = hal / torch")
            print(f"{'op':17s} {'size':>10s} {'dtype':9s} {'pass':8s} {'torch':>9s} {'hal':>9s} {'host':>9s} "
                  f"{'hal/torch':>9s} {'spread':>13s} {'hal-torch':>9s}")
            for r in rows:
                host_us = r["us"].get("host")
                print(f"{r['op']:17s} {str(r['rows']) + 'x' + str(r['cols']):>10s} {r['dtype']:9s} {r['pass']:8s} "
                      f"{r['us']['torch']:9.2f} {r['us']['hal']:9.2f} "
                      f"{(f'{host_us:9.2f}' if host_us is not None else '        -')} "
                      f"{r['hal_over_torch']:8.3f}x {str(r['ratio_spread']):>13s} {r['hal_minus_torch_us']:+9.2f}",
                      flush=True)
    worst = max(results, key=lambda r: r["hal_over_torch"])
    med = statistics.median(r["hal_over_torch"] for r in results)
    print(f"\nall cases: median hal/torch {med:.3f}x; worst {worst['hal_over_torch']:.3f}x "
          f"({worst['device']} {worst['op']} {worst['rows']}x{worst['cols']} {worst['dtype']} {worst['pass']}, "
          f"threads={worst['threads']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M"), "baseline": "torch composition, same process, "
                       "interleaved", "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
