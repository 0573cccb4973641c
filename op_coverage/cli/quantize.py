"""``op_coverage quantize``: INT8 a target can run, with the size, latency and accuracy it costs."""
from __future__ import annotations

import argparse
import sys

QUANTIZE_EXAMPLES = """\
examples:
  op_coverage quantize model.onnx -t ort-cpu -o model.int8.onnx
  op_coverage quantize model.onnx -t nncase -o model.int8.onnx --dim batch=1 --dim seq=128
  op_coverage quantize cnn.onnx -t ort-cpu -o cnn.int8.onnx --mode static --calibration calib/ --per-channel
  op_coverage quantize model.onnx -t ort-cpu -o out.onnx --max-error 0.05 --min-cosine 0.999   # CI gate
  op_coverage quantize model.onnx -t ort-cpu -o out.onnx --exclude lm_head,MatMul_3 --format md
  op_coverage quantize model.onnx -t ort-cpu -o out.onnx --json --runs 0            # no latency runs

exit codes:
  0   quantized, checked, within the gates, written; every node is native on the target
  4   written, but the rescan finds ops the target does not run natively (the float model had them)
  5   an accuracy gate failed (--max-error / --min-cosine); nothing written
  6   the result fails onnx.checker, or onnxruntime cannot run the float or the quantized model; nothing written
  7   the target runs no INT8 form of the model's ops (or --exclude left none); the model stays float, nothing written
  2   usage error (no -o, unknown --exclude node, bad --dim, a gate no model could pass)
  10-17  bad input, as for 'scan' (not found, not ONNX, truncated, unsafe external data, opset, bad profile,
         unknown target, unwritable -o)
  18  bad --inputs or --calibration file
"""


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    q = sub.add_parser(
        "quantize", formatter_class=fmt, help="INT8 the target can run, with the accuracy it costs",
        description="Quantize a float model to INT8 with onnxruntime.quantization. The format comes from the "
                    "target's profile: integer operators (DynamicQuantizeLinear + MatMulInteger/ConvInteger for "
                    "--mode dynamic, QLinearConv/QLinearMatMul for --mode static) when the target runs them, else "
                    "QDQ (QuantizeLinear/DequantizeLinear around float ops, calibrated), else nothing. Every try "
                    "is rescanned: op types whose quantized form the target lacks stay float, and the report "
                    "says why. onnxruntime's own default call (quantize_dynamic / quantize_static with its "
                    "defaults) is a candidate too, unless --exclude or --per-channel is given: when the target runs "
                    "it and it is smaller, it is written, so "
                    "on ort-cpu the result is never larger than onnxruntime's. The result must pass onnx.checker and the accuracy gates, or nothing is written. "
                    "The report gives the size before and after, the onnxruntime CPU latency ratio (1 thread, "
                    "interleaved runs) and, per output, max abs/relative error, cosine similarity and top-1 "
                    "agreement for [..., C] outputs. External data stays external (OUTPUT.data).",
        epilog=QUANTIZE_EXAMPLES)
    q.add_argument("path", help="the float .onnx model (never modified)")
    q.add_argument("-t", "--target", required=True, metavar="NAME", help="one target name or alias")
    q.add_argument("-o", "--output", metavar="FILE", help="where to write the INT8 model (required)")
    q.add_argument("--mode", choices=("dynamic", "static"), default="dynamic",
                   help="dynamic: activation scales computed at run time (default); static: calibrated scales")
    q.add_argument("--calibration", metavar="NPZ|DIR",
                   help="calibration inputs: an .npz (one array per input; an extra leading axis = samples) or a "
                        "folder of .npz files, one sample each (default: generated random inputs, said in the report)")
    q.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    q.add_argument("--exclude", action="append", default=[], metavar="NODE,...",
                   help="node names to keep float (comma list, repeatable)")
    q.add_argument("--profile", action="append", default=[], metavar="FILE", help="extra profile JSON")
    q.add_argument("--inputs", action="append", default=[], metavar="FILE",
                   help="inputs for the accuracy comparison and latency: .npz or .pb (default: generated)")
    q.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value of a symbolic dim for generated inputs (default 2); e.g. --dim seq=128")
    q.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")
    q.add_argument("--max-error", type=float, metavar="X", help="fail (exit 5) when any output's max abs error > X")
    q.add_argument("--min-cosine", type=float, metavar="C",
                   help="fail (exit 5) when any float output's cosine similarity < C")
    q.add_argument("--runs", type=int, default=10,
                   help="interleaved run pairs per latency repeat (default 10; 0: no latency measurement)")
    q.add_argument("--repeats", type=int, default=3, help="latency repeats; the ratio is their median (default 3)")
    q.add_argument("--no-compare", action="store_true",
                   help="skip the side-by-side measurement of onnxruntime's own default quantize_dynamic/"
                        "quantize_static (its result is still made when it can be the smaller candidate)")
    q.add_argument("--format", choices=("table", "json", "md"), default=None, help="report format (default: table)")
    q.add_argument("--json", action="store_true", help="same as --format json")


def _error_doc(a, e) -> dict:
    """The report of a quantize that stopped before it had one (bad input, usage)."""
    from op_coverage.quantize import QuantizeReport
    r = QuantizeReport(a.path, a.output, a.target, a.mode, per_channel=a.per_channel)
    r.error = {"kind": e.kind, "message": str(e), "exit_code": e.exit_code}
    return r.to_dict()


def run(a) -> int:
    """Run ``op_coverage quantize``; returns the exit code. With ``--json`` every exit prints its document."""
    from op_coverage.cli._common import parse_dims
    from op_coverage.errors import ScanError
    from op_coverage.quantize import Gates, QuantizeOptions, quantize
    from op_coverage.report.quantize import render_quantize
    fmt = "json" if a.json else (a.format or "table")
    try:
        if not a.output:
            e = ScanError("-o/--output is required: where to write the INT8 model")
            e.kind, e.exit_code = "usage", 2
            raise e
        options = QuantizeOptions(
            mode=a.mode, calibration=a.calibration, per_channel=a.per_channel,
            exclude=[x.strip() for s in a.exclude for x in s.split(",") if x.strip()], profiles=a.profile,
            inputs=a.inputs, seed=a.seed, dims=parse_dims(a.dim), gates=Gates(a.max_error, a.min_cosine),
            runs=max(a.runs, 0), repeats=max(a.repeats, 1), compare=not a.no_compare)
        rep = quantize(a.path, a.target, a.output, options)
    except ScanError as e:
        rep = getattr(e, "report", None)
        doc = rep.to_dict() if rep is not None else _error_doc(a, e)
        if fmt == "json":
            sys.stdout.write(render_quantize(doc, fmt))
        elif rep is not None:
            sys.stdout.write(render_quantize({**doc, "error": None}, fmt))
        raise
    sys.stdout.write(render_quantize(rep.to_dict(), fmt))
    return rep.exit_code()
