"""Recurrent layers on emu take torch's device path (fused cells) and match the CPU."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import hal.emu

pytestmark = pytest.mark.emu


@pytest.fixture(autouse=True)
def emulator():
    hal.emu.install()


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("kw", [{}, {"bias": False}, {"batch_first": True, "bidirectional": True},
                                {"num_layers": 2, "dropout": 0.0}])
def test_recurrent_layer_forward_and_gradients_match_the_cpu(cls, kw):
    torch.manual_seed(0)
    cpu = cls(6, 5, **kw)
    emu = copy.deepcopy(cpu).to("emu")
    x = torch.randn(4, 3, 6)
    out_c, _ = cpu(x)
    out_e, _ = emu(x.to("emu"))
    torch.testing.assert_close(out_e.cpu(), out_c.detach(), rtol=1e-5, atol=1e-6)
    out_c.square().sum().backward()
    out_e.square().sum().backward()
    for p, q in zip(cpu.parameters(), emu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)


def test_packed_sequences_run_on_the_device():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 3, batch_first=True)
    x, lengths = torch.randn(3, 5, 4), torch.tensor([5, 3, 2])  # lengths stay on the CPU, as on CUDA
    ref, _ = pad_packed_sequence(lstm(pack_padded_sequence(x, lengths, batch_first=True))[0], batch_first=True)
    lstm_e = copy.deepcopy(lstm).to("emu")
    got, _ = pad_packed_sequence(lstm_e(pack_padded_sequence(x.to("emu"), lengths, batch_first=True))[0],
                                 batch_first=True)
    assert got.device.type == "emu"
    torch.testing.assert_close(got.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)


def test_cells_reach_the_device_as_the_fused_kernels_cuda_has(emu_selected):
    hal.emu.reset_fallback_report()
    lstm, gru = torch.nn.LSTMCell(4, 3).to("emu"), torch.nn.GRUCell(4, 3).to("emu")
    x = torch.randn(2, 4, device="emu")
    (lstm(x)[0].sum() + gru(x).sum()).backward()
    ops = {r["op"] for r in hal.fallback_report()}
    assert not any("thnn_fused" in op for op in ops)  # the emulator's own kernels, not fallbacks
