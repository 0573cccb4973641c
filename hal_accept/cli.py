"""``hal accept``: the migration acceptance report (also ``python -m hal_accept``)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EPILOG = """\
examples:
  hal accept train.py                               reference cpu, target emu, 10 steps each
  hal accept --target emu:musa-2.7 train.py --epochs 1
                                                    the emulator with Moore Threads' operator coverage;
                                                    hal accept's options first, the script's own after it
  hal accept --nproc-per-node 2 --steps 20 -o accept.html --json accept.json train_ddp.py
  hal accept --model tiny-llama/ --batches 1,4,16 train.py
                                                    inference too: TTFT, TPOT, tokens/s per batch size
  hal accept --onnx model.onnx --target emu:musa-2.7 train.py
                                                    the model's ONNX export too: its scan and rewrite for
                                                    musa's ONNX profile, its INT8 size and accuracy
  hal accept --reference cuda --target ascend --min-throughput-ratio 0.8 --loss-rtol 0.01 train.py
                                                    on a site with both: CUDA as the reference

The script runs unmodified through `hal run` on the reference and on each target, with hal.metrics
attached from outside (loss, grad norm, samples/s per optimizer step) and ended after --steps steps.
Sections: code changes, operators, numerics (a diverging loss curve is bisected to the aten op
and its call site by routing halves of the ops to the host), throughput and memory, stability (rank
0 killed between two checkpoints taken from outside the script, torchrun's restart, the resumed
losses against the uninterrupted run's, the recovery time; the reference's checkpoint resumed on each
target), environment. With --model, inference too: greedy generation with a KV cache at each batch
size (TTFT, TPOT, tokens/s, token agreement). With --onnx, the export's op_coverage scan and rewrite
for each target's ONNX profile (operators) and its INT8 model from op_coverage quantize's steps: size
and accuracy against the float model (inference). docs/accept.md.

exit codes:
  0  every gate holds (the runs, the loss, the throughput, the stability; with --model the inference;
     with --int8-max-error / --int8-min-cosine the INT8 of the --onnx export)
  1  a gate fails (the report says which)
  2  a usage error
  3  a run failed (the script did not finish on the reference or a target)
"""


def add_parser(sub) -> None:
    p = sub.add_parser("accept", help="the migration acceptance report: your script, reference against target",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", help="the training script (run unmodified)")
    p.add_argument("script_args", nargs=argparse.REMAINDER,
                   help="its own arguments (everything after the script is the script's, as with hal run)")
    p.add_argument("--reference", default="cpu", help="where the script is known to work (default: %(default)s)")
    p.add_argument("--target", action="append", dest="targets", metavar="T",
                   help="a backend to accept (repeat; emu:<profile> takes on a vendor's coverage); default emu")
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N", help="processes per run (torchrun)")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps per run (default: %(default)s)")
    p.add_argument("--min-throughput-ratio", type=float, default=0.8, metavar="R",
                   help="gate: target p50 samples/s >= R x the reference's (default: %(default)s)")
    p.add_argument("--loss-rtol", type=float, default=0.02, metavar="X",
                   help="gate: each step's loss within X x |reference| (default %(default)s, for bf16/fp16 "
                        "autocast; 1e-4 suits a float32 script)")
    p.add_argument("--loss-atol", type=float, default=1e-6, metavar="X", help="plus this absolute tolerance")
    p.add_argument("--no-bisect", action="store_true", help="do not search the operator behind a diverging loss")
    p.add_argument("--no-stability", action="store_true",
                   help="do not rehearse a failure (kill, restart, resume) nor open the reference's checkpoint on "
                        "the targets")
    p.add_argument("--model", metavar="DIR", help="inference too: a Hugging Face causal-LM folder (or its config.json) "
                                                  "generated with greedily on the reference and each target")
    p.add_argument("--batches", default="1,2,4,8,16,32", metavar="B,B",
                   help="inference batch sizes / concurrency (default: %(default)s)")
    p.add_argument("--new-tokens", type=int, default=16, metavar="N", help="tokens generated per sequence")
    p.add_argument("--max-token-disagreement", type=float, default=0.05, metavar="X",
                   help="gate: share of the target's generated tokens that may differ (default: %(default)s)")
    p.add_argument("--onnx", metavar="MODEL.onnx",
                   help="the model's ONNX export: its scan and rewrite for each target's ONNX profile, and its "
                        "INT8 model's size and accuracy (op_coverage quantize's steps)")
    p.add_argument("--int8-max-error", type=float, metavar="X",
                   help="gate (as op_coverage quantize --max-error): every INT8 output's max abs error <= X")
    p.add_argument("--int8-min-cosine", type=float, metavar="C",
                   help="gate (as op_coverage quantize --min-cosine): every INT8 output's cosine similarity >= C")
    p.add_argument("--workdir", default="accept-runs", help="the runs' files (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S", help="per run (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="FILE.html", help="write the HTML report")
    p.add_argument("--json", metavar="FILE", nargs="?", const="-",
                   help="write the JSON report to FILE (schema hal.accept/1; without FILE: print it)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run)


def run(args) -> int:
    from hal.util.io import atomic_write
    from hal_accept.accept import accept
    from hal_accept.options import AcceptOptions, AcceptUsageError, parse_target
    from hal_accept.report import terminal, to_html

    script_args = list(args.script_args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    try:
        options = AcceptOptions(script=args.script, script_args=tuple(script_args),
                                reference=parse_target(args.reference),
                                targets=tuple(parse_target(t) for t in (args.targets or ["emu"])),
                                nproc_per_node=args.nproc_per_node, steps=args.steps,
                                min_throughput_ratio=args.min_throughput_ratio, loss_rtol=args.loss_rtol,
                                loss_atol=args.loss_atol, bisect=not args.no_bisect, stability=not args.no_stability,
                                workdir=Path(args.workdir),
                                timeout_s=args.timeout, model=args.model,
                                batches=tuple(int(b) for b in args.batches.split(",") if b.strip()),
                                new_tokens=args.new_tokens,
                                max_token_disagreement=args.max_token_disagreement, onnx=args.onnx,
                                int8_max_error=args.int8_max_error, int8_min_cosine=args.int8_min_cosine).check()
    except ValueError:  # int() of --batches
        print(f"hal accept: error: --batches {args.batches!r}: give whole numbers separated by commas (1,2,4)",
              file=sys.stderr)
        return 2
    except AcceptUsageError as exc:
        print(f"hal accept: error: {exc}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"hal accept: {line}", file=sys.stderr, flush=True)
    report = accept(options, progress)
    text = json.dumps(report, indent=1, default=str) + "\n"
    if args.json == "-":
        print(text, end="")
    elif args.json:
        atomic_write(args.json, text)
    if args.output:
        atomic_write(args.output, to_html(report))
    print(terminal(report), file=sys.stderr if args.json == "-" else sys.stdout)
    return int(report["exit_code"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="hal")
    sub = p.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = p.parse_args(["accept", *(sys.argv[1:] if argv is None else argv)])
    return args.run(args)
