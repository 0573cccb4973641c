"""``hal metrics summary``: where throughput dropped, which ranks straggled, and whether
the run is communication-bound."""
from __future__ import annotations

import argparse

from hal.util.term import paint, print_json, table, use_color

EPILOG = """\
examples:
  hal metrics summary runs/exp1/run.jsonl
  hal metrics summary runs/exp1/run.rank*.jsonl        every rank: drops, stragglers, and the
                                                       stragglers named live during the run
  hal metrics summary run.jsonl --threshold 0.5 --window 50
  hal metrics summary run.jsonl --json                 schema hal.metrics.summary/1
  hal metrics summary run.jsonl --health health.jsonl  each drop next to the health patrol
                                                       rounds (hal doctor --every) near it
  hal metrics summary run.rank*.jsonl --comm-bound 0.2 communication-bound above 20% exposed
                                                       communication (default 30%)

A step is slow when its throughput (samples/s, else tokens/s, else steps/s) is below
THRESHOLD x the median of the previous WINDOW normal steps; consecutive slow steps are
one drop.  With --health, each drop lists the patrol rounds that overlap its time window
widened by --health-margin seconds.  Where the records carry communication time
(MetricsLogger.watch(model)), each rank shows the share of its step time in collectives and
in exposed ones (the training waited for them); above --comm-bound the rank is
communication-bound, with what to try (unless another rank waited less and is below the
bound: then the ranks above wait for that slower rank, not for the network), and each drop
shows its own exposed share.
Exit status: 0 nothing found, 1 drops, stragglers, communication-bound or waiting ranks or health
rounds not OK found, 3 unreadable input.
"""


