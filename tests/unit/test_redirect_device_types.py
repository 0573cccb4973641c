"""Every public torch call a script reaches that takes a device *type* (a ``device_type``
parameter) is wrapped by the shim, found by walking torch's modules here, independently of
hal's own list; and every factory taking ``pin_memory`` is wrapped on the cpu backend."""
import importlib
import inspect

import pytest
import torch

import hal.redirect
from hal.plugin.registry import Registry

#: the public modules a script reaches device-type calls from
MODULES = ("torch", "torch.amp", "torch.amp.autocast_mode", "torch.amp.grad_scaler", "torch.distributed",
           "torch.distributed.device_mesh", "torch.distributed.tensor", "torch.accelerator", "torch.random",
           "torch.utils.checkpoint", "torch.cuda.amp", "torch.backends", "torch.utils.data")
#: builtins without a signature that take the type first (their docs say so)
BUILTINS = ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype", "set_autocast_enabled")
#: taking a device type is fine where it asks nothing of the device
EXEMPT = {"torch.utils.cpp_extension": "build paths"}


@pytest.fixture
def backend(clean_registry, request):
    return Registry(env={"HAL_BACKEND": request.param}).selected().backend


def device_type_calls():
    found = {}
    for name in MODULES:
        if name == "torch.accelerator" and not hasattr(torch, "accelerator"):
            continue  # torch 2.4-2.5: none to wrap
        mod = importlib.import_module(name)
        for attr in dir(mod):
            obj = getattr(mod, attr, None)
            if attr.startswith("_") or not callable(obj):
                continue
            fn = obj.__init__ if isinstance(obj, type) else obj
            try:
                if "device_type" in inspect.signature(fn).parameters:
                    found[f"{name}.{attr}"] = (mod, attr)
            except (TypeError, ValueError):
                pass
    for attr in BUILTINS:
        found[f"torch.{attr}"] = (torch, attr)
    return found


def _wrapped(obj) -> bool:
    return getattr(obj.__init__ if isinstance(obj, type) else obj, "__hal_redirect__", False)


@pytest.mark.parametrize("backend", ["emu"], indirect=True)
def test_every_device_type_call_is_wrapped(backend):
    calls = device_type_calls()
    assert {"torch.distributed.device_mesh.init_device_mesh", "torch.distributed.DeviceMesh", "torch.autocast",
            "torch.amp.is_autocast_available", "torch.random.fork_rng"} <= set(calls)
    with hal.redirect.enable(backend):
        missing = [label for label, (mod, attr) in calls.items() if not _wrapped(getattr(mod, attr))]
        assert _wrapped(torch.get_device_module) and _wrapped(torch.amp.GradScaler)
    assert missing == []


@pytest.mark.parametrize("backend", ["emu", "cpu"], indirect=True)
def test_cuda_device_types_become_the_backends(backend):
    with hal.redirect.enable(backend):
        assert torch.amp.is_autocast_available("cuda")
        module = torch.get_device_module("cuda")  # torch.cuda as the shim answers it, for the backend
        assert module is torch.cuda and torch.get_device_module() is torch.cuda
        module.set_device(torch.device("cuda", 0))  # accelerate 1.16's idiom: a cuda device, on any backend
        assert module.device_count() >= 1 and len(module.get_rng_state_all()) == module.device_count()
        with torch.autocast("cuda", torch.bfloat16):
            assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16
        with torch.random.fork_rng(devices=[0], device_type="cuda"):
            torch.randn(2, device="cuda")
        # torch.distributed.pipelining forks its stages' torch.device("cuda", i) objects
        before = torch.randn(3, device="cuda")
        torch.manual_seed(0)
        with torch.random.fork_rng(devices=[torch.device("cuda", 0)], device_type="cuda"):
            torch.randn(5, device="cuda")
        after = torch.randn(3, device="cuda")
        torch.manual_seed(0)
        assert torch.equal(after, torch.randn(3, device="cuda")) and before.shape == after.shape


def pinned_factories():
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any(a.name == "pin_memory" for a in schema.arguments):
            names.add(schema.name[len("aten::"):])
    return sorted(((owner, n) for n in names for owner in (torch, torch.Tensor)
                   if not n.startswith("_") and n != "to" and getattr(owner, n, None) is not None),
                  key=lambda c: (c[0].__name__, c[1]))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_every_pinned_factory_makes_an_ordinary_tensor_on_the_cpu_backend(backend):
    calls = pinned_factories()
    assert len(calls) > 30
    with hal.redirect.enable(backend) as t:
        assert [f"{o.__name__}.{n}" for o, n in calls if not _wrapped(getattr(o, n))] == []
        assert torch.empty(4, pin_memory=True).shape == (4,)
        assert torch.ones(2).new_zeros(3, pin_memory=True).sum() == 0
        assert torch.tensor([1.0], pin_memory=True).item() == 1.0
        assert any("pin_memory=True" in r["call"] for r in t.log.rows("not_redirected"))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_dataloader_pin_memory_true_makes_ordinary_batches_without_torchs_warning_on_the_cpu_backend(backend):
    import warnings
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.arange(4.0).reshape(4, 1))
    with hal.redirect.enable(backend) as t, warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "no accelerator is found" UserWarning would raise
        by_kw = next(iter(DataLoader(data, batch_size=2, pin_memory=True)))[0]
        by_pos = next(iter(DataLoader(data, 2, False, None, None, 0, None, True)))[0]
        assert by_kw.tolist() == by_pos.tolist() == [[0.0], [1.0]]
        assert [r["call"] for r in t.log.rows("not_redirected")].count("DataLoader(pin_memory=True)") == 2


def test_a_re_exporting_module_the_script_imports_late_is_redirected_and_given_back(tmp_path):
    # hal does not import torch.distributed.tensor for every script (half a second); a script that imports
    # it while redirected gets the wrapped init_device_mesh there too, and torch's own after the end
    import subprocess
    import sys

    code = ("import sys, torch, hal.redirect\n"
            "from hal.plugin.registry import Registry\n"
            "assert 'torch.distributed.tensor' not in sys.modules\n"
            "backend = Registry(env={'HAL_BACKEND': 'emu'}).selected().backend\n"
            "with hal.redirect.enable(backend):\n"
            "    import torch.distributed.tensor as dt\n"
            "    if not hasattr(dt, 'init_device_mesh'):\n"
            "        raise SystemExit(print('absent'))\n"
            "    during = getattr(dt.init_device_mesh, '__hal_redirect__', False)\n"
            "from torch.distributed.device_mesh import init_device_mesh\n"
            "print(during, dt.init_device_mesh is init_device_mesh)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    if p.stdout.split() == ["absent"]:
        pytest.skip(f"torch {torch.__version__}: torch.distributed.tensor re-exports no init_device_mesh (from 2.6)")
    assert p.stdout.split() == ["True", "True"]
