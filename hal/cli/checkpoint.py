"""``hal checkpoint``: ``ls`` (which checkpoint resume would use, and why not the others), ``events``
(why the job restarted), ``info`` (what a step holds, at which world size and layout it was saved)
and ``consolidate`` (the full model of a step as one safetensors file)."""
from __future__ import annotations

import argparse

from hal.util.term import paint, print_json, table, use_color

EPILOG = """\
examples:
  hal checkpoint ls runs/exp1/ckpt            every step-* folder, complete or not, and why
  hal checkpoint ls runs/exp1/ckpt --verify   also check every file's sha256
  hal checkpoint ls runs/exp1/ckpt --json     schema hal.checkpoint.ls/1

'*' marks the checkpoint hal.checkpoint.resume() would use.  Exit status: 0 when there is
a complete checkpoint, 1 when there is none.
"""


EVENTS_EPILOG = """\
examples:
  hal checkpoint events runs/exp1/ckpt          one line per event, oldest first
  hal checkpoint events runs/exp1/ckpt --json   schema hal.checkpoint.events/1

Events (written by hal.checkpoint.Checkpointer to DIR/events.jsonl): start, failure (a rank
left the loop with an exception), save_failed (a save the storage refused; training went on),
resume (with the lines logged at that restart), closed (the loop ended normally).  A rank
killed by a signal leaves no record: the resume after it says so.  Exit status: 0; 1 when
the folder holds no events.
"""


INFO_EPILOG = """\
examples:
  hal checkpoint info runs/exp1/ckpt                    the newest complete step
  hal checkpoint info runs/exp1/ckpt --step 1000        one step
  hal checkpoint info runs/exp1/ckpt/step-00001000      the same, by folder
  hal checkpoint info runs/exp1/ckpt --json             schema hal.checkpoint.info/1
  hal checkpoint info runs/exp1/ckpt --verify           also check every file's sha256

Shows the world size and layout the step was saved at (for a sharded model, each device mesh
with its dimension names and the parameters' placements, e.g. mesh (dp=2, tp=2) [S(0), S(0)]),
every model tensor with its global shape, the optimizer state, what else it holds (scheduler,
scaler, extra, the objects saved with states=) and the data position.  A sharded step resumes at any world size or layout;
see docs/checkpoint.md.  Exit status: 0; 3 when the step is incomplete or missing.
"""

CONSOLIDATE_EPILOG = """\
examples:
  hal checkpoint consolidate runs/exp1/ckpt -o model.safetensors
        the newest complete step's full model, from however many ranks saved it
  hal checkpoint consolidate runs/exp1/ckpt --step 1000 -o model-1000.safetensors
  python -c "import safetensors.torch as st; print(list(st.load_file('model.safetensors')))"

Runs in this one process, without torch.distributed or the job's world size: the shards of a
sharded (FSDP2 / tensor parallel) step are assembled by torch.distributed.checkpoint, after
every file matched the manifest's sha256.  The output holds the model only (names as in
model.state_dict() of the unsharded model), written crash-safely (temporary name, fsync,
rename); load it with safetensors.torch.load_file and model.load_state_dict for inference or a
single-device run.  Exit status: 0; 3 when the step cannot be read.
"""


