"""The emulator's op trace (``hal.emu._trace``, recorded in C++ at the dispatcher) counts the same
aten ops as an independent recording — the zoo's own ``TorchDispatchMode`` (``recorder.py``) — for
one training step of each architecture.

The two are taken from two identical steps (after a first step that creates the optimizer's
state), not at once: the recorder's dispatch mode runs inside the trace's callbacks otherwise.
A dispatch mode also changes a few of torch's own choices, which the comparison undoes by name:

* ``isTensorSubclassLike`` is true while a mode is active, so autograd accumulates gradients with
  ``add`` instead of ``add_`` (also ``mul``/``sub``/``index_add``) and ``reshape`` uses ``view``
  instead of ``_reshape_alias``: in-place and functional forms are counted together, and
  ``_reshape_alias`` as ``view``;
* ``AccumulateGrad`` detaches gradients differently under a mode: ``detach`` is not compared;
* ``nn.TransformerEncoder`` checks for active modes and builds its mask another way
  (transformer_lm: ``empty.memory_format`` and ``fill_.Scalar``).

The recorder sees ops on host tensors too (optimizer step counters, ``.item()``); only calls with a
device tensor or a device argument are compared.
"""
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tests.torch_zoo.conftest import step_on, traced_step
from tests.torch_zoo.models import ARCHITECTURES
from tests.torch_zoo.recorder import op_name

pytestmark = pytest.mark.emu

NOT_COMPARED = {"detach"}
MODE_CHANGES = {"transformer_lm": {"empty.memory_format", "fill_.Scalar"}}


class DeviceCalls(TorchDispatchMode):
    """The recorder's counting, for calls on the device only."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        leaves = tree_leaves((args, kwargs or {}))
        if func.namespace == "aten" and any(
                (isinstance(x, torch.Tensor) and x.device.type == "emu")
                or (isinstance(x, torch.device) and x.type == "emu") for x in leaves):
            self.counts[op_name(func)] += 1
        return func(*args, **(kwargs or {}))


def normalise(counts, skip):
    out = Counter()
    for op, n in counts.items():
        packet, dot, overload = op.partition(".")
        if packet == "_reshape_alias":
            packet = "view"
        if packet.endswith("_") and not packet.startswith("_foreach") and packet not in ("zero_", "fill_"):
            packet = packet[:-1]
        name = packet + dot + overload
        if op not in skip and name not in skip:
            out[name] += n
    return out


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_trace_counts_equal_an_independent_dispatch_mode_recording(emu_one_thread, name):
    step = step_on(name, emu_one_thread, ARCHITECTURES)
    step()  # the optimizer's state exists from here on: the next steps are alike
    rows = traced_step(step)
    rec = DeviceCalls()
    with rec:
        step()
    skip = NOT_COMPARED | MODE_CHANGES.get(name, set())
    traced = normalise({r["op"]: r["count"] for r in rows if r["count"]}, skip)
    recorded = normalise(rec.counts, skip)
    assert len(traced) > 15 and sum(traced.values()) > 50
    assert traced == recorded
