#!/usr/bin/env python3
"""Run the corpus with plain Python on this machine and check it against the manifest.

For every entry of tests/corpus/manifest.json the script is run ``--runs`` times (default 2)
as a CUDA user would run it on a CPU-only host:

    python tests/corpus/scripts/X.py ARGS...                          (nproc_per_node == 0)
    python -m torch.distributed.run --standalone --nproc-per-node N \\
           tests/corpus/scripts/X.py ARGS...                          (nproc_per_node >= 1)

and checked for: exit status 0, at least one loss matched by ``loss_regex``, and for
``deterministic`` entries identical loss values in every run. Wall time over 10 s is a
warning (``--strict-time`` makes it a failure): it depends on what else the machine runs;
``cpu_seconds`` (user+sys of the process tree) is printed next to it. A table with the wall time
and the losses is printed (``--json`` prints the full result as JSON instead).

    python tests/corpus/check_plain_cpu.py                 # whole corpus, 2 runs each
    python tests/corpus/check_plain_cpu.py mnist_cnn vae   # a subset (names with or without .py)
    python tests/corpus/check_plain_cpu.py --json > plain.json
    python tests/corpus/check_plain_cpu.py --write-seconds # store the faster run's time in the manifest

The same table can be made through hal instead of plain Python (one run per script,
``HAL_BACKEND=<backend> hal run [--nproc-per-node N] X.py ARGS...``); with ``--compare``
a plain run is made as well and, for deterministic entries, the losses must agree to
``--rtol``:

    python tests/corpus/check_plain_cpu.py --hal emu --compare

The manifest's idiom vocabulary is validated as well (every id used is defined and every
defined id is used). Exit status: 0 when every selected script passes, 1 otherwise.
Scripts run one at a time, in a scratch working directory, with a per-run timeout.
"""
import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "manifest.json")
SCRIPTS = os.path.join(HERE, "scripts")
HARD_MAX_S = 10.0

# an exception line: ``ValueError: ...``, ``torch.distributed...ChildFailedError``, hal's ``hal._errors.NotSupported: ...``
_ERROR_LINE = re.compile(r"^(?:(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|\w*NotSupported)(?::.*)?"
                         r"|hal(?: run)?: error\b.*)$")


def load_manifest(path=MANIFEST):
    with open(path) as f:
        return json.load(f)


def entry_name(entry):
    """An entry's id: its ``name`` where one script has several entries (other arguments), else the script."""
    return entry.get("name") or entry.get("script", "?")


def validate_manifest(manifest, scripts=SCRIPTS, required=("script", "args", "nproc_per_node", "idioms",
                                                            "loss_regex", "deterministic")):
    """Problems with the manifest itself, as a list of strings (empty when it is consistent).

    ``scripts`` is the folder of the scripts and ``required`` the keys every entry has
    (tests/frameworks reuses this with its own folder and schema)."""
    problems = []
    defined = set(manifest.get("idioms", {}))
    used = set()
    seen = set()
    files = set()
    for e in manifest["scripts"]:
        name = entry_name(e)
        if name in seen:
            problems.append(f"{name}: listed twice")
        seen.add(name)
        files.add(e.get("script"))
        for key in required:
            if key not in e:
                problems.append(f"{name}: missing {key!r}")
        if not os.path.isfile(os.path.join(scripts, e.get("script", "?"))):
            problems.append(f"{name}: no such file in {scripts}")
        if not e.get("deterministic", True) and not e.get("why_not_deterministic"):
            problems.append(f"{name}: deterministic is false but why_not_deterministic is empty")
        try:
            if re.compile(e.get("loss_regex", "")).groups != 1:
                problems.append(f"{name}: loss_regex must have exactly one group")
        except re.error as exc:
            problems.append(f"{name}: bad loss_regex: {exc}")
        for i in e.get("idioms", []):
            used.add(i)
            if i not in defined:
                problems.append(f"{name}: idiom {i!r} is not defined in the manifest's 'idioms'")
    for i in sorted(defined - used):
        problems.append(f"idiom {i!r} is defined but no script uses it")
    on_disk = {f for f in os.listdir(scripts) if f.endswith(".py")}
    for f in sorted(on_disk - files):
        problems.append(f"{f}: script without a manifest entry")
    return problems


