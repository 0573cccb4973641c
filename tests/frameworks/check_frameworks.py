#!/usr/bin/env python3
"""Run the framework corpus (tests/frameworks/manifest.json) and check it against the manifest.

Each entry is a recipe written for an NVIDIA GPU.  Plain (default): every entry whose
``plain`` is true runs with plain Python on this machine (``plain_args`` replace its args,
e.g. ``accelerator="cpu"``), as tests/corpus/check_plain_cpu.py does; ``--hal BACKEND`` runs
every entry through ``HAL_BACKEND=BACKEND hal run [--nproc-per-node N]`` with the entry's
``hal_env``.  A run passes with exit 0, at least one loss matched by ``loss_regex`` and every
line of ``checks`` printed (the scripts print them only when their own resume / reload check
passed).  ``--compare`` also makes the reference runs the entry's ``compare`` names
(``cpu=plain``, ``emu=plain``, ``emu=cpu``) and fails when the losses differ by more than ``--rtol``.

    python tests/frameworks/check_frameworks.py                       # plain, where the framework allows
    python tests/frameworks/check_frameworks.py --hal cpu --compare   # through hal run, losses vs plain
    python tests/frameworks/check_frameworks.py --hal emu peft_lora --json

Entries whose ``requires`` module (timm) cannot be imported are skipped.  Exit status 0 when
every selected entry passes.  The run/compare machinery is tests/corpus/check_plain_cpu.py's.
"""
import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "corpus"))
import check_plain_cpu as corpus  # noqa: E402  (the shared harness)

MANIFEST = os.path.join(HERE, "manifest.json")
SCRIPTS = os.path.join(HERE, "scripts")
REQUIRED = ("name", "script", "args", "nproc_per_node", "launched_by", "plain", "idioms", "loss_regex",
            "deterministic", "compare", "checks", "hal_env", "blocked_by", "static_rules", "seconds")
RTOL = 1e-5


def load_manifest(path=MANIFEST):
    return corpus.load_manifest(path)


def validate_manifest(manifest):
    """The corpus checks plus this schema's own: compare pairs that can be made, known backends."""
    problems = corpus.validate_manifest(manifest, scripts=SCRIPTS, required=REQUIRED)
    for e in manifest["scripts"]:
        name = corpus.entry_name(e)
        for pair in e.get("compare", []):
            a, _, b = pair.partition("=")
            if a not in ("cpu", "emu") or b not in ("plain", "cpu") or a == b:
                problems.append(f"{name}: bad compare {pair!r} (cpu=plain, emu=plain or emu=cpu)")
            if b == "plain" and not e.get("plain"):
                problems.append(f"{name}: compare {pair!r} but the entry does not run plain")
        for backend in list(e.get("hal_env", {})) + list(e.get("blocked_by", {})):
            if backend not in ("cpu", "emu", "plain"):
                problems.append(f"{name}: unknown backend {backend!r}")
        for backend, b in e.get("blocked_by", {}).items():
            if not b.get("items") or not set(b["items"]) <= {3, 4, 5, 8, 9} or not b.get("error"):
                problems.append(f"{name}: blocked_by[{backend!r}] needs items (of 3, 4, 5, 8, 9) and the error")
    return problems


def missing_requirement(entry):
    """The first module of ``requires`` that cannot be imported here, else None."""
    for mod in entry.get("requires", []):
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except Exception:  # a module that fails while being found (timm without torchvision) is missing too
            return mod
    return None


def command(entry, mode, scripts=SCRIPTS, args=None):
    """The command line of ``entry`` in ``mode``: ``plain``, ``cpu`` or ``emu`` (``scripts``: the folder
    of the entry's script; tests/llmstack passes its own; ``args`` replace the entry's)."""
    if mode == "plain":
        if "plain_nproc_per_node" in entry:  # the stack runs plainly on a CPU at another process count only
            entry = dict(entry, nproc_per_node=entry["plain_nproc_per_node"])
        return corpus.command_for(entry, scripts=scripts, args=args or entry.get("plain_args", entry["args"]))
    return corpus.command_for(entry, hal=mode, scripts=scripts, args=args)


