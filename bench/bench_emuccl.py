"""emuccl (the emulator's collective) against gloo, on the same ranks and the same CPU data.

Two local ranks under ``HAL_BACKEND=emu`` (``cpu:gloo,emu:emuccl``).  For every op and size
three variants run back to back, in an order that rotates each repetition, so that drift in
machine load hits them alike:

- ``gloo``: a gloo group, CPU tensors (the baseline);
- ``emuccl/cpu``: the emuccl group, the same CPU tensors (what emuccl adds: a Python process
  group in front of gloo);
- ``emuccl/emu``: the emuccl group, emu tensors (plus the zero-copy host views of device memory).

Each variant's time per call is the slower rank's mean over ``iters`` calls; the ratio is
taken per repetition and its median and spread (min-max over repetitions) are printed.
Goal: emuccl within 1.1x gloo.  A second table runs the smallest size on one rank, where no
peer's scheduling adds noise, pinned to one CPU (with gloo's threads) so that no wake-up of an
idle CPU does either: what is left is the cost of a call itself.

    python bench/bench_emuccl.py                 # 4K..16M, 7 repetitions
    python bench/bench_emuccl.py --sizes 64K,4M --reps 11
"""
import argparse
import os
import statistics
import sys
import time

OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
VARIANTS = ("gloo", "emuccl/cpu", "emuccl/emu")


def _call(op, group, n, inp, out):
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp, group=group)
    elif op == "all_gather_into_tensor":
        dist.all_gather_into_tensor(out, inp, group=group)
    else:
        dist.reduce_scatter_tensor(out, inp, group=group)


def _buffers(op, numel, n, device):
    import torch

    if op == "all_reduce":
        return torch.ones(numel, device=device), None
    if op == "all_gather_into_tensor":
        return torch.ones(numel // n, device=device), torch.empty(numel, device=device)
    return torch.ones(numel, device=device), torch.empty(numel // n, device=device)


def _pin_to_one_cpu():
    """Every thread of this process (gloo's workers included) onto one CPU: a call then hands its
    work to gloo's thread by a context switch instead of waking an idle CPU, whose cost swings
    between 10 and 80 us on a shared VM and would hide what the call itself costs."""
    cpu = min(os.sched_getaffinity(0))
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {cpu})
    return cpu


def rank(sizes, reps, min_seconds, pin=False):
    import torch
    import torch.distributed as dist

    import hal

    info = hal.dist.info()
    n, emu = info.world_size, torch.device(info.device)
    gloo = dist.new_group(backend="gloo")
    if pin and hasattr(os, "sched_setaffinity"):
        _pin_to_one_cpu()  # after the last group: its threads too
    groups = {"gloo": (gloo, torch.device("cpu")), "emuccl/cpu": (dist.group.WORLD, torch.device("cpu")),
              "emuccl/emu": (dist.group.WORLD, emu)}
    times = {(op, s, v): [] for op in OPS for s in sizes for v in VARIANTS}
    iters = {}
    for rep in range(reps):
        for op in OPS:
            for s in sizes:
                numel = s // 4
                order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
                for v in order:
                    group, dev = groups[v]
                    inp, out = _buffers(op, numel, n, dev)
                    for _ in range(2):
                        _call(op, group, n, inp, out)
                    key = (op, s)
                    if key not in iters:  # enough calls for min_seconds, the same for every variant
                        t0 = time.perf_counter()
                        _call(op, group, n, inp, out)
                        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                        dist.all_reduce(one, op=dist.ReduceOp.MAX, group=gloo)
                        iters[key] = max(3, min(2000, int(min_seconds / max(one.item(), 1e-6))))
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    for _ in range(iters[key]):
                        _call(op, group, n, inp, out)
                    t = torch.tensor([(time.perf_counter() - t0) / iters[key]], dtype=torch.float64)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
                    times[(op, s, v)].append(t.item())
    if info.rank != 0:
        return None
    return {"times": {"|".join(map(str, k)): v for k, v in times.items()},
            "iters": {f"{op}|{s}": i for (op, s), i in iters.items()}}


def _size(b: int) -> str:
    for unit, f in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= f:
            return f"{b // f}{unit}"
    return str(b)


def main(argv=None):
    from hal.dist.bench import parse_size

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4K,256K,4M,16M", help="message sizes in bytes (float32), comma-separated")
    p.add_argument("--reps", type=int, default=7, help="repetitions, interleaved (default 7)")
    p.add_argument("--min-seconds", type=float, default=0.2, help="timed span per variant and repetition")
    a = p.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    worst = _table(2, sizes, a)
    _table(1, sizes[:1], a)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"machine: {os.cpu_count()} logical CPUs, load average {load} (1/5/15 min) at the end")
    if worst is None:
        return 1
    print(f"highest median ratio at 2 ranks: {worst[0]:.3f} ({worst[1]} {_size(worst[2])}, {worst[3]}); "
          f"goal <= 1.10: {'met' if worst[0] <= 1.10 else 'NOT met'}")
    return 0


def _table(nproc, sizes, a):
    from hal.dist.launch import spawn

    res = spawn(f"{os.path.abspath(__file__)}:rank", nproc,
                kwargs=dict(sizes=sizes, reps=a.reps, min_seconds=a.min_seconds, pin=nproc == 1), timeout=1800,
                env={"HAL_BACKEND": "emu"})
    if not res.ok:
        print("bench failed:", res.first_error(), file=sys.stderr)
        return None
    out = res.ranks[0].result
    t = {tuple(k.split("|")): v for k, v in out["times"].items()}
    print(f"\nemuccl vs gloo, {nproc} rank{'s' if nproc > 1 else ' (pinned to one CPU)'}; {a.reps} interleaved repetitions; "
          f"time per call (median), ratio to gloo per repetition: median [min-max]")
    print(f"{'op':<24} {'size':>5} {'iters':>5} {'gloo':>9} {'emuccl/cpu':>10} {'ratio':>17} "
          f"{'emuccl/emu':>10} {'ratio':>17}")
    worst = []
    for op in OPS:
        for s in sizes:
            g = t[(op, str(s), "gloo")]
            cells = []
            for v in VARIANTS[1:]:
                r = [x / y for x, y in zip(t[(op, str(s), v)], g)]
                worst.append((statistics.median(r), op, s, v))
                cells.append(f"{statistics.median(t[(op, str(s), v)]) * 1e6:>8.1f}us "
                             f"{statistics.median(r):>5.3f} [{min(r):.2f}-{max(r):.2f}]")
            print(f"{op:<24} {_size(s):>5} {out['iters'][f'{op}|{s}']:>5} {statistics.median(g) * 1e6:>7.1f}us "
                  + " ".join(cells))
    return max(worst)


if __name__ == "__main__":
    sys.exit(main())
