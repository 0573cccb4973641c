"""The seams of other stacks without running them: which DeepSpeed accelerator each backend gets, the facts that name
DeepSpeed's own ones, what install() does when DeepSpeed was imported first, and where Hugging Face's hub
kernels are switched off.  (DeepSpeed running:
tests/llmstack/test_deepspeed.py; the accelerator's contract: the conformance kit's deepspeed check.)"""
import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hal
from hal.plugin.facts import backend_folders, builtin_stack_fact
from hal.stacks import deepspeed as stack

needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="DeepSpeed is not installed (pyproject's llmstack extra)")


@pytest.mark.parametrize("name", sorted(backend_folders()))
def test_every_backend_says_which_deepspeed_accelerator_it_gets(name):
    fact = builtin_stack_fact(name, "deepspeed")
    assert set(fact) == {"accelerator", "why", "source"}, f"backends/.../{name}/backend.json: stacks.deepspeed"
    assert fact["why"]


@needs_deepspeed
@pytest.mark.parametrize("name", sorted(n for n in backend_folders() if builtin_stack_fact(n, "deepspeed")["accelerator"]))
def test_a_named_deepspeed_accelerator_exists_in_the_installed_deepspeed(name):
    """The class a backend.json names is in DeepSpeed's source (read, not imported: vendor accelerators import
    their vendor's module)."""
    module, _, cls = builtin_stack_fact(name, "deepspeed")["accelerator"].partition(":")
    package = Path(importlib.util.find_spec("deepspeed").origin).parent
    path = package.parent / (module.replace(".", os.sep) + ".py")
    assert path.is_file(), f"{name}: {module} is not in DeepSpeed {path}"
    classes = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
    assert cls in classes, f"{name}: {path.name} defines {sorted(classes)}, not {cls}"


def test_the_emulator_gets_hals_accelerator_and_the_cpu_deepspeeds_own(clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_BACKEND", "emu")
    hal.reset_registry()
    emu = stack.choose(env={})
    assert (emu.backend, emu.accelerator) == ("emu", "hal")
    monkeypatch.setenv("HAL_BACKEND", "cpu")
    hal.reset_registry()
    cpu = stack.choose(env={})
    assert cpu.accelerator == "deepspeed.accelerator.cpu_accelerator:CPU_Accelerator"
    assert stack.choose(env={"DS_ACCELERATOR": "cpu"}).accelerator is None  # DeepSpeed's own override wins
    assert "DS_ACCELERATOR=cpu" in stack.choose(env={"DS_ACCELERATOR": "cpu"}).describe()


@needs_deepspeed
@pytest.mark.emu
def test_install_after_deepspeed_was_imported_says_how_to_fix_it(tmp_path):
    code = ("import deepspeed, hal.stacks.deepspeed as s\n"
            "try:\n    s.install()\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, HAL_BACKEND="emu"), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "HalError" in p.stdout and "before importing deepspeed" in p.stdout and "hal run" in p.stdout, p.stdout



def test_hugging_face_hub_kernels_are_off_only_where_they_have_none_for_the_device():
    from hal.stacks.hub_kernels import switch_off as hub_kernels_off
    var, value, why = hub_kernels_off("emu", env={}, installed=True)
    assert (var, value) == ("USE_HUB_KERNELS", "NO") and "emu" in why and "USE_HUB_KERNELS=YES" in why
    assert hub_kernels_off("npu", env={}, installed=True) is None  # the library has kernels for it
    assert hub_kernels_off("emu", env={"USE_HUB_KERNELS": "YES"}, installed=True) is None  # the user's word
    assert hub_kernels_off("emu", env={}, installed=False) is None


@needs_deepspeed
@pytest.mark.emu
def test_a_redirection_begun_after_deepspeed_was_imported_still_starts_and_says_why():
    """hal.redirect.enable() in a process that imported DeepSpeed first (a notebook, a test session): the
    redirection works and reports that DeepSpeed keeps the accelerator it already bound."""
    code = ("import deepspeed, torch, hal\n"
            "with hal.redirect.enable() as t:\n"
            "    x = torch.ones(2, device='cuda')\n"
            "rows = [r['detail'] for r in t.log.rows('not_redirected') if r['call'] == 'DeepSpeed accelerator']\n"
            "print('RESULT', x.device.type, 'before importing deepspeed' in rows[0])\n")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, HAL_BACKEND="emu"), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RESULT emu True" in p.stdout, p.stdout
