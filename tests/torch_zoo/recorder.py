"""An independent aten-op recorder, to check ``op_coverage trace`` against (issue 12, item 7).

:class:`OpRecorder` is a ``TorchDispatchMode``: it counts every ``OpOverload`` call that reaches the
Python dispatch key while it is active, per phase of a training step.  It shares no code with
``op_coverage.torch.trace``.

**The level it records at.**  A Python dispatch mode sits *below* autograd and below
CompositeImplicitAutograd: ``F.linear`` arrives as ``t`` + ``addmm`` (or ``mm``), ``F.dropout`` as
``native_dropout`` on a device and ``bernoulli_`` + ``div_`` + ``mul`` on the CPU (whichever the CIA
kernel chose for that device), a backward pass as the backward kernels the autograd graph calls
(``convolution_backward``, ``native_layer_norm_backward``, ...).  That is the level a vendor's
kernels registered on ``PrivateUse1`` (or CUDA's) receive, and the level the lead's tracer records
at.  It sits *above* the backend kernel: while the mode handles a call it is popped from the mode
stack, so whatever a kernel calls internally (a CPU kernel's own ``at::`` calls, the emulator's
host route, decompositions ``hal.fallback`` installs as ``PrivateUse1`` kernels) is not recorded —
those are hal's and the backend's own ops, not the script's.  Ops hal runs outside a step (the
emulator's start-up check) happen before the mode is entered.  A CompositeExplicitAutograd or
CEA-non-functional kernel (``_foreach_*`` loops, ``fill_``/``zero_`` helpers) calls the dispatcher
again from below Python, so its pieces are not seen either: only the op as called.

Backward work that torch runs on autograd's device threads is recorded too: the engine carries the
thread-local dispatch-mode stack to those threads.

Names follow the plan's naming rule: ``op._schema.name`` without its namespace, plus ``"." +
overload`` unless the overload is ``default`` (``addmm``, ``add.Tensor``, ``_foreach_add_.List``).
Only the ``aten`` namespace is counted in :attr:`OpRecorder.counts`; calls in other namespaces
(``prims``, custom ops) are kept apart in :attr:`OpRecorder.other_namespaces`, fully qualified.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpRecorder", "op_name", "record_step"]

PHASES = ("forward", "backward", "optimizer", "other")


def op_name(op) -> str:
    """The plan's name of an ``OpOverload``: ``addmm``, ``add.Tensor`` (no namespace, no ``.default``)."""
    name = op._schema.name.split("::", 1)[1]
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


class OpRecorder(TorchDispatchMode):
    """Counts aten op calls per phase.  ``set_phase(name)`` moves later calls to another phase."""

    def __init__(self):
        super().__init__()
        self.phase = "other"
        self.by_phase: dict[str, Counter] = defaultdict(Counter)
        self.other_namespaces: Counter = Counter()

    def set_phase(self, name: str) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
        self.phase = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = func._schema.name.split("::", 1)[0]
        if ns == "aten":
            self.by_phase[self.phase][op_name(func)] += 1
        else:
            self.other_namespaces[func._schema.name + ("" if func._overloadname == "default"
                                                       else "." + func._overloadname)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def counts(self) -> Counter:
        """Every aten op recorded, over all phases: name -> calls."""
        total = Counter()
        for c in self.by_phase.values():
            total.update(c)
        return total

    def table(self) -> list[dict]:
        """Rows ``{"op", "count", "phases": {phase: calls}}`` sorted by op name (the trace's shape)."""
        return [{"op": op, "count": n, "phases": {p: self.by_phase[p][op] for p in PHASES}}
                for op, n in sorted(self.counts.items())]


def record_step(factory, device="cpu", seed: int = 0, steps: int = 1) -> OpRecorder:
    """Build ``factory(seed=seed)`` on ``device`` (outside the recording) and record ``steps``
    training steps (:meth:`Workload.step`: forward, backward, optimizer step) with phases."""
    torch.manual_seed(seed)
    w = factory(seed=seed).to(device)
    opt = w.optimizer_factory(w.model.parameters())
    sched = w.scheduler_factory(opt) if w.scheduler_factory else None
    torch.manual_seed(seed)
    rec = OpRecorder()
    with rec:
        for _ in range(steps):
            w.step(opt, sched, phase=rec.set_phase)
        rec.set_phase("other")
    return rec
