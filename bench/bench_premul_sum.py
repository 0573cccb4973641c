"""What serving ReduceOp.PREMUL_SUM costs the collectives that do not use it (SUM, AVG).

Two local ranks.  On ``HAL_BACKEND=cpu`` (gloo), hal's gloo path wraps the torch.distributed
functions that take ``op=``: each call is timed through the wrapper and through torch's own
function (the baseline; the wrapper holds it).  On ``HAL_BACKEND=emu``, emuccl reads each call's
op: its ``allreduce`` and ``_reduce_scatter_base`` are timed as they are and with the bodies they
had before (the baseline: no op read).  Per op and size the two variants run back to back in an
order that alternates each repetition; the ratio is taken per repetition, median [min-max] printed.
A ratio near 1 means SUM and AVG calls pay nothing measurable for PREMUL_SUM.  ``--nproc 1`` runs
one rank pinned to one CPU (gloo's threads too), as bench/bench_emuccl.py's second table does: no
peer's scheduling, what is left is the cost of a call itself.

    python bench/bench_premul_sum.py                  # cpu and emu, 2 ranks, 4K and 4M, 9 repetitions
    python bench/bench_premul_sum.py --nproc 1 --sizes 4K --reps 15
"""
import argparse
import os
import statistics
import sys
import time
import warnings

warnings.simplefilter("ignore", FutureWarning)  # reduce_scatter_tensor: deprecated in torch 2.13

CALLS = (("all_reduce", "SUM"), ("reduce_scatter_tensor", "AVG"))


def _unchecked(ccl):
    """emuccl's two hot methods as they were before they read the op (the baseline)."""
    import torch.distributed as dist

    def allreduce(self, tensors, opts=None):
        return self._gloo_allreduce(ccl._host(tensors), opts or dist.AllreduceOptions())

    def reduce_scatter_base(self, output, input, opts=None):
        return self._gloo_reduce_scatter_base(output if output.is_cpu else ccl._view(output),
                                              input if input.is_cpu else ccl._view(input),
                                              opts or dist.ReduceScatterOptions())
    return {"allreduce": allreduce, "_reduce_scatter_base": reduce_scatter_base,
            "reduce_scatter_single": reduce_scatter_base}


def rank(sizes, reps, min_seconds, pin=False):
    import torch
    import torch.distributed as dist

    import hal
    from hal.dist.premul_sum import MARK

    info = hal.dist.info()
    if pin and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), {cpu})
    dev, n = torch.device(info.device), info.world_size
    group = dist.group.WORLD
    def torchs(name):
        return getattr(getattr(dist, name), MARK)   # hal.dist.init() wrapped it; the wrapper holds it
    if dev.type == "cpu":
        variants, swap = {"torch": torchs, "hal": lambda name: getattr(dist, name)}, {}
    else:  # the same torch function; emuccl's methods as they are and as they were
        from hal.emu import _ccl
        cls = type(group)
        checked = {k: cls.__dict__[k] for k in ("allreduce", "_reduce_scatter_base", "reduce_scatter_single")}
        variants, swap = {"before": torchs, "hal": torchs}, {"before": _unchecked(_ccl), "hal": checked}
    times = {}
    for rep in range(reps):
        for name, op in CALLS:
            for s in sizes:
                numel = s // 4
                order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
                for v in order:
                    for attr, fn in swap.get(v, {}).items():
                        setattr(type(group), attr, fn)
                    fn = variants[v](name)
                    rop = getattr(dist.ReduceOp, op)
                    inp = torch.ones(numel, device=dev)
                    out = torch.empty(numel // n, device=dev)

                    def call():
                        if name == "all_reduce":
                            fn(inp, op=rop)
                        else:
                            fn(out, inp, op=rop)
                    for _ in range(3):
                        call()
                    key = (name, s)
                    iters = times.setdefault(("iters",) + key, None)
                    if iters is None:
                        t0 = time.perf_counter()
                        call()
                        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                        dist.all_reduce(one, op=dist.ReduceOp.MAX)
                        iters = times[("iters",) + key] = max(3, min(3000, int(min_seconds / max(one.item(), 1e-6))))
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        call()
                    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)
                    times.setdefault((name, s, v), []).append(t.item())
        for attr, fn in swap.get("hal", {}).items():
            setattr(type(group), attr, fn)
    if info.rank != 0:
        return None
    return {"|".join(map(str, k)): v for k, v in times.items() if k[0] != "iters"}


def _size(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def main(argv=None):
    from hal.dist.bench import parse_size
    from hal.dist.launch import spawn

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="cpu,emu")
    p.add_argument("--nproc", type=int, default=2, help="ranks (1: pinned to one CPU)")
    p.add_argument("--sizes", default="4K,4M", help="message sizes in bytes (float32), comma-separated")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--min-seconds", type=float, default=0.2, help="timed span per variant and repetition")
    a = p.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    for backend in a.backends.split(","):
        res = spawn(f"{os.path.abspath(__file__)}:rank", a.nproc, kwargs=dict(sizes=sizes, reps=a.reps,
                    min_seconds=a.min_seconds, pin=a.nproc == 1), timeout=1800, env={"HAL_BACKEND": backend})
        if not res.ok:
            print("bench failed:", res.first_error(), file=sys.stderr)
            return 1
        t = {tuple(k.split("|")): v for k, v in res.ranks[0].result.items()}
        base, ours = ("torch", "hal") if backend == "cpu" else ("before", "hal")
        where = f"{a.nproc} rank(s)" + (" pinned to one CPU" if a.nproc == 1 else "")
        print(f"\n{backend}: {where}, {a.reps} alternating repetitions; time per call (median), "
              f"ratio {ours} / {base} per repetition: median [min-max]")
        for name, op in CALLS:
            for s in sizes:
                b, h = t[(name, str(s), base)], t[(name, str(s), ours)]
                r = [x / y for x, y in zip(h, b)]
                print(f"  {name:<22} {op:<4} {_size(s):>4}  {base} {statistics.median(b) * 1e6:8.1f}us  "
                      f"{ours} {statistics.median(h) * 1e6:8.1f}us  {statistics.median(r):.3f} "
                      f"[{min(r):.2f}-{max(r):.2f}]")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} logical CPUs, load average {load} (1/5/15 min) at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
