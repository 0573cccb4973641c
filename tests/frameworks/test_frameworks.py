"""The framework corpus (tests/frameworks/manifest.json), run as a user runs it.

Every entry is a recipe written for an NVIDIA GPU (Hugging Face Trainer, PEFT, Accelerate,
Lightning, Fabric, a timm recipe, torch.compile).  Each runs in a fresh process:

* plain ``python script.py`` on the CPU where the framework allows (``plain``), the reference;
* ``HAL_BACKEND=cpu hal run script.py`` and ``HAL_BACKEND=emu hal run script.py`` (2-rank entries
  with ``--nproc-per-node 2``), which must exit 0, print their losses and the lines of their own
  checks (a resumed run continues after the saved step with the saved RNG, a reloaded adapter
  gives the same outputs, ``load_state`` restores the weights), and match the references the
  entry's ``compare`` names.

Entries an open item of issue 20 still blocks are strict xfails naming the item and the error
(manifest ``blocked_by``): they turn into failures once fixed.  The whole matrix is
``make frameworks``; ``make test`` runs CI_SUBSET (about 15 s on 2 cores) and the static scan.
"""
import json
import os
import shutil
import subprocess

import pytest

import check_frameworks as fw  # tests/frameworks/check_frameworks.py (pytest puts this folder on sys.path)


MANIFEST = fw.load_manifest()
ENTRIES = {fw.corpus.entry_name(e): e for e in MANIFEST["scripts"]}
TIMEOUT_S = 300
#: the cases `make test` runs: one HF Trainer with a resume through a child process on cpu, Lightning
#: with ModelCheckpoint and fit(ckpt_path=) on emu, the accelerate save_state/load_state loop on cpu
CI_SUBSET = {("lightning_gpu", "emu")}  # hf_trainer_resume-cpu (28 s) moved to make frameworks: the time limit

_runs = {}


def _run(name, mode):
    if (name, mode) not in _runs:
        _runs[(name, mode)] = fw.run(ENTRIES[name], mode, TIMEOUT_S)
    return _runs[(name, mode)]


def _marks(name, mode):
    entry = ENTRIES[name]
    marks = [] if (name, mode) in CI_SUBSET else [pytest.mark.frameworks]
    if mode == "emu":
        marks.append(pytest.mark.emu)
    blocked = entry["blocked_by"].get(mode)
    if blocked:
        items = ", ".join(str(i) for i in blocked["items"])
        marks.append(pytest.mark.xfail(strict=True, reason=f"issue 20 item {items}: {blocked['error']}"))
    return marks


def _skip_if_missing(entry):
    mod = fw.missing_requirement(entry)
    if mod:
        pytest.skip(f"{entry['script']} needs {mod}, which cannot be imported beside this torch "
                    f"(PyPI's torchvision is a CUDA build: `operator torchvision::nms does not exist`); "
                    f"run it with `make frameworks-timm`")


def test_manifest_is_consistent():
    assert fw.validate_manifest(MANIFEST) == []
    assert len({e["script"] for e in ENTRIES.values()}) >= 12


def test_static_scan_names_the_framework_flags():
    """`op_coverage scan --static` on the recipes that hard-code CUDA framework flags reports the rule."""
    exe = shutil.which("op_coverage") or "op_coverage"
    p = subprocess.run([exe, "scan", "--static", fw.SCRIPTS, "--json"], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip(), p.stderr[-2000:]
    report = json.loads(p.stdout)
    found = {}
    for f in report["findings"]:
        found.setdefault(os.path.basename(f["file"]), set()).add(f["rule"])
    expected = {e["script"]: set(e["static_rules"]) for e in ENTRIES.values() if e.get("static_rules")}
    assert len(expected) >= 6
    for script, rules in sorted(expected.items()):
        assert rules <= found.get(script, set()), f"{script}: scan found {sorted(found.get(script, ()))}, " \
                                                  f"expected {sorted(rules)}"


@pytest.mark.frameworks
@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e["plain"]))
def test_recipe_runs_plain_on_the_cpu(name):
    _skip_if_missing(ENTRIES[name])
    r = _run(name, "plain")
    assert not r["problems"], "\n".join(r["problems"] + r["stderr_tail"])


CASES = [pytest.param(n, m, marks=_marks(n, m), id=f"{n}-{m}") for n in sorted(ENTRIES) for m in ("cpu", "emu")]


@pytest.mark.slow
@pytest.mark.parametrize("name,mode", CASES)
def test_recipe_runs_unmodified_through_hal_run(name, mode):
    entry = ENTRIES[name]
    _skip_if_missing(entry)
    r = _run(name, mode)
    assert not r["problems"], "\n".join(r["problems"] + r["stderr_tail"])
    for pair in entry["compare"]:
        a, _, b = pair.partition("=")
        if a == mode:
            problems = fw.compare(r, _run(name, b), entry.get("rtol", fw.RTOL))
            assert not problems, "\n".join(problems)
