"""hal bench's all_reduce bus bandwidth vs a raw torch.distributed loop doing the same work.

Both run in the same processes and ranks; for each size the raw loop and hal run back to
back, and the whole sweep is repeated (median of ``--reps``) so that drift in machine load
hits both alike.  The raw loop is what one
would write by hand: fill, warm up, then time ``iters`` calls of ``dist.all_reduce`` in one
block (as nccl-tests does).  hal times each call (for p50/p99) and checks the result.
A ratio near 1 means the tool adds no overhead.

    python bench/bench_allreduce_overhead.py            # 2 local gloo ranks, 1K..64M x4
    python bench/bench_allreduce_overhead.py -n 2 -e 16M --reps 9
"""
import argparse
import os
import statistics
import sys
import time


def rank(sizes, warmup, iters, reps):
    import torch
    import torch.distributed as dist

    from hal.dist.bench import bus_factor, rank_main
    from hal.dist.process_group import info

    me = info()
    dev = torch.device(me.device)
    n = me.world_size
    raw, tool = {s: [] for s in sizes}, {s: [] for s in sizes}
    for _ in range(reps):
        for s in sizes:  # the same size back to back: raw loop, then hal
            buf = torch.ones(s // 4, dtype=torch.float32, device=dev)
            for _ in range(warmup):
                dist.all_reduce(buf)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            if dev.type != "cpu":
                torch.accelerator.synchronize()
            t = (time.perf_counter() - t0) / iters
            tt = torch.tensor([t], dtype=torch.float64)
            dist.all_reduce(tt)  # mean over ranks, as hal (and nccl-tests) report it
            raw[s].append(s / (tt.item() / n) / 1e9 * bus_factor("all_reduce", n))
            rep = rank_main({"collective": "all_reduce", "min_bytes": s, "max_bytes": s,
                             "warmup": warmup, "iters": iters})
            if rep is not None:
                tool[s].append(rep["rows"][0]["busbw"])
    if me.rank != 0:
        return None
    return {"raw": {str(s): v for s, v in raw.items()}, "hal": {str(s): v for s, v in tool.items()}}


def main(argv=None):
    from hal.dist.bench import parse_size, sweep
    from hal.dist.launch import spawn

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=2, help="local ranks (default 2)")
    p.add_argument("-b", default="1K")
    p.add_argument("-e", default="64M")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5, help="repetitions of the sweep (default 5)")
    a = p.parse_args(argv)
    sizes = sweep(parse_size(a.b), parse_size(a.e), 4)
    res = spawn(f"{__file__}:rank", a.n, kwargs=dict(sizes=sizes, warmup=a.warmup, iters=a.iters, reps=a.reps),
                timeout=900)
    if not res.ok:
        print("bench failed:", res.first_error(), file=sys.stderr)
        return 1
    out = res.ranks[0].result
    print(f"all_reduce busbw, {a.n} ranks, {a.warmup} warm-up + {a.iters} iters, median of {a.reps} reps; "
          f"baseline: raw torch.distributed loop")
    print(f"{'size':>10}  {'raw GB/s':>9}  {'hal GB/s':>9}  {'hal/raw':>7}")
    ratios = []
    for s in sizes:
        r, h = statistics.median(out["raw"][str(s)]), statistics.median(out["hal"][str(s)])
        ratios.append(h / r if r else float("nan"))
        print(f"{s:>10}  {r:>9.3f}  {h:>9.3f}  {ratios[-1]:>7.2f}")
    big = [x for s, x in zip(sizes, ratios) if s >= 1 << 20]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"machine: {os.cpu_count()} logical CPUs, load average {load} (1/5/15 min) at the end")
    print(f"median ratio hal/raw: all sizes {statistics.median(ratios):.2f}; sizes >= 1 MiB "
          f"{statistics.median(big) if big else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
