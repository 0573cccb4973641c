#!/usr/bin/env python3
"""Run the LLM-stack corpus (tests/llmstack/*.json: one manifest per stack) and check it.

Every entry is a recipe in its stack's own idiom (DeepSpeed's config files and ``deepspeed.initialize``,
the HF Trainer's ``deepspeed=``, Accelerate's DeepSpeed plugin, torchtitan's TOML configs and
``torchtitan.train``), written for an NVIDIA GPU.  Modes: ``plain`` (the stack without hal, where it
runs on a CPU: DeepSpeed with ``DS_ACCELERATOR=cpu``; ``plain_args`` replace the args there), ``cpu``
and ``emu`` (``HAL_BACKEND=<mode> hal run [--nproc-per-node N]``).  A run passes with exit 0, its
losses printed (``loss_regex``) and its ``checks`` lines printed; ``--compare`` also runs the
references the entry's ``compare`` names (``emu=plain``: every step's loss within ``rtol``).

    python tests/llmstack/check_llmstack.py --hal emu --compare            # every entry on emu vs its reference
    python tests/llmstack/check_llmstack.py ds_zero3_init --hal cpu --json
    python tests/llmstack/check_llmstack.py titan_fsdp2 --hal cpu --compare

Arguments may name ``{configs}`` (tests/llmstack/configs) and ``{assets}``: the folder of the files the
manifest's ``assets`` helper makes (a module in tests/llmstack with ``folder()`` and ``ensure()``, e.g.
titan_assets.py: a tokenizer, a data set and a seed checkpoint made here, never downloaded), made before
the manifest's first run.  Beyond ``A=B`` between modes of one entry, a ``compare`` pair may name another
entry's run as the reference, ``A=NAME:MODE`` (``cpu=titan_single:cpu``: a 2-rank recipe against the
one-process run of the same model and data, where the stack cannot run plain on a CPU).  An entry with
``relaunch`` (argument lists) is launched again in the same folder after its first launch, once per list
(a checkpoint resume: train K steps, start again, go on from K); its losses are those of all launches in
order.  ``blocked_by`` (``{mode: reason}``): runs that a missing piece of hal still fails, an expected
failure naming the piece (tests turn it into a strict xfail).  The run/compare machinery is
tests/frameworks/check_frameworks.py's (itself tests/corpus/check_plain_cpu.py's); ``make llmstack``
runs the whole matrix under pytest (tests/llmstack/test_*.py).
"""
import glob
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "frameworks"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "corpus"))
import check_frameworks as fw  # noqa: E402  (the shared harness)
import check_plain_cpu as corpus  # noqa: E402

SCRIPTS = os.path.join(HERE, "scripts")
CONFIGS = os.path.join(HERE, "configs")
MODES = ("plain", "cpu", "emu")
REQUIRED = ("name", "stack", "args", "nproc_per_node", "plain", "idioms", "loss_regex", "compare", "checks",
            "hal_env", "requires", "seconds")
RTOL = 1e-5


def manifests():
    """``{stack manifest file name: manifest}`` of every tests/llmstack/*.json."""
    return {os.path.basename(p): corpus.load_manifest(p) for p in sorted(glob.glob(os.path.join(HERE, "*.json")))}