def command_for(entry, python=sys.executable, hal=None, scripts=SCRIPTS, args=None):
    """The command line that runs ``entry``: plain python (torchrun when ``nproc_per_node`` >= 1)
    or, with ``hal=BACKEND``, ``hal run [--nproc-per-node N]``; ``args`` replaces the entry's."""
    # an entry with "module" runs it as ``python -m`` / ``torchrun -m`` / ``hal run -m`` do
    target = ["-m", entry["module"]] if entry.get("module") else [os.path.join(scripts, entry["script"])]
    args = entry["args"] if args is None else args
    n = int(entry.get("nproc_per_node") or 0)
    # torchrun's console options (torchtitan's launch: --local-ranks-filter 0 --role rank --tee 3)
    launcher = list(entry.get("torchrun_args", [])) if n >= 1 else []
    if hal:
        # this interpreter's hal (python -m hal is the `hal` script's entry): a `hal` found on PATH may be
        # another environment's install, tested silently in its place
        return [python, "-m", "hal", "run", *([f"--nproc-per-node={n}"] if n >= 1 else []), *launcher, *target, *args]
    if n >= 1:
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", *launcher,
                *target, *args]
    return [python, *target, *args]


def extract_losses(regex, text):
    return [m.group(1) for m in re.finditer(regex, text, flags=re.MULTILINE)]


def first_error_line(stderr, stdout=""):
    """The line that names the failure.

    Single process: the exception line that ends the (last) traceback. Under torchrun the
    launcher's ChildFailedError is skipped and the first rank's exception line is taken.
    """
    lines = [l.rstrip() for l in (stderr or "").splitlines() if l.strip()]
    candidates = []
    for line in lines:
        m = re.match(r"^\[rank(\d+)\]:\s*(.*)$", line.strip())
        text = m.group(2) if m else line.strip()
        if "ChildFailedError" in text or not _ERROR_LINE.match(text):
            continue
        candidates.append((m is not None, text))
    ranked = [t for is_rank, t in candidates if is_rank]
    if ranked:
        return ranked[0]
    if candidates:
        return candidates[-1][1]
    # torchrun's failure table when a rank died without a Python exception (a signal, os._exit)
    for i, line in enumerate(lines):
        m = re.match(r"^\s*exitcode\s*:\s*(.*)$", line)
        if m:
            rank = next((re.sub(r"\s+", " ", l.strip()) for l in lines[max(0, i - 3):i]
                         if re.match(r"^\s*rank\s*:", l)), "")
            return f"ChildFailedError: {rank + ', ' if rank else ''}exitcode {m.group(1).strip()}"
    if lines:
        return lines[-1].strip()
    out = [l for l in (stdout or "").splitlines() if l.strip()]
    return out[-1].strip() if out else "(no output)"


def _children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_once(cmd, timeout, env=None, cwd=None):
    """(exit code, wall seconds, CPU seconds of the process tree, stdout, stderr); in ``cwd``, else in a
    fresh scratch folder."""
    with (contextlib.nullcontext(cwd) if cwd else tempfile.TemporaryDirectory(prefix="corpus_run_")) as cwd:
        c0 = _children_cpu()
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
            err += f"\nTimeoutExpired: killed after {timeout}s"
        return rc, time.perf_counter() - t0, _children_cpu() - c0, out, err


def significant_digits(token):
    """Significant digits printed in a number token ('0.000824' -> 3, '2.3012e+00' -> 5)."""
    mantissa = re.split(r"[eE]", token.lstrip("+-"))[0].replace(".", "").lstrip("0")
    return len(mantissa) if mantissa else 1


