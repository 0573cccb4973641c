"""The emulator's fallback for ops outside its native set: the CPU's kernel (default) or torch's
decompositions first; counted, announced once."""
import pytest
import torch

import hal
import hal.emu

pytestmark = pytest.mark.emu


@pytest.fixture(autouse=True)
def fresh_report(emu_selected):
    hal.emu.install()
    hal.emu.reset_fallback_report()
    yield
    hal.emu.reset_fallback_report()


def _row(op):
    return next((r for r in hal.fallback_report() if r["op"] == op), None)


def test_native_ops_are_not_reported():
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error", hal.emu.FallbackWarning)
        x = torch.ones(4, device="emu")
        (x + x * 2).sum().cpu()
    assert hal.fallback_report() == []


def test_by_default_a_fallback_runs_the_cpus_kernel_and_gives_the_cpus_numbers():
    assert hal.emu.fallback_route() == "host"
    x = torch.linspace(-2, 2, 12).view(3, 4)
    with pytest.warns(hal.emu.FallbackWarning, match=r"aten::_softmax .*host"):
        y = torch.softmax(x.to("emu"), dim=-1)
    assert torch.equal(y.cpu(), torch.softmax(x, dim=-1))  # bit for bit: the CPU's own kernel
    assert _row("aten::_softmax") == {"op": "aten::_softmax", "route": "host", "count": 1}
    # torch's composite for devices without a layer norm is not taken: the CPU's kernel is
    ln = torch.nn.LayerNorm(4)
    assert torch.equal(ln.to("emu")(x.to("emu")).cpu(), ln.cpu()(x))
    assert _row("aten::native_layer_norm")["route"] == "host"


@pytest.fixture
def decomposition_route():
    hal.emu.set_fallback_route("decomposition")
    yield
    hal.emu.set_fallback_route("host")


def test_op_with_a_torch_decomposition_is_decomposed_and_counted(decomposition_route):
    x = torch.linspace(-2, 2, 12).view(3, 4)
    with pytest.warns(hal.emu.FallbackWarning, match=r"aten::_softmax\.out.*decomposed"):
        y = torch.softmax(x.to("emu"), dim=-1)
    torch.testing.assert_close(y.cpu(), torch.softmax(x, dim=-1))
    assert _row("aten::_softmax.out") == {"op": "aten::_softmax.out", "route": "decomposition", "count": 1}
    # without the host route, softmax reaches the device as _softmax.out (a structured op's
    # out= form, as on a vendor device); its pieces
    # (amax, sub, exp, sum, div) are native, so nothing else fell back
    assert [r["op"] for r in hal.fallback_report()] == ["aten::_softmax.out"]


def test_unknown_fallback_route_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'gpu'.*host, decomposition"):
        hal.emu.set_fallback_route("gpu")


def test_op_without_decomposition_runs_on_the_host():
    x = torch.tensor([0.5, 1.5, 2.5]).to("emu")
    with pytest.warns(hal.emu.FallbackWarning, match=r"aten::lgamma .*host"):
        y = torch.lgamma(x)
    assert torch.equal(y.cpu(), torch.lgamma(torch.tensor([0.5, 1.5, 2.5])))
    assert _row("aten::lgamma")["route"] == "host"


def test_each_op_warns_once_and_counts_every_call():
    x = torch.tensor([0.5, 1.5]).to("emu")
    with pytest.warns(hal.emu.FallbackWarning) as record:
        for _ in range(3):
            torch.lgamma(x)
    assert sum("lgamma" in str(w.message) for w in record) == 1
    assert _row("aten::lgamma")["count"] == 3


def test_in_place_form_of_a_native_op_stays_native():
    x = torch.ones(3, device="emu")
    x.mul_(3.0).add_(1.0)
    assert torch.equal(x.cpu(), torch.full((3,), 4.0))
    assert _row("aten::mul_.Scalar") is None and _row("aten::add_.Scalar") is None


def test_profile_declares_a_partial_native_set():
    native = hal.emu.native_packets()
    assert "aten::mm" in native and "aten::add" in native
    assert "aten::_softmax" not in native and "aten::lgamma" not in native