def assets_helper(name):
    """The module tests/llmstack/``name``.py that makes a manifest's ``{assets}`` (``folder()``, ``ensure()``)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return importlib.import_module(name)


def _fill(args, assets):
    out = [a.replace("{configs}", CONFIGS) for a in args]
    return [a.replace("{assets}", assets) for a in out] if assets else out


def entries():
    """Every entry of every manifest, with ``{configs}`` and ``{assets}`` filled in its arguments (and the
    manifest's ``assets`` helper named in ``assets``), by name."""
    out = {}
    for manifest in manifests().values():
        helper = manifest.get("assets")
        assets = assets_helper(helper).folder() if helper else None
        for e in manifest["scripts"]:
            e = dict(e)
            for key in ("args", "plain_args"):
                if key in e:
                    e[key] = _fill(e[key], assets)
            if "relaunch" in e:
                e["relaunch"] = [_fill(args, assets) for args in e["relaunch"]]
            if helper:
                e["assets"] = helper
            out[e["name"]] = e
    return out


def prepare(entry):
    """Make the files the entry's ``{assets}`` names, where missing (the manifest's helper's ``ensure()``)."""
    if entry.get("assets"):
        assets_helper(entry["assets"]).ensure()


def validate():
    """Problems with the manifests, as a list of strings."""
    problems = []
    scripts_used = set()
    for fname, manifest in manifests().items():
        defined = set(manifest.get("idioms", {}))
        names = {e.get("name") for e in manifest["scripts"]}
        used = set()
        for e in manifest["scripts"]:
            name = e.get("name", "?")
            problems += [f"{fname}: {name}: missing {k!r}" for k in REQUIRED if k not in e]
            if bool(e.get("script")) == bool(e.get("module")):
                problems.append(f"{fname}: {name}: give a script (in scripts/) or a module, not both")
            if e.get("script"):
                scripts_used.add(e["script"])
                if not os.path.isfile(os.path.join(SCRIPTS, e["script"])):
                    problems.append(f"{fname}: {name}: no such file scripts/{e['script']}")
            for pair in e.get("compare", []):
                a, _, b = pair.partition("=")
                ref, sep, ref_mode = b.partition(":")
                if sep:  # another entry's run: NAME:MODE
                    ok = a in MODES[1:] and ref in names and ref != name and ref_mode in MODES[1:]
                else:
                    ok = a in MODES[1:] and b in MODES and a != b and (b != "plain" or e.get("plain"))
                if not ok:
                    problems.append(f"{fname}: {name}: bad compare {pair!r}")
            for mode, why in e.get("blocked_by", {}).items():
                if mode not in MODES or not why:
                    problems.append(f"{fname}: {name}: blocked_by needs a mode and the missing piece ({mode!r})")
            if any("{assets}" in a for a in e.get("args", [])) and not manifest.get("assets"):
                problems.append(f"{fname}: {name}: its args name {{assets}} but the manifest has no assets helper")
            for i in e.get("idioms", []):
                used.add(i)
                if i not in defined:
                    problems.append(f"{fname}: {name}: idiom {i!r} is not defined")
        problems += [f"{fname}: idiom {i!r} is defined but no entry uses it" for i in sorted(defined - used)]
    on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(SCRIPTS, "*.py"))}
    problems += [f"scripts/{f}: no manifest entry runs it" for f in sorted(on_disk - scripts_used)]
    return problems


def missing_requirement(entry):
    """The first module the entry ``requires`` that is not installed, else None."""
    return fw.missing_requirement(entry)


def run(entry, mode, timeout=900, cwd=None):
    """One run of ``entry`` in ``mode`` (see tests/frameworks/check_frameworks.run), its assets made first."""
    prepare(entry)
    return fw.run(entry, mode, timeout, scripts=SCRIPTS, cwd=cwd)


def compare(a, b, rtol=RTOL):
    return fw.compare(a, b, rtol)


def check_entry(entry, mode, do_compare=False, rtol=RTOL, timeout=900):
    prepare(entry)
    return fw.check_entry(entry, mode, do_compare, entry.get("rtol", rtol), timeout, scripts=SCRIPTS,
                          entries=entries())


def main(argv=None):
    return fw.cli(argv, __doc__.split("\n")[0], entries(), validate,
                  lambda e, mode, do_compare, rtol, timeout: check_entry(e, mode, do_compare, rtol, timeout),
                  timeout=900.0, cuda_help="on a GPU, scripts/gpu_check.d/llmstack.sh")


if __name__ == "__main__":
    sys.exit(main())