def max_rel_diff(a, b):
    """Largest relative difference between two loss lists (inf when their lengths differ)."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        x, y = float(x), float(y)
        worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return worst


def check_entry(entry, runs, timeout, hal=None, compare=False, rtol=1e-4, max_seconds=HARD_MAX_S,
                strict_time=False):
    cmd = command_for(entry, hal=hal)
    env = None
    if hal:
        env = dict(os.environ, HAL_BACKEND=hal)
    results = []
    for _ in range(runs):
        rc, secs, cpu, out, err = run_once(cmd, timeout, env=env)
        results.append({"rc": rc, "seconds": round(secs, 2), "cpu_seconds": round(cpu, 2),
                        "losses": extract_losses(entry["loss_regex"], out),
                        "error": None if rc == 0 else first_error_line(err, out),
                        "stderr_tail": None if rc == 0 else (err or "").splitlines()[-40:]})
    problems = []
    for i, r in enumerate(results):
        if r["rc"] != 0:
            problems.append(f"run {i + 1}: exit {r['rc']}: {r['error']}")
        elif not r["losses"]:
            problems.append(f"run {i + 1}: no loss matched {entry['loss_regex']!r}")
    ok_runs = [r for r in results if r["rc"] == 0]
    identical = len({tuple(r["losses"]) for r in ok_runs}) <= 1
    if entry["deterministic"] and len(ok_runs) == len(results) and not identical:
        problems.append("deterministic script gave different losses between runs")
    best = min(r["seconds"] for r in results)
    cpu = min(r["cpu_seconds"] for r in results)
    warnings = []
    if ok_runs and ok_runs[0]["losses"] and significant_digits(ok_runs[0]["losses"][-1]) < 6:
        warnings.append(f"final loss {ok_runs[0]['losses'][-1]} has fewer than 6 significant digits")
    if best > max_seconds and not hal:
        # wall time depends on what else the machine runs: a warning unless --strict-time
        (problems if strict_time else warnings).append(f"slow: {best:.1f}s > {max_seconds:g}s")
    reference = None
    if compare and hal and ok_runs:
        rc, _, _, out, err = run_once(command_for(entry), timeout)
        reference = {"rc": rc, "losses": extract_losses(entry["loss_regex"], out)}
        diff = max_rel_diff(reference["losses"], ok_runs[0]["losses"])
        reference["max_rel_diff"] = diff
        if rc != 0:
            problems.append(f"plain reference run failed: {first_error_line(err, out)}")
        elif entry["deterministic"] and diff > rtol:
            problems.append(f"losses differ from the plain CPU run (max relative difference {diff:.3g})")
    return {"script": entry["script"], "command": " ".join(cmd[1:]), "deterministic": entry["deterministic"],
            "runs": results, "identical": identical, "seconds": best, "cpu_seconds": cpu,
            "reference": reference,
            "ok": not problems, "problems": problems, "warnings": warnings}


def short(losses, n=3):
    if not losses:
        return "-"
    if len(losses) <= 2 * n:
        return " ".join(losses)
    return " ".join(losses[:n]) + f" ... ({len(losses)}) ... " + " ".join(losses[-n:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="scripts to run (default: all in the manifest)")
    ap.add_argument("--runs", type=int, default=None, help="runs per script (default 2; 1 with --hal)")
    ap.add_argument("--hal", metavar="BACKEND", help="run through `hal run` with HAL_BACKEND=BACKEND")
    ap.add_argument("--compare", action="store_true",
                    help="with --hal: also run plain and compare the losses of deterministic scripts")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance for --compare")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    ap.add_argument("--max-seconds", type=float, default=HARD_MAX_S,
                    help="wall time above which a script is reported slow (default 10)")
    ap.add_argument("--strict-time", action="store_true", help="count a slow script as a failure")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--write-seconds", action="store_true",
                    help="store each script's faster run time as seconds_on_2_cores in the manifest")
    args = ap.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if args.hal else 2

    manifest = load_manifest(args.manifest)
    problems = validate_manifest(manifest)
    wanted = {n if n.endswith(".py") else n + ".py" for n in args.names}
    entries = [e for e in manifest["scripts"] if not wanted or e["script"] in wanted]
    unknown = wanted - {e["script"] for e in entries}
    if unknown:
        ap.error(f"not in the manifest: {', '.join(sorted(unknown))}")

    results = []
    for e in entries:
        r = check_entry(e, args.runs, args.timeout, hal=args.hal, compare=args.compare, rtol=args.rtol,
                        max_seconds=args.max_seconds, strict_time=args.strict_time)
        results.append(r)
        if not args.json:
            flag = "ok" if r["ok"] else "FAIL"
            det = "det" if e["deterministic"] else "nondet"
            same = "same" if r["identical"] else "differ"
            if r["reference"] is not None:
                d = r["reference"]["max_rel_diff"]
                same = "=plain" if d == 0 else f"~{d:.0e}"
            print(f"{flag:4} {e['script']:<28} {r['seconds']:6.2f}s {r['cpu_seconds']:6.2f}cpu {det:6} {same:6} "
                  f"{short(r['runs'][0]['losses'])}", flush=True)
            for p in r["problems"]:
                print(f"     ! {p}", flush=True)
            for w in r["warnings"]:
                print(f"     ~ {w}", flush=True)

    if args.write_seconds and not args.hal:
        by_name = {r["script"]: r for r in results}
        for e in manifest["scripts"]:
            r = by_name.get(e["script"])
            if r and all(x["rc"] == 0 for x in r["runs"]):
                e["seconds_on_2_cores"] = r["seconds"]
        with open(args.manifest, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")

    passed = sum(r["ok"] for r in results)
    if args.json:
        json.dump({"manifest_problems": problems, "results": results,
                   "passed": passed, "total": len(results)}, sys.stdout, indent=1)
        print()
    else:
        for p in problems:
            print(f"manifest: {p}")
        print(f"{passed}/{len(results)} scripts passed"
              + (f"; {len(problems)} manifest problem(s)" if problems else ""))
    return 0 if passed == len(results) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
