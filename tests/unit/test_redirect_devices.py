"""Every device-taking torch call a script can reach is wrapped by the shim, and each wrapper
lands CUDA devices on the backend.  The set comes from torch's operator schemas, read here
independently of hal's own enumeration."""
import pytest
import torch

import hal.redirect
from hal.plugin.registry import Registry

#: sub-namespaces where an aten op ``<prefix>_<name>`` is reached as ``torch.<ns>.<name>``
SUBMODULES = {"fft": torch.fft, "linalg": torch.linalg, "special": torch.special, "nested": torch.nested,
              "sparse": torch.sparse}


@pytest.fixture
def cpu_backend(clean_registry):
    return Registry(env={"HAL_BACKEND": "cpu"}).selected().backend


def device_taking_ops():
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any(
                a.name == "device" and "Device" in str(a.type) for a in schema.arguments):
            names.add(schema.name[len("aten::"):])
    return names


def reachable(name):
    """(label, owner, attribute) where a script reaches aten op ``name``."""
    out = [(f"torch.{name}", torch, name), (f"torch.Tensor.{name}", torch.Tensor, name)]
    prefix, _, rest = name.partition("_")
    if prefix in SUBMODULES and rest:
        out.append((f"torch.{prefix}.{rest}", SUBMODULES[prefix], rest))
    return [(label, owner, attr) for label, owner, attr in out if getattr(owner, attr, None) is not None]


def test_every_schema_device_call_reachable_from_torch_is_wrapped(cpu_backend):
    calls = [c for name in sorted(device_taking_ops()) for c in reachable(name)]
    assert len(calls) > 50  # factories, *_like, windows, sparse constructors, Tensor.to/new_*, fft.*freq ...
    with hal.redirect.enable(cpu_backend):
        missing = [label for label, owner, attr in calls
                   if not getattr(getattr(owner, attr), "__hal_redirect__", False)]
    assert missing == []


def test_python_level_device_calls_are_wrapped(cpu_backend):
    from torch.utils._device import DeviceContext
    from torch.utils.data import DataLoader
    with hal.redirect.enable(cpu_backend):
        owners = {"torch.asarray": torch.asarray, "torch.Tensor.new_tensor": torch.Tensor.new_tensor,
                  "torch.Tensor.cuda": torch.Tensor.cuda, "torch.Tensor.type": torch.Tensor.type,
                  "torch.nn.Module.to": torch.nn.Module.to, "torch.nn.Module.cuda": torch.nn.Module.cuda,
                  "torch.nn.Module.to_empty": torch.nn.Module.to_empty, "torch.Generator": torch.Generator,
                  "torch.Stream": torch.Stream, "torch.Event": torch.Event, "torch.load": torch.load,
                  "DeviceContext.__init__": DeviceContext.__init__, "DataLoader.__init__": DataLoader.__init__,
                  "torch.cuda.FloatTensor": torch.cuda.FloatTensor, "torch.nested.nested_tensor":
                  torch.nested.nested_tensor}
        missing = [k for k, v in owners.items() if not getattr(v, "__hal_redirect__", False)]
    assert missing == []


FACTORIES = {
    "zeros": lambda d: torch.zeros(2, device=d),
    "full": lambda d: torch.full((2,), 3.0, device=d),
    "arange": lambda d: torch.arange(3, device=d),
    "eye": lambda d: torch.eye(2, device=d),
    "randn": lambda d: torch.randn(2, device=d),
    "randint": lambda d: torch.randint(0, 5, (2,), device=d),
    "tensor": lambda d: torch.tensor([1.0], device=d),
    "as_tensor": lambda d: torch.as_tensor([1.0], device=d),
    "asarray": lambda d: torch.asarray([1.0], device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.ones(2), device=d),
    "linspace": lambda d: torch.linspace(0, 1, 3, device=d),
    "hann_window": lambda d: torch.hann_window(4, device=d),
    "tril_indices": lambda d: torch.tril_indices(3, 3, device=d),
    "sparse_coo_tensor": lambda d: torch.sparse_coo_tensor([[0]], [1.0], (2,), device=d),
    "fft.fftfreq": lambda d: torch.fft.fftfreq(4, device=d),
    "Tensor.new_zeros": lambda d: torch.ones(1).new_zeros(2, device=d),
    "Tensor.new_tensor": lambda d: torch.ones(1).new_tensor([2.0], device=d),
    "Tensor.to": lambda d: torch.ones(1).to(d),
    "Tensor.to(device=)": lambda d: torch.ones(1).to(device=d, dtype=torch.float64),
    "nn.Linear(device=)": lambda d: torch.nn.Linear(2, 2, device=d).weight,
    "Module.to": lambda d: torch.nn.Linear(2, 2).to(d).weight,
    "Module.to_empty": lambda d: torch.nn.Linear(2, 2, device="meta").to_empty(device=d).weight,
}


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 0), 0], ids=["str", "str0", "obj", "int"])
@pytest.mark.parametrize("call", FACTORIES.values(), ids=FACTORIES.keys())
def test_cuda_device_arguments_land_on_the_backend(cpu_backend, call, device):
    try:  # without the shim: an error (no CUDA here), or the accelerator a bare index names
        without = call(device).device.type
    except (RuntimeError, AssertionError):
        without = "error"
    assert without != "cpu"
    with hal.redirect.enable(cpu_backend):
        assert call(device).device.type == "cpu"
