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

3. per call, in fresh processes (torch's default thread count, then OMP_NUM_THREADS=1): a sweep
   over the redirected calls of a CUDA script (:data:`CALLS`: the factories with ``device="cuda"``,
   ``"cuda:0"`` and ``torch.device("cuda")``, at a tiny and a training-sized tensor; ``.to("cuda")``,
   ``.to(device)``, ``.cuda()``; the ``torch.cuda`` queries; streams and events), each against
   the direct call on the target (``device="cpu"``, ``torch.cpu.*``, hal's host stream and event)
   in raw torch, interleaved ABBA in blocks of about 10 ms, wall clock; with them the wrappers on
   calls they do not map (``x.to("cpu")``, ``torch.zeros(3)``) and the caller check that gives
   torch's own code the real ``torch.cuda.is_available()``.  Each row: the medians and spreads,
   the paired ratio and the paired difference in ns per call; where hal._C has the shim's C
   wrappers, the same redirection through its Python wrappers (``HAL_REDIRECT_NATIVE=0``) is a
   third interleaved variant (ABCCBA), its paired difference to the direct call printed last.

Times are CPU time (the step's thread; the command's process and its children), which
other processes on a shared machine do not inflate as they do wall time.  Each timed block
starts after ``gc.collect()``: the shim is enabled and undone around its blocks, and the
garbage that leaves would otherwise be collected inside the next block (``hal run``
enables it once).  Each line prints
the median and the spread (min-max) over repeats, and the ratio against
raw torch: the median of the ratios of blocks measured next to each other (ABBA order, so
that a drift of the machine's load cancels), with their spread.

Usage: python bench/bench_redirect_overhead.py [--steps 20] [--repeats 15] [--runs 7] [--call-repeats 5]
       [--only steps|calls|command] [--json]
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


#: the per-call sweep: (call, size, redirected statement, direct statement on the target, what the direct is).
#: "size" is the tensor a factory makes: tiny (4 elements) or training-sized (1024 x 1024; torch.tensor: a list
#: of 65536 floats); calls that make no tensor of a size have "-".  The redirected statement runs under
#: hal.redirect.enable() on the cpu backend, the direct one in raw torch with the shim off.
_FACTORIES = (("torch.empty", "torch.empty({shape}, device={dev})", "torch.empty({shape}, device='cpu')"),
              ("torch.zeros", "torch.zeros({shape}, device={dev})", "torch.zeros({shape}, device='cpu')"),
              ("torch.ones", "torch.ones({shape}, device={dev})", "torch.ones({shape}, device='cpu')"),
              ("torch.randn", "torch.randn({shape}, device={dev})", "torch.randn({shape}, device='cpu')"),
              ("torch.full", "torch.full({full}, 1.0, device={dev})", "torch.full({full}, 1.0, device='cpu')"),
              ("torch.arange", "torch.arange({n}, device={dev})", "torch.arange({n}, device='cpu')"),
              ("torch.tensor", "torch.tensor(values_{tag}, device={dev})", "torch.tensor(values_{tag}, device='cpu')"))
_SIZES = (("tiny", {"shape": "4", "full": "(4,)", "n": "4", "tag": "tiny"}),
          ("1024x1024", {"shape": "1024, 1024", "full": "(1024, 1024)", "n": str(1 << 20), "tag": "big"}))
CALLS = (
    [(f"{name}(device='cuda')", size, red.format(dev="'cuda'", **kw), direct.format(**kw), "same call, device='cpu'")
     for size, kw in _SIZES for name, red, direct in _FACTORIES]
    + [("torch.empty(device='cuda:0')", "tiny", "torch.empty(4, device='cuda:0')", "torch.empty(4, device='cpu')",
        "same call, device='cpu'"),
       ("torch.empty(device=torch.device('cuda'))", "tiny", "torch.empty(4, device=cuda_dev)",
        "torch.empty(4, device=cpu_dev)", "same call, device=torch.device('cpu')"),
       ("x.to('cuda')", "-", "x.to('cuda')", "x.to('cpu')", "x.to('cpu')"),
       ("x.to(torch.device('cuda'))", "-", "x.to(cuda_dev)", "x.to(cpu_dev)", "x.to(torch.device('cpu'))"),
       ("x.cuda()", "-", "x.cuda()", "x.to('cpu')", "x.to('cpu')"),
       ("torch.cuda.is_available()", "-", "torch.cuda.is_available()", "torch.cpu.is_available()",
        "torch.cpu.is_available()"),
       ("torch.cuda.current_device()", "-", "torch.cuda.current_device()", "torch.cpu.current_device()",
        "torch.cpu.current_device()"),
       ("torch.cuda.device_count()", "-", "torch.cuda.device_count()", "torch.cpu.device_count()",
        "torch.cpu.device_count()"),
       ("torch.cuda.get_device_name()", "-", "torch.cuda.get_device_name()", "backend.device_name(None)",
        "hal's cpu backend device_name()"),
       ("torch.cuda.synchronize()", "-", "torch.cuda.synchronize()", "torch.cpu.synchronize()",
        "torch.cpu.synchronize()"),
       ("torch.cuda.memory_allocated()", "-", "torch.cuda.memory_allocated()", "0",
        "the answer (torch.cpu keeps no allocator statistics)"),
       ("torch.cuda.Stream()", "-", "torch.cuda.Stream()", "HostStream()", "hal's host stream"),
       ("torch.cuda.current_stream()", "-", "torch.cuda.current_stream()", "host_current_stream()",
        "hal's host current_stream()"),
       ("torch.cuda.Event()", "-", "torch.cuda.Event()", "HostEvent()", "hal's host event"),
       ("torch.cuda.Event(enable_timing=True).record()", "-", "torch.cuda.Event(enable_timing=True).record()",
        "HostEvent(enable_timing=True).record()", "hal's host event"),
       # not redirected: the wrappers' cost on calls that need no mapping, and torch's own code's real answer
       ("x.to('cpu') (not redirected)", "-", "x.to('cpu')", "x.to('cpu')", "raw torch"),
       ("torch.zeros(3) (not redirected)", "tiny", "torch.zeros(3)", "torch.zeros(3)", "raw torch"),
       ("torch.cuda.is_available() from torch", "-", "torch_is_available()", "torch_is_available()",
        "raw torch (the caller is a torch.* module)")])


def _call_env(backend):
    """What the statements see: module-level names of a script (``__name__`` is not torch's or hal's)."""
    from hal.redirect._host import HostEvent, HostStream, current_stream
    inside = {"__name__": "torch._bench_internal", "torch": torch}
    exec("def torch_is_available():\n    return torch.cuda.is_available()", inside)
    return {"__name__": "__bench_script__", "torch": torch, "x": torch.ones(4), "backend": backend,
            "cuda_dev": torch.device("cuda"), "cpu_dev": torch.device("cpu"),
            "values_tiny": [1.0, 2.0, 3.0, 4.0], "values_big": [float(i) for i in range(65536)],
            "HostStream": HostStream, "HostEvent": HostEvent, "host_current_stream": current_stream,
            "torch_is_available": inside["torch_is_available"]}


def _timer(stmt, env):
    import timeit
    return timeit.Timer(stmt, globals=env, timer=time.perf_counter)


@contextlib.contextmanager
def _shim(backend, kind):
    """No shim (``direct``), the shim with its C wrappers (``redirected``, where hal._C has them) or
    with its Python wrappers (``python``: ``HAL_REDIRECT_NATIVE=0``, read when the shim starts)."""
    if kind == "direct":
        yield
        return
    old = os.environ.get("HAL_REDIRECT_NATIVE")
    os.environ["HAL_REDIRECT_NATIVE"] = "0" if kind == "python" else "1"
    try:
        with hal.redirect.enable(backend):
            yield
    finally:
        if old is None:
            os.environ.pop("HAL_REDIRECT_NATIVE", None)
        else:
            os.environ["HAL_REDIRECT_NATIVE"] = old


def call_costs(backend, repeats=5, block_s=0.01):
    """ns per call of each :data:`CALLS` row: the direct call (shim off), the redirected one (shim on)
    and, where hal._C has the C wrappers, the redirected one through the Python wrappers, interleaved
    (ABCCBA), ``repeats`` times, each block about ``block_s`` of calls."""
    env = _call_env(backend)
    kinds = ["direct", "redirected"] + (["python"] if hal.redirect.native_wrappers() else [])
    out = {}
    for name, size, red, direct, base in CALLS:
        timers = {k: _timer(direct if k == "direct" else red, env) for k in kinds}
        with _shim(backend, "redirected"):
            timers["redirected"].timeit(3)  # first sight: the log's row, the targets
            per = timers["redirected"].timeit(20) / 20
        number = max(5, min(20000, int(block_s / max(per, 1e-9))))
        times = {k: [] for k in kinds}
        for r in range(repeats):
            for k in (kinds + kinds[::-1] if r % 2 == 0 else kinds[::-1] + kinds):
                with _shim(backend, k):
                    gc.collect()
                    times[k].append(timers[k].timeit(number) / number * 1e9)
        # a factory's row at each size is its own row
        out[name if size == "-" else f"{name} [{size}]"] = {"size": size, "baseline": base, "number": number,
                                                              **times}
    return out


def _per_call_child(args):
    warnings.simplefilter("ignore")
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    backend = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend
    res = call_costs(backend, repeats=args.call_repeats)
    print(json.dumps({"threads": torch.get_num_threads(), "calls": res}))


def per_call(call_repeats):
    """The sweep in fresh processes: at torch's default thread count, and at OMP_NUM_THREADS=1."""
    out = {}
    for setting in ("default", "1"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
        env.pop("OMP_NUM_THREADS", None)
        if setting != "default":
            env["OMP_NUM_THREADS"] = setting
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--per-call-child",
                               "--call-repeats", str(call_repeats)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"per-call sweep (OMP_NUM_THREADS={setting}) failed:\n{proc.stderr[-2000:]}")
        out[f"OMP_NUM_THREADS={setting}"] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _call_lines(calls):
    lines = []
    for name, v in calls.items():
        d, r = v["direct"], v["redirected"]
        # paired: the two blocks of one kind in a repeat against the two of the other
        ratios = [b / a for a, b in zip(d, r)]
        diffs = [b - a for a, b in zip(d, r)]
        line = (f"  {name:58s} direct {statistics.median(d):8.0f} ns ({min(d):.0f}-{max(d):.0f})"
                f"  redirected {statistics.median(r):8.0f} ns ({min(r):.0f}-{max(r):.0f})"
                f"  {statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                f"  +{statistics.median(diffs):.0f} ns ({min(diffs):.0f} to {max(diffs):.0f})")
        if "python" in v:  # the same redirection through the Python wrappers
            pratios = [b / a for a, b in zip(d, v["python"])]
            pdiffs = [b - a for a, b in zip(d, v["python"])]
            line += (f"  python wrappers {statistics.median(pratios):5.2f}x ({min(pratios):.2f}-{max(pratios):.2f})"
                     f" +{statistics.median(pdiffs):.0f} ns ({min(pdiffs):.0f} to {max(pdiffs):.0f})")
        lines.append(line)
    return lines


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
    p.add_argument("--call-repeats", type=int, default=5, help="ABBA repeats of each per-call row")
    p.add_argument("--no-command", action="store_true", help="skip the whole-command timing")
    p.add_argument("--only", choices=("steps", "calls", "command"), help="run one section")
    p.add_argument("--per-call-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.per_call_child:
        return _per_call_child(args)
    warnings.simplefilter("ignore")
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    backend = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend

    run = lambda section: args.only in (None, section)  # noqa: E731
    steps = per_step(args.steps, args.repeats, backend) if run("steps") else {}
    calls = per_call(args.call_repeats) if run("calls") else {}
    command = whole_command(args.runs, args.script_steps) if run("command") and not args.no_command else None
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
    if steps:
        print(f"baseline: {res['baseline']}; CPU time, {torch.get_num_threads()} thread; {args.repeats} ABBA "
              f"repeats of {args.steps}-step blocks; ratio = median of the per-repeat ratios")
    for k, v in steps.items():
        print(f"{k}: ms/step")
        print(_line("raw torch", v["raw"], v["raw"], "ms"))
        print(_line("hal.redirect (cpu)", v["shim"], v["raw"], "ms"))
    for setting, v in calls.items():
        print(f"per call, {setting} ({v['threads']} threads; fresh process): ns per call, wall clock, median "
              f"(spread) of {args.call_repeats} ABBA repeats; direct = the call on the target with the shim off; "
              f"ratio and +ns paired per block; python wrappers = the shim with HAL_REDIRECT_NATIVE=0")
        print("\n".join(_call_lines(v["calls"])))
    if command is None:
        return
    print(f"whole command ({args.script_steps}-step script, fresh processes, median of {args.runs}): CPU s")
    print(_line("python script.py", command["raw"], command["raw"], "s"))
    print(_line("hal run script.py", command["hal_run"], command["raw"], "s"))


if __name__ == "__main__":
    main()
