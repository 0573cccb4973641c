"""hal on each torch a vendor stack ships: a venv per version, the project from a clean export, checks.

    python scripts/torch_window.py                          # every version of WINDOW (hours, ~6 GB each)
    python scripts/torch_window.py --versions 2.15.0 --keep # one version; keep its venv for a rerun
    python scripts/torch_window.py --render                 # docs/torch-window.md from the results so far
    python scripts/torch_window.py --only-targets           # only hal/data/redirect_targets.json (torch + collect)

Per version: ``build/torch-window/<version>/venv`` with PyPI's build of that torch (CUDA-linked: it
imports and runs on the CPU without a GPU); the machine's pip constraint file caps torch, so a version
above the cap is installed with ``PIP_CONSTRAINT=/dev/null`` for that venv's pip (an empty value does
not lift it); ``git archive HEAD`` exported to ``build/torch-window/<version>/src`` and set up there by
``scripts/setup.sh`` (which keeps the venv's torch and pins every extra to it; the emulator compiles
against it); then the checks of :data:`CHECKS`, each with a time limit, and the redirection's targets on
that release (``scripts/redirect_targets.py``; all releases' are merged into hal/data/redirect_targets.json).  Results go to
``build/torch-window/results.json`` (one entry per version, replaced by a rerun) and the table to
``docs/torch-window.md`` with the date.  Not in CI: CI stays on the torch it installs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "torch-window"
RESULTS = OUT / "results.json"
DOC = ROOT / "docs" / "torch-window.md"
#: the torch versions vendors ship (docs/torch-window.md says who), oldest first
WINDOW = ("2.4.1", "2.6.0", "2.7.1", "2.10.0", "2.13.0", "2.15.0")
#: the test subset: the unit, backend and emulator-collective tests, and one FSDP2 case
TESTS = ["tests/unit", "tests/backend", "tests/dist/test_emu_ccl.py", "tests/dist/test_collectives.py",
         "tests/dist/test_checkpoint_reshard.py"]
#: (name, command run in the exported source with the venv's bin first on PATH, extra env, limit in s)
CHECKS = [
    ("hal list", ["python", "-m", "hal", "list"], {}, 120),
    ("hal doctor", ["python", "-m", "hal", "doctor", "--check", "backends", "--check", "versions",
                    "--check", "redirect", "--check", "tiny_network"], {}, 300),
    ("hal run cpu", ["python", "-m", "hal", "run", "examples/cuda_train.py", "--steps", "3"],
     {"HAL_BACKEND": "cpu"}, 300),
    ("hal run emu", ["python", "-m", "hal", "run", "examples/cuda_train.py", "--steps", "3"],
     {"HAL_BACKEND": "emu"}, 300),
    ("hal run DDP 2 cpu", ["python", "-m", "hal", "run", "--nproc-per-node", "2", "examples/cuda_train.py", "--steps", "3"],
     {"HAL_BACKEND": "cpu"}, 300),
    ("hal run DDP 2 emu", ["python", "-m", "hal", "run", "--nproc-per-node", "2", "examples/cuda_train.py", "--steps", "3"],
     {"HAL_BACKEND": "emu"}, 300),
]


def _run(cmd, cwd, env=None, limit=None) -> dict:
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=limit)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, exc.stdout or "", (exc.stderr or "") + f"\ntimed out after {limit} s"
        out, err = (out.decode() if isinstance(out, bytes) else out), (err.decode() if isinstance(err, bytes) else err)
    last = [ln for ln in (err or out).strip().splitlines() if re.search(r"[A-Za-z0-9]", ln)]
    return {"rc": rc, "seconds": round(time.monotonic() - start, 1), "last": last[-1][:300] if last else ""}


def _pip_caps_torch(python: str, version: str) -> bool:
    """True when the machine's pip constraints refuse ``torch==version``: a dry run fails with them and
    succeeds with ``PIP_CONSTRAINT=/dev/null`` (pip's own message names only a conflict)."""
    def dry(env):
        return subprocess.run([python, "-m", "pip", "install", "--dry-run", "-q", "--no-deps", f"torch=={version}"],
                              capture_output=True, text=True, timeout=600, env=env).returncode == 0
    return not dry(None) and dry(dict(os.environ, PIP_CONSTRAINT="/dev/null"))


def _venv_env(venv: Path, extra=None) -> dict:
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


#: the redirection's targets on one release: hal/data/redirect_targets.json is merged from these (--only-targets)
TARGETS = "targets.json"
#: what ``hal.redirect`` needs to import without ``scripts/setup.sh`` (``--only-targets``)
TARGETS_DEPS = ["pluggy>=1.3", "numpy>=1.24"]


def _collect_targets(python: str, src: Path, out: Path, env: dict, pythonpath: bool, backend: str = "cpu",
                     names: Optional[Path] = None) -> dict:
    """``scripts/redirect_targets.py collect`` in the venv on ``backend``; with ``pythonpath`` the export is
    imported from ``src`` (not installed) and the Python wrappers are used (the C ones are not built there)."""
    extra = {"HAL_BACKEND": backend}
    if pythonpath:  # the built-in plugins' package is src/backends, installed as hal_backends
        links = out.parent / "pythonpath"
        links.mkdir(exist_ok=True)
        if not (links / "hal_backends").exists():
            (links / "hal_backends").symlink_to(src / "backends", target_is_directory=True)
        extra.update(PYTHONPATH=f"{src}{os.pathsep}{links}", HAL_REDIRECT_NATIVE="0", HAL_OPS_NATIVE="0")
    more = ["--names", str(names)] if names else []
    return _run([python, "scripts/redirect_targets.py", "collect", "-o", str(out), *more], src, dict(env, **extra), 300)


def recollect_targets(versions) -> None:
    """A second pass of ``--only-targets``: each release (its venv still there) says the presence of the
    targets the other releases found (a function added in 2.15 is looked up on 2.4 too)."""
    every = set()
    for path in OUT.glob("*/targets*.json"):
        every |= set(json.loads(path.read_text())["present"])
    names = OUT / "target-names.json"
    names.write_text(json.dumps(sorted(every)))
    for version in versions:
        here = OUT / version
        got = json.loads((here / TARGETS).read_text()) if (here / TARGETS).exists() else {"present": {}}
        python = here / "venv" / "bin" / "python"
        if every <= set(got["present"]) or not python.exists():
            continue
        print(f"[{version}] the presence of {len(every - set(got['present']))} target(s) other releases found", flush=True)
        r = _collect_targets(str(python), here / "src", here / TARGETS, _venv_env(here / "venv"), pythonpath=True,
                             names=names)
        if r["rc"]:
            print(f"[{version}] rc {r['rc']}: {r['last']}", flush=True)


def write_targets() -> None:
    """hal/data/redirect_targets.json from every release's collection under build/torch-window."""
    found = sorted(OUT.glob("*/targets*.json"))
    if found:
        subprocess.run([sys.executable, "scripts/redirect_targets.py", "write", *map(str, found)], cwd=ROOT,
                       check=True)


def one_version(version: str, keep: bool, only_targets: bool = False, keep_venv: bool = False) -> dict:
    here = OUT / version
    venv, src = here / "venv", here / "src"
    python = str(venv / "bin" / "python")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    rec = {"torch": version, "date": datetime.date.today().isoformat(), "commit": commit.strip(), "steps": {}}
    here.mkdir(parents=True, exist_ok=True)
    if not Path(python).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    lifted = _pip_caps_torch(python, version)
    env = _venv_env(venv, {"PIP_CONSTRAINT": "/dev/null"} if lifted else None)
    rec["pip_cap_lifted"] = lifted
    print(f"[{version}] installing torch=={version}" + (" (PIP_CONSTRAINT=/dev/null)" if lifted else ""), flush=True)
    rec["steps"]["install torch"] = _run([python, "-m", "pip", "install", "-q", f"torch=={version}"], here, env, 1800)
    got = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    rec["torch_installed"] = got.stdout.strip()
    if not rec["torch_installed"].startswith(version):  # never let setup.sh fall back to its default torch
        rec["steps"]["install torch"].update(rc=rec["steps"]["install torch"]["rc"] or 1,
                                             last=f"torch {version} is not importable in {venv} "
                                                  f"(found {rec['torch_installed'] or 'none'})")
        return rec
    if src.exists():
        shutil.rmtree(src)
    src.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    if only_targets:
        print(f"[{version}] the redirection's targets", flush=True)
        rec["steps"]["install deps"] = _run([python, "-m", "pip", "install", "-q", *TARGETS_DEPS], here, env, 600)
        rec["steps"]["redirect targets"] = _collect_targets(python, src, here / TARGETS, env, pythonpath=True)
        if not (keep or keep_venv):
            shutil.rmtree(venv, ignore_errors=True)
        return rec
    print(f"[{version}] scripts/setup.sh in a clean export", flush=True)
    setup_env = dict(env, PYTHON=python, HAL_SETUP_LLMSTACK="0")
    rec["steps"]["setup"] = _run(["bash", "scripts/setup.sh"], src, setup_env, 3600)
    for name, cmd, extra, limit in CHECKS:
        print(f"[{version}] {name}", flush=True)
        rec["steps"][name] = _run(cmd, src, dict(env, **extra), limit)
    rec["steps"]["redirect targets"] = _collect_targets(python, src, here / TARGETS, env, pythonpath=False)
    _collect_targets(python, src, here / "targets-emu.json", env, pythonpath=False, backend="emu")
    print(f"[{version}] tests: {' '.join(TESTS)}", flush=True)
    junit = here / "junit.xml"
    rec["steps"]["tests"] = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                                  *TESTS], src, env, 5400)
    rec["tests"] = _junit_counts(junit)
    if not keep:
        shutil.rmtree(venv, ignore_errors=True)
    return rec


