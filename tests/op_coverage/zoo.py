"""The op_coverage zoo: small random-weight models of real architectures, exported once into a
cache, scanned against every bundled target and rewritten where the scan offers replacements.

What it measures: of the node occurrences a target does not run natively (*unsupported*,
or *host-fallback* where its runtime hands them to the CPU), the share that a verified
rewrite replaces (the rewrite passed onnx.checker, and its outputs matched the original's on
the model's own example inputs). The shares are given over all of them (``share_all``), over
those with a static composition (``share_static``: leaving out the ops whose output shape
depends on the input values: NonZero, NonMaxSuppression, Unique, Compress), over those whose
shapes are static too (``share_static_shapes``: also leaving out the occurrences a rule declined
for want of a static shape that lie downstream of such an op, e.g. the Shape and ScatterElements
of the experts behind a MoE router's NonZero, whose sizes are the number of tokens routed at run
time), and for the unsupported ones alone.

Cache: ``$HAL_ZOO_CACHE`` (default ``~/.cache/hal/op_coverage-zoo``), one folder per torch and
transformers version. Run it with ``make zoo``, or ``python tests/op_coverage/zoo.py [names]``
for the table.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: torch-written models: name -> (factory, example input shapes)
TORCH = {
    "mobilenetv3-small": ("MobileNetV3Small", [(1, 3, 224, 224)]),
    "resnet-tiny": ("ResNetTiny", [(1, 3, 64, 64)]),
    "unet-tiny": ("UNetTiny", [(1, 3, 32, 32)]),
    "detector-tiny": ("DetectorTiny", [(1, 3, 64, 64)]),
    "detector-nonzero": ("DetectorTiny", [(1, 3, 64, 64)]),
}
TARGETS_SKIPPED = {"ort-live"}  # the runtime the rewrite is verified in: nothing to replace


def names() -> list[str]:
    from zoo_hf import NAMES
    return list(TORCH) + list(NAMES)


def cache_dir() -> Path:
    import torch
    try:
        import transformers
        tv = transformers.__version__
    except ImportError:
        tv = "none"
    root = Path(os.environ.get("HAL_ZOO_CACHE", Path.home() / ".cache" / "hal" / "op_coverage-zoo"))
    d = root / f"torch-{torch.__version__}_transformers-{tv}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _build(name: str):
    import torch

    import zoo_torch
    if name in TORCH:
        cls, shapes = TORCH[name]
        torch.manual_seed(0)
        kwargs = {"with_nonzero": True} if name == "detector-nonzero" else {}
        module = getattr(zoo_torch, cls)(**kwargs)
        args = tuple(torch.rand(*s) for s in shapes)
        return module, args, [f"input{i}" for i in range(len(args))]
    from zoo_hf import build
    return build(name)


def exported(name: str, opset: int = 18) -> tuple[Path, Path]:
    """``(model.onnx, inputs.npz)`` for *name*, exported on first use (TorchScript exporter)."""
    d = cache_dir()
    model, feeds = d / f"{name}.opset{opset}.onnx", d / f"{name}.inputs.npz"
    if model.exists() and feeds.exists():
        return model, feeds
    from zoo_torch import export
    module, args, input_names = _build(name)
    tmp = model.with_suffix(".tmp.onnx")
    export(module, args, tmp, opset=opset, input_names=input_names)
    np.savez(feeds, **{n: a.numpy() for n, a in zip(input_names, args)})
    os.replace(tmp, model)
    return model, feeds


def targets() -> list[str]:
    from op_coverage.targets.catalog import load_targets
    ts = load_targets(use_plugins=False)
    return sorted(n for n, p in ts.profiles.items() if n not in TARGETS_SKIPPED and p.kind != "torch")


def measure(name: str, target_names: list[str] | None = None) -> list[dict]:
    """One row per target: occurrences not native by op (``unsupported`` counts host-fallback ones
    too; ``host_fallback`` those alone), and what a verified rewrite replaced."""
    from op_coverage.errors import ScanError
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.plan.planner import DATA_DEPENDENT
    from op_coverage.rewrite import rewrite
    from op_coverage.scan import scan_model
    from op_coverage.targets.catalog import load_targets

    path, feeds = exported(name)
    ts = load_targets(use_plugins=False)
    loaded = load_for_scan(path)
    rows = []
    for t in target_names or targets():
        profile = ts.get(t)
        report = scan_model(loaded, [profile])
        unsupported, fallback, downstream = Counter(), Counter(), Counter()
        below = _downstream_of_data_dependent([n for n, _ in report.nodes], DATA_DEPENDENT)
        for node, verdicts in report.nodes:
            status = verdicts[profile.name].status
            if status != "native":
                unsupported[_label(node)] += 1
                if status == "host-fallback":
                    fallback[_label(node)] += 1
                if id(node) in below:
                    downstream[_label(node)] += 1
        row = {"model": name, "target": t, "unsupported": dict(unsupported), "host_fallback": dict(fallback),
               "downstream_of_data_dependent": dict(downstream),
               "replaced": {}, "remaining": {}, "verified": None, "error": None, "seconds": 0.0}
        if unsupported:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    rep = rewrite(path, t, Path(tmp) / "rewritten.onnx", inputs=[str(feeds)])
                    row["verified"] = bool(rep.verification is not None and rep.verification.ok)
                    after = Counter()
                    for node, verdicts in scan_model(load_for_scan(Path(tmp) / "rewritten.onnx"),
                                                     [profile]).nodes:
                        if verdicts[profile.name].status != "native":
                            after[_label(node)] += 1
                    row["remaining"] = {k: after[k] for k in unsupported if after[k]}
                    row["replaced"] = {k: v - after[k] for k, v in unsupported.items() if v - after[k] > 0}
                    row["blocked"] = {k: v.get("reasons", [])[:1] for k, v in rep.result.blocked.items()}
                except ScanError as e:
                    row["verified"] = False
                    row["error"] = f"exit {e.exit_code}: {str(e)[:300]}"
                    row["remaining"] = dict(unsupported)
            row["seconds"] = round(time.perf_counter() - t0, 2)
        row["data_dependent"] = {k: v for k, v in unsupported.items() if ("ai.onnx", k) in DATA_DEPENDENT}
        rows.append(row)
    return rows


def _downstream_of_data_dependent(nodes, data_dependent) -> set:
    """ids of the nodes that read, directly or through other nodes, an output of a node whose output
    shape depends on input values (NonZero, ...): their shapes may depend on those values too."""
    tainted = {o for n in nodes if (n.domain, n.op_type) in data_dependent for o in n.outputs if o}
    out, changed = set(), True
    while changed:  # nodes are in graph order, so one pass mostly suffices
        changed = False
        for n in nodes:
            if id(n) not in out and any(i in tainted for i in n.inputs if i):
                out.add(id(n))
                tainted.update(o for o in n.outputs if o)
                changed = True
    return out


def _label(node) -> str:
    return node.op_type if node.domain == "ai.onnx" else f"{node.domain}::{node.op_type}"


def _reason_class(reason: str) -> str:
    if "static shape" in reason or "not static" in reason:
        return "shape not static (downstream of a data-dependent op, or not inferred)"
    if "lead back" in reason or "lacks there too" in reason:
        return "the target lacks every op a composition could use"
    if "no function body and no rule" in reason:
        return "no rule"
    return reason.split(":")[0] or "rewrite failed"


def share(rows: list[dict]) -> dict:
    """Occurrence counts and shares over *rows*."""
    total = sum(sum(r["unsupported"].values()) for r in rows)
    dd = sum(sum(r["data_dependent"].values()) for r in rows)
    done = sum(sum(r["replaced"].values()) for r in rows if r["verified"])
    static = total - dd
    # the strictly unsupported ones alone (not host fallback): replaced ones are counted op by op
    strict = sum(v - r["host_fallback"].get(k, 0) for r in rows for k, v in r["unsupported"].items())
    strict_done = sum(min(v - r["host_fallback"].get(k, 0), r["replaced"].get(k, 0))
                      for r in rows if r["verified"] for k, v in r["unsupported"].items())
    left, why = Counter(), Counter()
    shape_dd = 0  # left unreplaced for want of a static shape, downstream of a data-dependent op
    for r in rows:
        for k, v in r["unsupported"].items():
            got = r["replaced"].get(k, 0) if r["verified"] else 0
            if v - got and k not in r["data_dependent"]:
                left[k] += v - got
                reason = _reason_class((r.get("blocked") or {}).get(k, [""])[0])
                why[reason] += v - got
                if reason.startswith("shape not static"):
                    shape_dd += min(v - got, r.get("downstream_of_data_dependent", {}).get(k, 0))
    static_shape = static - shape_dd
    return {"not_native": total, "data_dependent": dd, "replaced_verified": done,
            "share_all": done / total if total else 1.0, "share_static": done / static if static else 1.0,
            "shape_data_dependent": shape_dd,
            "share_static_shapes": done / static_shape if static_shape else 1.0,
            "unsupported": strict, "unsupported_replaced_verified": strict_done,
            "share_unsupported": strict_done / strict if strict else 1.0,
            "unreplaced_static_by_op": dict(left.most_common()),
            "unreplaced_static_by_reason": dict(why.most_common()),
            "rewrites": sum(1 for r in rows if r["verified"] is not None),
            "rewrites_verified": sum(1 for r in rows if r["verified"]),
            "failed": [f"{r['model']} / {r['target']}: {r['error']}" for r in rows if r["verified"] is False]}


def main(argv: list[str]) -> int:
    chosen = argv or names()
    rows = []
    for n in chosen:
        t0 = time.perf_counter()
        mine = measure(n)
        rows += mine
        s = share(mine)
        print(f"{n:18} not native {s['not_native']:4d} (unsupported {s['unsupported']:4d})  "
              f"replaced+verified {s['replaced_verified']:4d}  "
              f"data-dependent {s['data_dependent']:3d}  rewrites {s['rewrites_verified']}/{s['rewrites']}  "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    s = share(rows)
    print(json.dumps(s, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
