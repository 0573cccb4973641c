"""Step time with hal.fallback's decompositions vs the CPU fallback the vendor would take.

On the emulator with a vendor's coverage (``HAL_EMU_OPS``, default gcu-2.10: the zoo's largest set
of missing ops with decompositions: batch-norm, group-norm, max-pool and threshold backwards), one
zoo architecture trains in a fresh process per measurement, in three configurations interleaved in
every repeat so that load from elsewhere hits them alike:

* ``decomp``:    ``hal.fallback.install()``: the missing ops run as torch's decompositions on the device;
* ``host``:      no hal.fallback: the vendor's CPU fallback as the emulator does it (the CPU's kernel on
                 the same bytes, no copy): a lower bound of a real CPU fallback's cost;
* ``host_copy``: the same ops as a CPU round trip (inputs copied to the host, the CPU's kernel, results
                 copied back: ``hal.fallback``'s host kernel): the vendor fallback's copies, at host
                 memcpy speed (a real device adds PCIe transfers and synchronisation on top).

Each process reports the median step time of ``--steps`` steps after ``--warmup``; the bench prints,
per architecture and configuration, the median over processes and the spread (min, max), and the
ratios decomp / host and decomp / host_copy (below 1: the decompositions are faster).

    python bench/bench_fallback_step.py                       # cnn_bn and unet, 5 repeats
    python bench/bench_fallback_step.py --vendor gcu-2.10 --repeats 7 unet

Measured (torch 2.13 CPU, 1 thread, 2 shared cores, gcu-2.10, 3 processes each): cnn_bn decomp 3.29 ms,
host 2.27, host_copy 2.90 (decomp/host 1.45, decomp/host_copy 1.13); unet decomp 8.76, host 6.25,
host_copy 7.19 (1.40, 1.22).  On the emulator the device *is* the host CPU, so the decompositions (several
small ops instead of one fused CPU kernel) are slower here; on a real accelerator they run on the device
while the vendor's fallback pays PCIe transfers and a synchronisation per call, which this bench cannot show.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("decomp", "host", "host_copy")

CHILD = r"""
import json, os, sys, time, statistics, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.join(ROOT, "tests", "torch_zoo"))
import hal.emu, hal.fallback
hal.emu.install()
from hal.op_support.torch_plan import resolve
from models import ARCHITECTURES
cfg, arch, steps, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if cfg in ("decomp", "host_copy"):
    rep = hal.fallback.install()
    if cfg == "host_copy":  # the same ops, as CPU round trips instead of decompositions
        ops = list(rep.installed)
        hal.fallback.uninstall()
        lib = torch.library.Library("aten", "IMPL")
        for o in ops:
            try:
                lib.impl(o, hal.fallback._host_round_trip(resolve(o)), "PrivateUse1")
            except RuntimeError:
                pass
torch.manual_seed(0)
w = ARCHITECTURES[arch](seed=0).to("emu")
opt = w.optimizer_factory(w.model.parameters())
times = []
for i in range(warmup + steps):
    t = time.perf_counter()
    w.step(opt).item()
    times.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"median_s": statistics.median(times[warmup:])}))
"""


def run(cfg, arch, vendor, steps, warmup):
    env = dict(os.environ, HAL_BACKEND="emu", HAL_EMU_OPS=vendor, PYTHONPATH=ROOT)
    env.pop("HAL_FALLBACK", None)
    p = subprocess.run([sys.executable, "-c", f"ROOT = {ROOT!r}\n" + CHILD, cfg, arch, str(steps), str(warmup)],
                       env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{cfg} {arch}: child failed\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])["median_s"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archs", nargs="*", default=["cnn_bn", "unet"])
    ap.add_argument("--vendor", default="gcu-2.10")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    results = {}
    for arch in a.archs:
        got = {c: [] for c in CONFIGS}
        for _ in range(a.repeats):
            for c in CONFIGS:
                got[c].append(run(c, arch, a.vendor, a.steps, a.warmup))
        med = {c: statistics.median(v) for c, v in got.items()}
        results[arch] = {"samples_s": got, "median_s": med,
                         "decomp_over_host": med["decomp"] / med["host"],
                         "decomp_over_host_copy": med["decomp"] / med["host_copy"]}
        if not a.json:
            for c in CONFIGS:
                print(f"{arch:16s} {c:10s} median {med[c] * 1e3:7.2f} ms/step  "
                      f"spread {min(got[c]) * 1e3:.2f}..{max(got[c]) * 1e3:.2f} ms ({a.repeats} processes)")
            print(f"{arch:16s} ratio decomp/host {results[arch]['decomp_over_host']:.2f}   "
                  f"decomp/host_copy {results[arch]['decomp_over_host_copy']:.2f}")
    if a.json:
        print(json.dumps({"vendor": a.vendor, "steps": a.steps, "results": results}, indent=1))


if __name__ == "__main__":
    main()
