"""Every op of torch's OpInfo database traces with fake tensors on the emulated device where it
does on the CPU: the path `torch.compile` takes (dynamo runs each op under `FakeTensorMode`).

A kernel of the emulator that reads bytes while torch only asks a question of shapes (as
`scaled_dot_product_attention`'s fused-kernel choice did: `Cannot access data pointer of
Tensor (e.g. FakeTensor ...)` under `torch.compile`) fails here.  The CPU is the ground truth:
an op whose first float32 sample traces on CPU fake tensors must trace on emu fake tensors,
with the same output shapes, on the emu device.
"""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map

from test_emu_opinfo import NOT_ON_EMU, emulator  # noqa: F401 - the module's autouse fixture: emu installed

pytestmark = pytest.mark.emu

common_methods_invocations = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations",
    reason="torch's OpInfo database needs expecttest (installed with hal's test extras)")


def _trace(op, sample, device):
    """Output (shape, device type) leaves of ``op`` on fake copies of ``sample`` moved to ``device``."""
    move = lambda x: x.detach().to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    args = tree_map(move, (sample.input, sample.args, sample.kwargs))
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = tree_map(lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x, args)
        out = op(fake[0], *fake[1], **fake[2])
    return [(tuple(t.shape), t.device.type) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def test_every_op_that_traces_on_cpu_fake_tensors_traces_on_emu():
    failures, checked = [], 0
    for op in common_methods_invocations.op_db:
        if op.name in NOT_ON_EMU or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        try:
            sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
            cpu = _trace(op, sample, "cpu")
        except Exception:  # noqa: BLE001 - not traceable on the CPU either (data-dependent shapes, ...)
            continue
        checked += 1
        try:
            emu = _trace(op, sample, "emu")
        except Exception as exc:  # noqa: BLE001 - reported below with the op's name
            failures.append(f"{op.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        on_emu = [(shape, "emu" if dev == "cpu" else dev) for shape, dev in cpu]
        if emu not in (on_emu, cpu):  # factories given device="cpu" by the sample stay on the CPU
            failures.append(f"{op.name}: outputs {emu}, CPU's {cpu}")
    assert checked > 400, f"only {checked} ops traced on the CPU: the OpInfo database was not read"
    assert not failures, f"{len(failures)} of {checked} ops trace on CPU fake tensors, not on emu's:\n" + \
        "\n".join(failures)