def environment(entry, mode, base=None):
    """The environment of a run in ``mode``: one intra-op thread (2 shared cores), HAL_BACKEND, and the
    entry's ``hal_env`` for that mode (``plain`` included: DeepSpeed's ``DS_ACCELERATOR=cpu``)."""
    env = dict(os.environ if base is None else base, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if mode != "plain":
        env["HAL_BACKEND"] = mode
    env.update(entry.get("hal_env", {}).get(mode, {}))
    return env


def launches(entry, mode, scripts=SCRIPTS):
    """The command lines of one run: the entry's, then one per argument list of its ``relaunch`` (a resume:
    the same recipe started again in the same folder)."""
    return [command(entry, mode, scripts)] + [command(entry, mode, scripts, args) for args in entry.get("relaunch", [])]


def run(entry, mode, timeout=300, scripts=SCRIPTS, cwd=None):
    """One run: a dict with rc, seconds, losses, the check lines missing, and the error line (``cwd``: a
    folder to run in, for runs that share files; default a fresh one).  An entry with ``relaunch`` is
    launched again in the same folder after each launch that exits 0; the losses and output of all launches
    are taken in order, the seconds summed."""
    with (contextlib.nullcontext(cwd) if cwd else tempfile.TemporaryDirectory(prefix="corpus_run_")) as cwd:
        rc, secs, cpu, out, err = 0, 0.0, 0.0, "", ""
        for cmd in launches(entry, mode, scripts):
            rc, s, c, o, e = corpus.run_once(cmd, timeout, env=environment(entry, mode), cwd=cwd)
            secs, cpu, out, err = secs + s, cpu + c, out + o, err + e
            if rc != 0:
                break
    losses = corpus.extract_losses(entry["loss_regex"], out)
    missing = [c for c in entry.get("checks", []) if c not in out]
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}: {corpus.first_error_line(err, out)}")
    elif not losses:
        problems.append(f"no loss matched {entry['loss_regex']!r}")
    elif missing:
        problems.append(f"check line(s) not printed: {missing}")
    return {"name": corpus.entry_name(entry), "mode": mode, "rc": rc, "seconds": round(secs, 2),
            "cpu_seconds": round(cpu, 2), "losses": losses,
            "missing_checks": missing, "error": None if rc == 0 else corpus.first_error_line(err, out),
            "problems": problems, "stdout_tail": out.splitlines()[-20:], "stderr_tail": err.splitlines()[-30:]}


def compare(a, b, rtol=RTOL):
    """Problems (a list) between two runs' losses (an entry's own ``rtol`` replaces the default,
    with its ``rtol_why``)."""
    pair = f"{a['mode']}={b['mode']}" if a.get("name") == b.get("name") else f"{a['mode']}={b['name']}:{b['mode']}"
    if a["problems"] or b["problems"]:
        return [f"{pair}: not compared (a run failed)"]
    diff = corpus.max_rel_diff(b["losses"], a["losses"])
    if diff > rtol:
        return [f"{pair}: losses differ (max relative difference {diff:.3g}): "
                f"{corpus.short(a['losses'])} vs {corpus.short(b['losses'])}"]
    return []


def reference(pair, entry, entries=None):
    """The run a ``compare`` pair ``A=B`` names as B: ``(entry, mode)`` -- the same entry in mode B
    (``cpu=plain``), or another entry of ``entries`` in a mode (``cpu=titan_single:cpu``: a one-process
    run as the reference of a 2-rank recipe)."""
    _, _, b = pair.partition("=")
    name, sep, mode = b.partition(":")
    if not sep:
        return entry, b
    if not entries or name not in entries:
        raise KeyError(f"compare {pair!r}: no entry {name!r}")
    return entries[name], mode


