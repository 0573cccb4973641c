"""``op_coverage rewrite``: replace what a target lacks, check, verify, write, rescan."""
from __future__ import annotations

import argparse
import json
import sys

from op_coverage.cli._common import parse_dims

REWRITE_EXAMPLES = """\
examples:
  op_coverage rewrite model.onnx --target ascend -o model.ascend.onnx
  op_coverage rewrite model.onnx -t ort-cpu --without LayerNormalization,Gelu,Softmax,Erf,Gemm -o out.onnx
  op_coverage rewrite model.onnx -t my_npu --profile my_npu.json -o out.onnx --inputs sample.npz
  op_coverage rewrite model.onnx -t musa -o out.onnx --dim batch=4 --dim seq=128 --json
  op_coverage rewrite model.onnx -t ascend -o out.onnx --plan-only     # show the plan, write nothing

exit codes:
  0   rewritten, checked, verified; every node is native on the target
  4   written and verified, but some ops have no composition of native ops (listed)
  5   verification failed: an output changed beyond tolerance; nothing written
  6   the rewrite fails onnx.checker, or onnxruntime cannot run the original to verify
  10-17  bad input, as for 'scan' (not found, not ONNX, unsafe external data, bad profile, ...)
  18  bad --inputs file
"""


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    r = sub.add_parser(
        "rewrite", formatter_class=fmt, help="replace ops a target lacks with verified compositions",
        description="Replace every node the target does not run natively by a composition of operators it "
                    "does run (ONNX function bodies first, then op_coverage's rules), everywhere: subgraphs and "
                    "functions too. The result must pass onnx.checker (full check) and match the original's "
                    "outputs in onnxruntime within dtype-aware tolerances, or nothing is written. External "
                    "data stays external (OUTPUT.data beside OUTPUT). Finally the output is rescanned.",
        epilog=REWRITE_EXAMPLES)
    r.add_argument("path", help="the .onnx model to rewrite (never modified)")
    r.add_argument("-t", "--target", required=True, metavar="NAME", help="one target name or alias")
    r.add_argument("-o", "--output", metavar="FILE", help="where to write the rewritten model (required "
                                                         "unless --plan-only)")
    r.add_argument("--profile", action="append", default=[], metavar="FILE", help="extra profile JSON")
    r.add_argument("--without", action="append", default=[], metavar="OPS",
                   help="treat these ops as unsupported on the target (comma list; domain::Op for other domains)")
    r.add_argument("--inputs", action="append", default=[], metavar="FILE",
                   help="verification inputs: an .npz (one array per input name) or .pb TensorProto files")
    r.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value of a symbolic dim for generated inputs (default 2)")
    r.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")
    r.add_argument("--atol", type=float, help="absolute tolerance for every output (default: by dtype)")
    r.add_argument("--rtol", type=float, help="relative tolerance for every output (default: by dtype)")
    r.add_argument("--no-verify", action="store_true", help="skip running the models (checker still runs)")
    r.add_argument("--plan-only", action="store_true", help="print the plan per op type; write nothing")
    r.add_argument("--max-depth", type=int, default=6, help="how deeply rules may nest (default 6)")
    r.add_argument("--json", action="store_true", help="machine-readable report on stdout")


def _plan_only(a) -> int:
    import onnx

    from op_coverage.targets.lacking import parse_ops, without
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.plan.apply import rewrite_model
    from op_coverage.targets.catalog import load_targets
    loaded = load_for_scan(a.path)
    ts = load_targets(a.profile)
    profile = without(ts.resolve_names([a.target])[0], parse_ops(a.without))
    res = rewrite_model(onnx.load(a.path, load_external_data=False), profile, max_depth=a.max_depth,
                        types_from=loaded.model)
    doc = {"format": "op_coverage.plan/1", "source": a.path, "target": profile.name, **res.to_dict()}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_plan(res, profile.name)
    return 4 if res.blocked else 0


def _print_plan(res, target: str) -> None:
    if not res.plans and not res.blocked:
        print(f"every node is native on {target}; nothing to rewrite")
    for op, p in res.plans.items():
        print(f"{op} x{res.replaced[op]}: replaceable via {' > '.join(p['via'])} "
              f"({p['nodes']} nodes{'' if p['exact'] else ', approximate'}; leaves: {', '.join(p['leaves'])})")
    for op, p in res.blocked.items():
        print(f"{op}: no composition; blocked by {', '.join(p['blocked_by'])}")
        for why in p["reasons"][:3]:
            print(f"    {why}")


def _error_doc(a, e) -> dict:
    """The ``--json`` document of a rewrite that stopped before it had a plan (bad input, usage)."""
    return {"format": "op_coverage.rewrite/1", "source": a.path, "output": a.output, "target": a.target,
            "written": False, "external_data": None, "checked": False, "replaced": {}, "added": {}, "plans": {},
            "blocked": {}, "verification": None, "rescan": None, "problems": [],
            "error": {"kind": e.kind, "message": str(e), "exit_code": e.exit_code}, "exit_code": e.exit_code}


def run(a) -> int:
    """Run ``op_coverage rewrite``; returns the exit code.  With ``--json`` every exit prints its document."""
    from op_coverage.errors import ScanError
    if a.plan_only:
        return _plan_only(a)
    try:
        return _run(a)
    except ScanError as e:
        if a.json:
            rep = getattr(e, "report", None)
            print(json.dumps(rep.to_dict() if rep is not None else _error_doc(a, e), indent=2))
        elif getattr(e, "report", None) is not None and e.report.verification is not None:
            _print_verification(e.report)
        raise


def _run(a) -> int:
    from op_coverage.errors import ScanError
    from op_coverage.rewrite import rewrite
    if not a.output:
        msg = "-o/--output is required (or use --plan-only)"
        if a.json:
            e = ScanError(msg)
            e.kind, e.exit_code = "usage", 2
            print(json.dumps(_error_doc(a, e), indent=2))
        print(f"op_coverage rewrite: error: {msg}", file=sys.stderr)
        return 2
    rep = rewrite(a.path, a.target, a.output, profiles=a.profile, without_ops=a.without, inputs=a.inputs,
                  seed=a.seed, dims=parse_dims(a.dim), atol=a.atol, rtol=a.rtol, verify_outputs=not a.no_verify,
                  max_depth=a.max_depth)
    if a.json:
        print(json.dumps(rep.to_dict(), indent=2))
        return rep.exit_code()
    _print_plan(rep.result, rep.target)
    _print_verification(rep)
    print(f"wrote {rep.output}" + (f" (+ {rep.external_data} beside it)" if rep.external_data else ""))
    rs = rep.rescan
    print(f"rescan for {rep.target}: {rs['nodes']} nodes, {rs['coverage_by_node']:.1f}% native"
          + (f"; still not native: {', '.join(f'{k} x{v}' for k, v in rs['not_native'].items())}"
             if rs["not_native"] else ""))
    return rep.exit_code()


def _print_verification(rep) -> None:
    v = rep.verification
    if v is None:
        print("verification skipped (--no-verify); onnx.checker passed")
        return
    print(f"verification on {v.inputs} inputs" + (f" (seed {v.seed})" if v.seed is not None else "") + ":")
    for o in v.outputs:
        mark = ("ok* " if o.note else "ok  ") if o.ok else "FAIL"
        print(f"  {mark} {o.name}: {o.dtype}{o.shape} max abs {o.max_abs:.3g}, max rel {o.max_rel:.3g} "
              f"(atol {o.atol:g}, rtol {o.rtol:g}){' ' + o.note if o.note else ''}")