def add_parser(sub):
    p = sub.add_parser("metrics", help="summaries of hal.metrics JSONL files",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  hal metrics summary run.jsonl\n  hal metrics summary --help")
    msub = p.add_subparsers(dest="metrics_command", metavar="ACTION")
    s = msub.add_parser("summary", help="throughput drops, stragglers and communication-bound ranks in a run",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("files", nargs="+", metavar="FILE.jsonl", help="metrics files (one per rank)")
    s.add_argument("--threshold", type=float, default=0.7,
                   help="flag steps below this fraction of the trailing median (default 0.7)")
    s.add_argument("--window", type=int, default=20, help="trailing steps in the median (default 20)")
    s.add_argument("--straggler-ratio", type=float, default=1.2,
                   help="a rank slower than this x the fastest rank's median is a straggler (default 1.2)")
    s.add_argument("--health", action="append", default=[], metavar="HEALTH.jsonl",
                   help="health patrol records (hal doctor --every S --out FILE) to place next to "
                        "the drops (repeatable)")
    s.add_argument("--health-margin", type=float, default=300.0, metavar="SECONDS",
                   help="a round is near a drop when it overlaps the drop's time +- this (default 300)")
    s.add_argument("--comm-bound", type=float, default=0.3, metavar="SHARE",
                   help="a rank is communication-bound when exposed communication is above this share of "
                        "its step time (default 0.3)")
    s.add_argument("--json", action="store_true", help="print JSON (schema hal.metrics.summary/1)")
    s.set_defaults(run=run)
    p.set_defaults(run=lambda args: (p.print_help(), 2)[1])


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:,.1f}"


def _when(t) -> str:
    import time
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _round(x, color) -> str:
    st = x["status"]
    off = "" if x["offset_s"] is None else f" ({x['offset_s']:+.0f} s)"
    why = "; ".join(f"{c['name']} {c['status']}: {c['summary']}" for c in x["not_ok"])
    return (f"{_when(x['time_unix'])}{off} {x['host']} round {x['round']} "
            + paint(st, {"OK": "green", "WARN": "yellow"}.get(st, "red"), color) + (f": {why}" if why else ""))


def _print_health(d, margin, color) -> None:
    head = f"    steps {d['start_step']}..{d['end_step']}"
    if d.get("start_time_unix") is None:
        print(f"{head}: no time_unix in the records; cannot place health rounds")
    elif not d["health"]:
        print(f"{head} ({_when(d['start_time_unix'])}): no health round within {margin:g} s")
    else:
        print(f"{head} ({_when(d['start_time_unix'])}), health rounds within {margin:g} s:")
        for x in d["health"]:
            print(f"      {_round(x, color)}")


def run(args) -> int:
    from hal.metrics import summarize
    rep = summarize(args.files, threshold=args.threshold, window=args.window,
                    straggler_ratio=args.straggler_ratio, health=args.health,
                    health_margin=args.health_margin, comm_bound=args.comm_bound)
    found = (any(r["drops"] for r in rep["runs"]) or bool(rep["stragglers"]) or bool(rep["live_stragglers"])
             or bool(rep.get("health", {}).get("not_ok")) or bool(rep["comm_bound_ranks"])
             or bool(rep["comm_waiting_ranks"]))
    if args.json:
        print_json(rep)
        return 1 if found else 0
    color = use_color()
    for r in rep["runs"]:
        unit = r["metric"].replace("_per_s", "/s")
        print(paint(r["file"], "bold", color) +
              f"  run={r['run']} rank={r['rank']} device={r['device']}  steps {r['first_step']}..{r['last_step']}")
        print(f"  median {_fmt(r['median'])} {unit}   step time p50 {_fmt(r['step_time_p50_s'], 's')}"
              f"  p99 {_fmt(r['step_time_p99_s'], 's')}"
              + (f"   peak memory {r['mem_peak_bytes'] / 2**20:,.1f} MiB ({r['mem_source']})"
                 if r["mem_peak_bytes"] else ""))
        for n in r["notes"]:
            print(paint(f"  note: {n}", "dim", color))
        c = r.get("comm")
        if c is not None:
            line = (f"  communication {c['share']:.1%} of step time, exposed {c['exposed_share']:.1%} "
                    f"({_fmt(c['comm_time_s'] / c['steps'], 's')} and {_fmt(c['comm_exposed_s'] / c['steps'], 's')} "
                    f"per step, {c['count'] / c['steps']:.1f} collectives of {c['bytes'] / c['steps'] / 2**20:,.1f} "
                    "MiB per step)")
            if c["bound"] and r["rank"] in rep["comm_bound_ranks"]:
                print(paint(line + f": communication-bound (exposed above {rep['comm_bound']:.0%})", "red", color))
            elif c["bound"]:
                print(paint(line + ": waiting for slower ranks", "yellow", color))
            else:
                print(line)
        if not r["drops"]:
            print(paint(f"  no throughput drop below {rep['threshold']:.0%} of the trailing median", "green", color))
            continue
        print(paint(f"  {len(r['drops'])} throughput drop(s) below {rep['threshold']:.0%} of the trailing "
                    f"median of {rep['window']} steps:", "yellow", color))
        rows = [[f"{d['start_step']}..{d['end_step']}", d["steps"], _fmt(d["min_value"]),
                 _fmt(d["baseline"]), f"{d['ratio']:.2f}"] for d in r["drops"]]
        head = ["STEPS", "LEN", f"MIN {unit}", "BASELINE", "RATIO"]
        if c is not None:
            head.append("EXPOSED COMM")
            for row, d in zip(rows, r["drops"]):
                row.append("-" if d["comm_exposed_share"] is None else f"{d['comm_exposed_share']:.0%}")
        print("    " + table(rows, head).replace("\n", "\n    "))
        for d in r["drops"]:
            if d.get("comm_bound"):
                print(paint(f"    steps {d['start_step']}..{d['end_step']}: the training waited for communication "
                            f"{d['comm_exposed_share']:.0%} of those steps' time (the whole run: "
                            f"{c['exposed_share']:.0%}): this drop is communication", "yellow", color))
        if "health" in rep:
            for d in r["drops"]:
                _print_health(d, rep["health"]["margin_s"], color)
    if "health" in rep:
        h = rep["health"]
        for n in h["notes"]:
            print(paint(f"note: {n}", "dim", color))
        print(paint(f"health: {h['rounds']} patrol round(s), {len(h['not_ok'])} not OK", "yellow" if h["not_ok"]
                    else "green", color))
        for x in h["not_ok"]:
            print(f"  {_round(x, color)}")
    if rep["comm_bound_ranks"]:
        ranks = ", ".join(str(x) for x in rep["comm_bound_ranks"])
        print(paint(f"communication-bound: rank(s) {ranks} waited for collectives more than "
                    f"{rep['comm_bound']:.0%} of their step time; try:", "red", color))
        for a in rep["comm_advice"]:
            print(f"  - {a}")
    if rep["comm_waiting_ranks"]:
        least = min((r for r in rep["runs"] if r.get("comm")), key=lambda r: r["comm"]["exposed_share"])
        ranks = ", ".join(str(x) for x in rep["comm_waiting_ranks"])
        print(paint(f"waiting for slower ranks: rank(s) {ranks} waited for collectives more than "
                    f"{rep['comm_bound']:.0%} of their step time, rank {least['rank']} only "
                    f"{least['comm']['exposed_share']:.0%}: a collective ends when the last rank joins it, so they "
                    f"wait for rank {least['rank']}'s work, not for the network; even out the ranks' work (data, "
                    "shapes, a slow device: see the stragglers)", "yellow", color))
    for s in rep["stragglers"]:
        print(paint(f"straggler: rank {s['rank']} ({s['file']}) median step {_fmt(s['median_step_time_s'], 's')}, "
                    f"{s['vs_fastest']:.2f}x the fastest rank", "red", color))
    for s in rep["live_stragglers"]:
        until = (f"to step {s['last_step']} (recovered at step {s['recovered_at_step']})"
                 if s["recovered_at_step"] is not None else "onwards (no recovery recorded)")
        print(paint(f"live straggler: rank {s['rank']} from step {s['first_step']} {until}, named at step "
                    f"{s['named_at_step']}: step time {_fmt(s['step_time_s'], 's')} = {s['ratio']:.1f}x the "
                    f"median of the other ranks", "red", color))
    return 1 if found else 0
