"""``hal ops``: which kernel each hal.ops operator runs on the selected backend."""
from __future__ import annotations

import argparse

from hal.util.term import paint, print_json, table, use_color

EPILOG = """\
examples:
  hal ops                      fused kernel or fallback of every op on the selected backend
  hal ops --backend ascend     what the ascend plugin declares (usable here or not)
  hal ops --json               as JSON (schema hal.ops/1)

order per call: the backend's fused kernel -> torch composition on the device -> C++ host
kernel (hal._C) through host memory.  Where a backend declares the sizes its kernel wins at,
other sizes run the torch composition (the faster path there; counted, not warned about).
In a program, hal.ops.stats() counts what ran.
"""


def add_parser(sub):
    p = sub.add_parser("ops", help="fused kernels and fallbacks of hal.ops on a backend", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", metavar="NAME", help="report for this backend (default: the selected one)")
    p.add_argument("--json", action="store_true", help="print JSON (schema hal.ops/1)")
    p.set_defaults(run=run)


def run(args) -> int:
    from hal.ops.report import report

    rep = report(args.backend)
    if args.json:
        print_json(rep)
        return 0
    color = use_color()
    print(f"backend {rep['backend']} (device type {rep['device_type']}, {rep['status']})")
    if rep["native_available"]:
        print(f"host kernels hal._C: built, {rep['openmp_threads']} OpenMP threads, "
              f"ISA {rep['host_isa']} (HAL_HOST_ISA=baseline|avx2|avx512 to force one)")
    else:
        print(paint(f"host kernels hal._C: unavailable: {rep['native_error']}", "yellow", color))
    print("per-call entry: " + ("C (hal._C.OpEntry; HAL_OPS_NATIVE=0 for the Python one)" if rep["native_entry"]
                                else "Python (hal._C without OpEntry, Python < 3.11, or HAL_OPS_NATIVE=0)"))
    if rep["plugin_error"]:
        print(paint(f"plugin error: {rep['plugin_error']}", "red", color))
    rows = []
    for o in rep["ops"]:
        fused = o["fused_kernel"] or paint("none declared", "yellow", color)
        vendor = o["vendor_function"] or ""
        if o["uncertain"]:
            vendor += f" (uncertain: {o['uncertain']})"
        rows.append([o["op"], fused, vendor, " -> ".join(o["then"])])
    print(table(rows, ["op", "fused kernel", "vendor function", "fallbacks"]))
    sized = [o for o in rep["ops"] if o.get("sizes")]
    if sized:
        print("\nsizes the fused kernel is used at (elsewhere the torch composition runs: it is faster there):")
        for o in sized:
            for name in ("forward", "with_grad"):
                rules = o["sizes"].get(name)
                if rules:
                    print(f"  {o['op']:<16} {name:<9} " + "; ".join(f"{dt}: {r}" for dt, r in rules.items()))
            if o["sizes"].get("when_unset"):
                print(f"  {o['op']:<16} {'':<9} the rule is for calls without " + " or ".join(o["sizes"]["when_unset"]))
        for measured in dict.fromkeys(o["sizes"]["measured"] for o in sized):  # each source once, in order
            print(f"  measured: {measured}")
    return 0
