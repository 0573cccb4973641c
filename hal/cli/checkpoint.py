"""``hal checkpoint ls``: the checkpoints in a folder, which one resume would use, and why not the others."""
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


def add_parser(sub):
    p = sub.add_parser("checkpoint", help="inspect hal.checkpoint folders",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  hal checkpoint ls runs/exp1/ckpt\n"
                              "  hal checkpoint events runs/exp1/ckpt")
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
    p.set_defaults(run=lambda args: (p.print_help(), 2)[1])


def collect(dir, verify: bool = False) -> dict:
    """What ``hal checkpoint ls --json`` prints."""
    from hal.checkpoint._layout import read_latest, scan
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

    from hal.checkpoint import _events

    events = _events.read(args.dir)
    if args.json:
        print_json({"schema": "hal.checkpoint.events/1", "dir": str(args.dir), "events": events})
        return 0 if events else 1
    if not events:
        print(f"{args.dir}: no {_events.EVENTS}; the Checkpointer writes it at its first resume()")
        return 1
    color = use_color()
    colors = {"failure": "red", "save_failed": "yellow", "resume": "cyan", "closed": "green"}
    for e in events:
        when = datetime.datetime.fromtimestamp(e.get("time_unix", 0)).strftime("%Y-%m-%d %H:%M:%S")
        kind = paint(f"{e.get('event', '?'):<11}", colors.get(e.get("event"), "dim"), color)
        print(f"{when}  {kind} rank {e.get('rank')}  attempt {e.get('attempt')}  step {e.get('step')}  "
              f"{_event_text(e)}".rstrip())
    return 0
