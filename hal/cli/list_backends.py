"""``hal list``: every backend, its status and the evidence for it; the package behind each plugin."""
from __future__ import annotations

import argparse
import textwrap
from typing import List

from hal.util.term import paint, print_json, table, use_color
from hal.plugin.origin import dist_label
from hal.plugin.registry import get_registry

HELP_EPILOG = """\
examples:
  hal list                 status of every backend
  hal list -v              with the evidence each probe used
  hal list --json          JSON, schema hal.list/1 (docs/hal-list.schema.json)

status values: available, not installed, no device, broken, blocked
"""

_COLORS = {"available": "green", "not installed": "dim", "no device": "yellow", "broken": "red",
           "blocked": "dim"}


def add_parser(sub):
    p = sub.add_parser("list", help="backends, their status and evidence", epilog=HELP_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON (schema hal.list/1)")
    p.add_argument("-v", "--verbose", action="store_true", help="show each probe's evidence")
    p.set_defaults(run=run)


def run(args) -> int:
    report = get_registry().report()
    if args.json:
        print_json(report)
        return 0
    color = use_color()
    rows = []
    for b in report["backends"]:
        mark = "*" if b["name"] == report["selected"] else " "
        rows.append([mark + b["name"], b["status"], b["device_type"], b["dist_backend"] or "-", b["reason"]])
    text = table(rows, [" NAME", "STATUS", "DEVICE", "CCL", "REASON"], [11, 13, 6, 5, 35])
    lines = text.splitlines()
    print(lines[0])
    for line, b in zip(lines[1:], report["backends"]):
        print(line.replace(b["status"], paint(b["status"], _COLORS[b["status"]], color), 1))
        if args.verbose:
            for e in b["evidence"]:
                print(f"      - {e}")
    for f in report["plugin_failures"]:
        status = "blocked" if f["stage"] == "blocked" else "broken"
        print(f" {f['plugin']:<12} {paint(status, _COLORS[status], color)}  plugin {f['stage']}: {f['reason']}")
    print()
    for line in plugin_lines(report["plugins"]):
        print(line)
    print(f"selected: {report['selected']} ({report['selection_reason']})")
    return 0


def plugin_lines(plugins, width: int = 80) -> List[str]:
    """``plugins: hal 0.1.0: cpu, cuda, ...; acme-hal 1.2: acme`` (the distribution that
    supplied each plugin, grouped), wrapped to ``width`` columns."""
    groups: dict = {}
    for p in plugins:
        groups.setdefault(dist_label(p["distribution"], p["version"]), []).append(p["name"])
    text = "; ".join(f"{label}: {', '.join(names)}" for label, names in groups.items())
    return textwrap.wrap(text, width, initial_indent="plugins: ", subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)
