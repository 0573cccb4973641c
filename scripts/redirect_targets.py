"""The redirection's table of targets (hal/data/redirect_targets.json), from what it patches on each torch.

    python scripts/redirect_targets.py collect -o build/torch-window/2.13.0/targets.json   # this interpreter's torch
    python scripts/redirect_targets.py write build/torch-window/*/targets.json             # the table, from every release
    python scripts/redirect_targets.py show                                               # the version-bound targets

``collect`` runs ``hal.redirect.enable()`` on the installed torch (the selected backend; the targets
do not depend on it) and writes what was patched and what this torch lacks, by part of the shim.
``make torch-window`` runs it in each release's venv (``--only-targets`` does nothing else).  ``write``
merges one collection per release into the table; the ``groups`` texts are kept from the table in force.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="what the redirection patches on this torch")
    c.add_argument("-o", "--output", type=Path, required=True)
    c.add_argument("--names", type=Path, help="a JSON list of more target names to say the presence of "
                                              "(those other releases' collections found)")
    w = sub.add_parser("write", help="merge collections (one per torch release) into hal/data/redirect_targets.json")
    w.add_argument("collections", nargs="+", type=Path)
    sub.add_parser("show", help="print the targets patched on some checked releases only")
    args = p.parse_args(argv)

    from hal.redirect import targets as _targets

    if args.cmd == "collect":
        also = json.loads(args.names.read_text(encoding="utf-8")) if args.names else ()
        got = _targets.collect(also)
        _write_json(args.output, got)
        print(f"torch {got['torch']}: {len(got['patched'])} patched, {len(got['not_patched'])} absent -> {args.output}")
        return 0
    if args.cmd == "write":
        runs = []
        for path in args.collections:
            try:
                runs.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:
                p.error(f"{path}: not a collection written by `collect` ({exc}); run collect on that torch again")
        try:
            groups, known = _targets.table().get("groups", {}), _targets.table().get("targets", {})
        except (OSError, ValueError):
            groups, known = {}, {}
        try:
            new = _targets.merge(runs, groups, known)
        except ValueError as exc:
            print(f"redirect_targets: {exc}", file=sys.stderr)
            return 1
        _write_json(_targets.TABLE_PATH, new)
        blank = [g for g, text in new["groups"].items() if not text]
        print(f"{_targets.TABLE_PATH}: {len(new['targets'])} targets, checked on torch {', '.join(new['checked_on'])}")
        if blank:
            print(f"describe these groups (what they redirect) in the table: {', '.join(blank)}", file=sys.stderr)
        return 0
    tab = _targets.table()
    print(f"checked on torch {', '.join(tab['checked_on'])}")
    for name, entry in tab["targets"].items():
        if "since" in entry or "until" in entry:
            print(f"  {name}: {', '.join(_targets.releases(name))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
