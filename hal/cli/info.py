"""``hal info``: the selected backend in detail."""
from __future__ import annotations

import argparse

from hal._errors import NotSupported
from hal.util.term import print_json
from hal.plugin.registry import get_registry


def add_parser(sub):
    p = sub.add_parser("info", help="the selected backend in detail",
                       epilog="examples:\n  hal info\n  hal info --json\n  HAL_BACKEND=cpu hal info",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON (schema hal.info/1)")
    p.set_defaults(run=run)


def _try(fn):
    try:
        return fn()
    except NotSupported as exc:
        return f"not supported ({exc.feature})"


def collect() -> dict:
    """The selected backend's facts, as ``hal info --json`` prints them."""
    reg = get_registry()
    cand = reg.selected()
    b = cand.backend
    return {
        "schema": "hal.info/1",
        "backend": cand.name,
        "selection_reason": reg.selection_reason,
        "spec": cand.spec.to_dict(),
        "evidence": list(cand.result.evidence),
        "device": str(b.device()),
        "device_count": b.device_count(),
        "device_name": _try(b.device_name),
        "versions": b.versions(),
        "supported_dtypes": [str(d).replace("torch.", "") for d in b.supported_dtypes()],
        "autocast_dtype": str(_try(b.low_precision_dtype)).replace("torch.", ""),
        "memory_allocated": _try(b.memory_allocated),
    }


def run(args) -> int:
    info = collect()
    if args.json:
        print_json(info)
        return 0
    spec = info["spec"]
    print(f"backend      {info['backend']}  ({info['selection_reason']})")
    print(f"vendor       {spec['vendor']} — {spec['product']}")
    print(f"device       {info['device']}  count={info['device_count']}  name={info['device_name']}")
    print(f"collective   {spec['dist_backend'] or 'none'}")
    print(f"module       {spec['module'] or 'built into torch'}")
    print("versions     " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("dtypes       " + " ".join(info["supported_dtypes"]))
    print(f"autocast     {info['autocast_dtype']}")
    print(f"memory       allocated={info['memory_allocated']}")
    for e in info["evidence"]:
        print(f"evidence     {e}")
    return 0