def add_parser(sub):
    p = sub.add_parser("checkpoint", help="inspect hal.checkpoint folders",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  hal checkpoint ls runs/exp1/ckpt\n"
                              "  hal checkpoint events runs/exp1/ckpt\n"
                              "  hal checkpoint info runs/exp1/ckpt\n"
                              "  hal checkpoint consolidate runs/exp1/ckpt -o model.safetensors")
    csub = p.add_subparsers(dest="checkpoint_command", metavar="ACTION")
    ls = csub.add_parser("ls", help="checkpoints in a folder and which one resume would use",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("dir", metavar="DIR", help="the folder given to hal.checkpoint.save / Checkpointer")
    ls.add_argument("--verify", action="store_true", help="check the sha256 of every file (reads everything)")
    ls.add_argument("--json", action="store_true", help="print JSON (schema hal.checkpoint.ls/1)")
    ls.set_defaults(run=run)
    ev = csub.add_parser("events", help="why the job restarted: failures, dropped saves, resumes",
                         epilog=EVENTS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("dir", metavar="DIR", help="the folder given to hal.checkpoint.Checkpointer")
    ev.add_argument("--json", action="store_true", help="print JSON (schema hal.checkpoint.events/1)")
    ev.set_defaults(run=run_events)
    info = csub.add_parser("info", help="what a step holds, and the world size and layout it was saved at",
                           epilog=INFO_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("dir", metavar="DIR", help="a checkpoint root or one of its step-* folders")
    info.add_argument("--step", type=int, help="the step to show (default: the newest complete one)")
    info.add_argument("--verify", action="store_true", help="check the sha256 of every file (reads everything)")
    info.add_argument("--json", action="store_true", help="print JSON (schema hal.checkpoint.info/1)")
    info.set_defaults(run=run_info)
    co = csub.add_parser("consolidate", help="the full model of a step as one safetensors file",
                         epilog=CONSOLIDATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    co.add_argument("dir", metavar="DIR", help="a checkpoint root or one of its step-* folders")
    co.add_argument("-o", "--output", required=True, metavar="FILE", help="the .safetensors file to write")
    co.add_argument("--step", type=int, help="the step to write (default: the newest complete one)")
    co.add_argument("--json", action="store_true", help="print JSON (schema hal.checkpoint.consolidate/1)")
    co.set_defaults(run=run_consolidate)
    p.set_defaults(run=lambda args: (p.print_help(), 2)[1])


def collect(dir, verify: bool = False) -> dict:
    """What ``hal checkpoint ls --json`` prints."""
    from hal.checkpoint import read_latest, scan
    infos = scan(dir, verify=verify)
    chosen = next((i for i in infos if i.complete), None)
    rows = []
    for i in infos:
        d = i.to_dict()
        d["bytes"] = sum(e["bytes"] for e in (i.manifest or {}).get("files", {}).values()) if i.manifest else None
        d["resume_uses"] = i is chosen
        if i.manifest:
            d.update(world_size=i.manifest.get("world_size"), mode=i.manifest.get("mode"),
                     backend=i.manifest.get("backend"))
        rows.append(d)
    return {"schema": "hal.checkpoint.ls/1", "dir": str(dir), "latest_pointer": read_latest(dir),
            "verified": verify, "resume_uses": str(chosen.path) if chosen else None, "checkpoints": rows}


def _size(n) -> str:
    if n is None:
        return "-"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n} B"


def run(args) -> int:
    rep = collect(args.dir, args.verify)
    if args.json:
        print_json(rep)
        return 0 if rep["resume_uses"] else 1
    color = use_color()
    if not rep["checkpoints"]:
        from pathlib import Path
        why = "no step-* folders" if Path(args.dir).is_dir() else "no such folder"
        print(f"{args.dir}: {why}; resume would start from scratch")
        return 1
    rows = []
    for c in rep["checkpoints"]:
        mark = "*" if c["resume_uses"] else " "
        status = paint("complete", "green", color) if c["complete"] else paint("incomplete", "red", color)
        size = _size(c["bytes"])
        rows.append([mark + str(c["step"]), status, size, c.get("backend") or "-", c["reason"]])
    print(table(rows, [" STEP", "STATUS", "SIZE", "BACKEND", "REASON"]))
    print(f"latest pointer: {rep['latest_pointer'] or '-'}   resume uses: {rep['resume_uses'] or 'nothing (fresh start)'}"
          + ("" if args.verify else "   (sizes checked; --verify for sha256)"))
    return 0 if rep["resume_uses"] else 1


def _event_text(e: dict) -> str:
    kind = e.get("event")
    if kind == "failure" or kind == "save_failed":
        err = e.get("error") or {}
        msg = " ".join(str(err.get("message", "")).split())
        return f"{err.get('type', '')}: {msg[:150]}"
    if kind == "resume":
        return f"from {e.get('path') or 'scratch'}" + "".join(f"\n      {line}" for line in e.get("lines") or [])
    return ""


def run_events(args) -> int:
    import datetime

    from hal.checkpoint import EVENTS, read_events

    events = read_events(args.dir)
    if args.json:
        print_json({"schema": "hal.checkpoint.events/1", "dir": str(args.dir), "events": events})
        return 0 if events else 1
    if not events:
        print(f"{args.dir}: no {EVENTS}; the Checkpointer writes it at its first resume()")
        return 1
    color = use_color()
    colors = {"failure": "red", "save_failed": "yellow", "resume": "cyan", "closed": "green"}
    for e in events:
        when = datetime.datetime.fromtimestamp(e.get("time_unix", 0)).strftime("%Y-%m-%d %H:%M:%S")
        kind = paint(f"{e.get('event', '?'):<11}", colors.get(e.get("event"), "dim"), color)
        print(f"{when}  {kind} rank {e.get('rank')}  attempt {e.get('attempt')}  step {e.get('step')}  "
              f"{_event_text(e)}".rstrip())
    return 0


def run_info(args) -> int:
    from hal.checkpoint import describe

    rep = describe(args.dir, args.step, verify=args.verify)
    if args.json:
        print_json(rep)
        return 0
    print(f"{rep['path']}: step {rep['step']}, saved by {rep['world_size']} rank(s) on {rep['backend'] or '-'}, "
          f"mode {rep['mode']}, {rep['files']} files, {_size(rep['bytes'])}"
          + ("" if rep["verified"] else " (sizes checked; --verify for sha256)"))
    print(f"layout: {rep['layout']['text']}")
    rows = [[name, "x".join(str(s) for s in t["shape"]) or "scalar", t["dtype"], t["placements"]]
            for name, t in rep["model"].items()]
    if rows:
        print(table(rows, ["MODEL TENSOR", "SHAPE", "DTYPE", "PLACEMENTS"]))
    opt = rep["optimizer"]
    print(f"optimizer: {opt['tensors']} tensors, {_size(opt['bytes'])}" if opt["tensors"] else "optimizer: -")
    print(f"also holds: {', '.join(rep['holds'] + [f'states[{n!r}]' for n in rep['states']]) or '-'}")
    d = rep["data"]
    if d and "position" in d:
        print(f"data position: epoch {d['epoch']}, sample {d['position']} of {d['length']} in the global order "
              f"({d['world_size']} rank(s) x {d['batch_size']} per batch)")
    elif d:
        print(f"data position: epoch {d['epoch']} (per rank)")
    return 0


def run_consolidate(args) -> int:
    from hal.checkpoint import consolidate
    from hal.checkpoint import safetensors_header, step_folder

    folder = step_folder(args.dir, args.step)
    out = consolidate(folder, args.output)
    header = {k: v for k, v in safetensors_header(out).items() if k != "__metadata__"}
    numel = 0
    for h in header.values():
        n = 1
        for s in h["shape"]:
            n *= s
        numel += n
    rep = {"schema": "hal.checkpoint.consolidate/1", "step_folder": str(folder), "output": str(out),
           "tensors": len(header), "parameters": numel, "bytes": out.stat().st_size}
    if args.json:
        print_json(rep)
    else:
        print(f"{out}: {rep['tensors']} tensors, {numel:,} values, {_size(rep['bytes'])} (from {folder})")
    return 0
