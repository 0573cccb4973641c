"""Shared fixtures.

``hal_backend`` is parametrised over every backend usable on this machine (the CPU here;
cuda, npu, ... where present), so backend tests run unchanged on real hardware.
"""
import os

import pytest

import hal
from hal.emu._device import real_accelerator
from hal.plugin.registry import Registry
from hal.plugin.spec import Status

#: an available accelerator other than the emulator (cuda on a GPU machine), or None
REAL_ACCELERATOR = real_accelerator()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``emu`` need the emulator, which cannot share a process with a real accelerator."""
    if REAL_ACCELERATOR is None:
        return
    skip = pytest.mark.skip(reason=f"the emulator cannot share a process with the real {REAL_ACCELERATOR} "
                                   f"accelerator here (torch allows one per process); the emulator runs "
                                   f"where no accelerator is visible")
    for item in items:
        if item.get_closest_marker("emu"):
            item.add_marker(skip)


def usable_backend_names():
    reg = Registry()
    names = []
    for c in reg.candidates():
        if c.status is Status.AVAILABLE and reg.load(c) is not None:
            names.append(c.name)
    return names


def opt_in_backend_names():
    """Opt-in backends (the emulator) that load here when asked for by HAL_BACKEND."""
    names = []
    for name in ("emu",):
        reg = Registry(env={**os.environ, "HAL_BACKEND": name})
        for c in reg.candidates():
            if c.name == name and c.status is Status.AVAILABLE and reg.load(c) is not None:
                names.append(name)
    return names


_AUTO = usable_backend_names()
USABLE = _AUTO + [n for n in opt_in_backend_names() if n not in _AUTO]


@pytest.fixture(params=USABLE, ids=lambda n: f"backend={n}")
def hal_backend(request, monkeypatch):
    """The named backend, selected through HAL_BACKEND for the duration of the test."""
    monkeypatch.setenv("HAL_BACKEND", request.param)
    hal.reset_registry()
    yield hal.current_backend()
    hal.reset_registry()


@pytest.fixture
def clean_registry(monkeypatch):
    """A registry built from a controlled environment (no HAL_* variables leak in)."""
    for k in list(os.environ):
        if k.startswith("HAL_"):
            monkeypatch.delenv(k, raising=False)
    hal.reset_registry()
    yield
    hal.reset_registry()


#: what a launcher (torchrun, hal run --nproc-per-node) sets for a rank
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "HAL_DIST_TIMEOUT",
               "TORCHELASTIC_USE_AGENT_STORE")


@pytest.fixture
def no_launcher(monkeypatch):
    """No launcher's variables in the environment (hal.dist.init makes a one-rank job), and hal.dist torn
    down after the test; yields ``monkeypatch``."""
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)
    yield monkeypatch
    hal.dist.destroy()


@pytest.fixture
def emu_selected(monkeypatch):
    """The emulator as hal's selected backend (HAL_BACKEND=emu) for the duration of the test, so that
    hal.fallback_report() asks it (the selected backend's Backend.fallback_report)."""
    monkeypatch.setenv("HAL_BACKEND", "emu")
    hal.reset_registry()
    yield hal.current_backend()
    hal.reset_registry()
