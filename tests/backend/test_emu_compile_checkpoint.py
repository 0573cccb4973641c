"""torch.compile of an activation-checkpointed region with a seeded op (dropout) on emu: the
partitioner wraps it in torch's RNG operators, which the emulator implements for its device
(hal/emu/_compile_rng.py), so the recomputation in backward draws the forward's mask."""
import pytest
import torch
from torch.utils.checkpoint import checkpoint

import hal.emu

pytestmark = pytest.mark.emu


class Block(torch.nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.checkpointed = checkpointed

    def body(self, x):
        return torch.nn.functional.dropout(torch.relu(self.lin(x)), p=0.5, training=True)

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=False) if self.checkpointed else self.body(x)


def test_compiled_checkpoint_with_dropout_recomputes_the_forward_mask():
    hal.emu.install()
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = Block(checkpointed).to("emu")
        x = torch.randn(16, 8, device="emu")
        torch.emu.manual_seed(1)
        out = torch.compile(model, backend="aot_eager")(x)
        out.sum().backward()
        grads.append(model.lin.weight.grad.cpu())
    # a mask drawn again in backward with another state would give other gradients
    torch.testing.assert_close(grads[1], grads[0])
    assert grads[0].abs().sum() > 0
