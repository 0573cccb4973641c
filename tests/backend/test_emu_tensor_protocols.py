"""An emu tensor behaves as a CUDA tensor does under every Python protocol training code uses."""
import copy
import io
import pickle

import numpy as np
import pytest
import torch

import hal.emu

pytestmark = pytest.mark.emu


@pytest.fixture(autouse=True)
def emulator():
    hal.emu.install()


def test_zero_dim_tensors_format_convert_and_index_like_numbers():
    loss = torch.tensor([1.25, 2.5, 3.75], device="emu").sum()
    assert f"{loss:6.2f}" == "  7.50" and f"{loss:.1e}" == "7.5e+00"  # progress meters do this
    assert bool(loss) and float(loss) == 7.5 and int(loss) == 7 and round(float(loss), 1) == 7.5
    i = torch.tensor(2, device="emu")
    assert ["a", "b", "c"][i] == "c" and i.__index__() == 2 and range(5)[i] == 2
    assert repr(loss) == "tensor(7.5000, device='emu:0')"


def test_iteration_length_membership_and_hash():
    x = torch.arange(3.0, device="emu")
    assert len(x) == 3 and [t.item() for t in x] == [0.0, 1.0, 2.0]
    assert all(t.device == x.device for t in x)
    assert 2.0 in x and 5.0 not in x
    assert hash(x) == hash(x) and {x: 1}[x] == 1  # hashed by identity, as every tensor


def test_numpy_conversion_refuses_as_on_cuda():
    x = torch.ones(2, device="emu")
    with pytest.raises(TypeError, match="can't convert emu:0 device type tensor to numpy"):
        np.asarray(x)
    assert np.asarray(x.cpu()).tolist() == [1.0, 1.0]


def test_pickle_and_deepcopy_keep_the_device():
    x = torch.randn(3, 4, device="emu:1").requires_grad_()
    for y in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert y.device == torch.device("emu", 1) and y.requires_grad
        assert torch.equal(y.detach().cpu(), x.detach().cpu())


def test_save_and_load_restore_tensors_on_their_device():
    model = torch.nn.Linear(3, 2).to("emu:1")
    buf = io.BytesIO()
    torch.save({"x": torch.ones(2, device="emu"), "model": model.state_dict()}, buf)
    for kwargs in ({"weights_only": False}, {"weights_only": True}):
        buf.seek(0)
        state = torch.load(buf, **kwargs)  # location tags emu:0 / emu:1, as cuda:0 on CUDA
        assert state["x"].device == torch.device("emu", 0)
        assert state["model"]["weight"].device == torch.device("emu", 1)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu", weights_only=False)
    assert on_cpu["x"].device.type == "cpu" and torch.equal(on_cpu["model"]["bias"], model.bias.detach().cpu())
    # and the loaded tensors are usable with the others of the device
    assert (state["x"] + torch.ones(2, device="emu")).device.type == "emu"


@pytest.mark.skipif(not hasattr(torch, "accelerator"),
                    reason=f"torch {torch.__version__} pins for CUDA when no device is named (torch.accelerator, 2.6+, "
                           f"made it the current accelerator); hal.device.pin_memory names it")
def test_pinned_host_memory_is_reported_as_pinned():
    host = torch.randn(4)
    pinned = host.pin_memory()  # the current accelerator is emu
    assert pinned.is_pinned() and not host.is_pinned()
    assert torch.equal(pinned.to("emu", non_blocking=True).cpu(), host)