def _junit_counts(path: Path) -> dict:
    if not path.exists():
        return {}
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    n["passed"] = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    n["failed_tests"] = failed[:40]
    return n


#: the heading of docs/torch-window.md's hand-written part, which a render keeps
NOTES = "## Notes"


def _doc_rows() -> dict:
    """``{version: (table row, failed-tests line or None)}`` of docs/torch-window.md as committed: the rows of
    versions that ``results.json`` (a build output, absent in a fresh clone) does not hold are kept."""
    rows = {}
    if DOC.exists():
        text = DOC.read_text(encoding="utf-8")
        for m in re.finditer(r"^\| (\d+\.\d+\.\d+) \|.*$", text, re.M):
            failed = re.search(rf"^- \*\*{re.escape(m.group(1))}\*\*: .*$", text, re.M)
            rows[m.group(1)] = (m.group(0), failed.group(0) if failed else None)
    return rows


def render(results: dict) -> str:
    lines = ["# hal across torch versions (`make torch-window`)", "",
             "Each row: PyPI's build of that torch in a venv of its own, the project from a clean export set up by",
             "`scripts/setup.sh`, then the checks of `scripts/torch_window.py` (`hal list`, `hal doctor`, `hal run` of",
             "`examples/cuda_train.py` alone and as a 2-rank DDP job on cpu and emu) and the test subset",
             f"(`{' '.join(TESTS)}`). CI runs on torch 2.13 only; these results are measured on this project's",
             "2-core machine on the date given. A cell is `ok` or the exit code with the last line of output.", ""]
    steps = ["setup"] + [c[0] for c in CHECKS] + ["redirect targets"]
    lines.append("| torch | date, commit | " + " | ".join(steps) + " | tests |")
    lines.append("|---|---|" + "---|" * (len(steps) + 1))
    kept = {v: row for v, row in _doc_rows().items() if v not in results}
    for version in sorted({*results, *kept}, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v))):
        if version in kept:  # a row from before a check was added: "-" in the new columns, before the tests
            cells = kept[version][0].strip().strip("|").split("|")
            cells[-1:-1] = [" - "] * (len(steps) + 3 - len(cells))
            lines.append("|" + "|".join(cells) + "|")
            continue
        rec = results[version]
        cells = []
        for s in steps:
            r = rec["steps"].get(s)
            cells.append("-" if r is None else ("ok" if r["rc"] == 0 else f"rc {r['rc']}: {r['last'][:80]}"))
        t = rec.get("tests") or {}
        tests = (f"{t['passed']} passed, {t['failures'] + t['errors']} failed, {t['skipped']} skipped" if t else
                 f"rc {rec['steps'].get('tests', {}).get('rc')}")
        lines.append(f"| {version} | {rec['date']}, {rec.get('commit', '?')} | " + " | ".join(c.replace("|", "/") for c in cells) + f" | {tests} |")
    missing = [v for v in WINDOW if v not in results and v not in kept]
    if missing:
        lines += ["", f"Not run yet: {', '.join(missing)} (`python scripts/torch_window.py --versions X`)."]
    failing = {v: r.get("tests", {}).get("failed_tests") for v, r in results.items() if r.get("tests", {}).get("failed_tests")}
    failing = {v: "- **%s**: " % v + ", ".join(f"`{n}`" for n in names) for v, names in failing.items()}
    failing.update({v: row[1] for v, row in kept.items() if row[1]})
    if failing:
        lines += ["", "Failed tests (first 40 per version):", ""]
        lines += [failing[v] for v in sorted(failing, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))]
    notes = DOC.read_text(encoding="utf-8").partition("\n" + NOTES)[2] if DOC.exists() else ""
    if notes:  # written by hand: what each failure is, and what was rerun since
        lines += ["", NOTES + notes.rstrip("\n")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--versions", default=",".join(WINDOW), help="comma list (default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep each venv (about 6 GB) for a rerun")
    p.add_argument("--render", action="store_true", help="only write docs/torch-window.md from the results so far")
    p.add_argument("--only-targets", action="store_true",
                   help="per version only torch and the redirection's targets (minutes, not hours), then "
                        "hal/data/redirect_targets.json from every version collected so far")
    args = p.parse_args(argv)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.only_targets:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
        for version in versions:
            rec = one_version(version, args.keep, only_targets=True, keep_venv=True)
            bad = {k: r for k, r in rec["steps"].items() if r["rc"] != 0}
            print(f"[{version}] " + ("; ".join(f"{k}: rc {r['rc']}: {r['last']}" for k, r in bad.items()) or "ok"))
        recollect_targets(versions)
        if not args.keep:
            for version in versions:
                shutil.rmtree(OUT / version / "venv", ignore_errors=True)
        write_targets()
        return 0
    if not args.render:
        for version in [v.strip() for v in args.versions.split(",") if v.strip()]:
            results[version] = one_version(version, args.keep)
            OUT.mkdir(parents=True, exist_ok=True)
            tmp = RESULTS.with_suffix(".tmp")
            tmp.write_text(json.dumps(results, indent=1))
            os.replace(tmp, RESULTS)
    DOC.write_text(render(results))
    print(f"wrote {DOC.relative_to(ROOT)} ({len(results)} versions)")
    if not args.render:
        write_targets()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:  # venv creation, git archive, tar: one line, not a traceback
        cmd = " ".join(map(str, exc.cmd))
        sys.exit(f"torch_window: `{cmd}` failed with exit code {exc.returncode}; fix it and rerun "
                 "(finished versions are kept in build/torch-window/results.json)")
    except OSError as exc:
        sys.exit(f"torch_window: {exc}; check the disk space and permissions under {OUT}")