def check_entry(entry, mode, do_compare=False, rtol=RTOL, timeout=300, scripts=SCRIPTS, entries=None):
    """Run ``entry`` in ``mode`` (and its references with ``do_compare``; ``entries``: the table that
    ``NAME:MODE`` references are looked up in); the result as a dict."""
    main = run(entry, mode, timeout, scripts)
    result = {"name": corpus.entry_name(entry), "mode": mode, "command": " ".join(command(entry, mode, scripts)[1:]),
              "run": main, "references": {}, "problems": list(main["problems"])}
    if do_compare:
        for pair in entry.get("compare", []):
            a, _, b = pair.partition("=")
            if a != mode:
                continue
            ref_entry, ref_mode = reference(pair, entry, entries)
            ref = result["references"].get(b) or run(ref_entry, ref_mode, timeout, scripts)
            result["references"][b] = ref
            result["problems"] += compare(main, ref, entry.get("rtol", rtol))
    result["ok"] = not result["problems"]
    return result


def cli(argv, description, table, problems, check, timeout=300.0, rtol=RTOL, cuda_help="on a GPU, make gpu-check"):
    """The command line both corpus checkers share: run the named entries of ``table`` (name -> entry; all by
    default) in the chosen mode with ``check(entry, mode, do_compare, rtol, timeout)``, print a line each (or
    JSON) with ``problems()`` (the manifests' own), and return the exit status."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("names", nargs="*", help="entries to run (default: all)")
    ap.add_argument("--hal", metavar="BACKEND", choices=["cpu", "emu", "cuda"],
                    help=f"run through `hal run` on BACKEND (cuda: {cuda_help}; default: plain)")
    ap.add_argument("--compare", action="store_true", help="also run the references of the entry's compare")
    ap.add_argument("--rtol", type=float, default=rtol)
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    unknown = set(args.names) - set(table)
    if unknown:
        ap.error(f"not in the manifest: {', '.join(sorted(unknown))}")
    mode = args.hal or "plain"
    results = []
    for name, e in table.items():
        if args.names and name not in args.names:
            continue
        skip = missing_requirement(e) or (None if mode != "plain" or e["plain"] else "does not run plain")
        if skip:
            results.append({"name": name, "mode": mode, "skipped": skip if " " in skip else f"needs {skip}",
                            "ok": True, "problems": []})
            if not args.json:
                print(f"skip {name:<28} {results[-1]['skipped']}", flush=True)
            continue
        r = check(e, mode, args.compare, args.rtol, args.timeout)
        results.append(r)
        if not args.json:
            print(f"{'ok' if r['ok'] else 'FAIL':4} {name:<28} {r['run']['seconds']:7.2f}s "
                  f"{corpus.short(r['run']['losses'])}", flush=True)
            for p in r["problems"]:
                print(f"     ! {p}", flush=True)
    found = problems()
    passed = sum(r["ok"] and "skipped" not in r for r in results)
    ran = sum("skipped" not in r for r in results)
    if args.json:
        json.dump({"manifest_problems": found, "mode": mode, "results": results, "passed": passed,
                   "ran": ran}, sys.stdout, indent=1)
        print()
    else:
        for p in found:
            print(f"manifest: {p}")
        print(f"{passed}/{ran} entries passed ({mode})" + (f"; {len(found)} manifest problem(s)" if found else ""))
    return 0 if passed == ran and not found else 1


def main(argv=None):
    manifest = load_manifest()
    table = {corpus.entry_name(e): e for e in manifest["scripts"]}
    return cli(argv, __doc__.split("\n")[0], table, lambda: validate_manifest(manifest),
               lambda e, mode, do_compare, rtol, timeout: check_entry(e, mode, do_compare, rtol, timeout))


if __name__ == "__main__":
    sys.exit(main())
