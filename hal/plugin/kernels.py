"""A fused kernel declared with the input sizes at which it beats the torch composition.

A fused kernel is not faster than the torch ops it replaces at every size: at a decode step's
(1, 64) a C++ kernel behind Python costs more than one ATen call, and a kernel written for
float32 may lose to ATen's vectorised float16.  A plugin says where its kernel wins, per dtype,
as half-open ranges of the input's element count; outside them ``hal.ops`` runs the op's
torch composition on the device, as the model would without hal (counted as ``composition``
in ``hal.ops.stats()``, with no fallback warning: it is the device's best path there)::

    from hal.plugin.kernels import SizedKernel

    fused = {"gelu": SizedKernel("mychip_ops:gelu",
                                 forward={"float32": (4096, None), "float16": "never"},
                                 with_grad={"float32": (65536, None)})}

``forward`` rules the call alone; ``with_grad`` an eager call that needs a gradient, where the
fused kernel also brings hal's ``autograd.Function`` (~15-30 us a call on a CPU) against torch's
own C++ autograd of the composition.  A dtype not named: every size.  ``when_unset`` names the
optional arguments (by position in the op's call) that must be unset (None or False) for the
rule to hold: a softmax measured without a mask says nothing of a masked one, whose
composition costs several ops more, so a call with a mask runs the kernel at every size.  This module imports
nothing heavy: a plugin's table is built before torch is imported.
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Tuple, Union

Range = Tuple[int, float]
#: a dtype's rule as data: ``(low, high)`` element counts (high None: no limit) or ``"never"``
RuleValue = Union[str, Tuple[int, Optional[int]], list]

_EVERY_SIZE: Range = (0, float("inf"))
_NEVER: Range = (0, 0)
DTYPES = ("float32", "float16", "bfloat16", "float64")


class SizedKernel:
    """A declared kernel (``"module:function"`` or a callable) and the sizes where it is used.

    :param kernel: what the plugin would otherwise declare for the op.
    :param forward: ``{dtype name: (low, high) or "never"}``: the kernel runs for inputs whose
        ``numel()`` is in ``[low, high)`` (``high`` None: no limit).
    :param with_grad: the same, for eager calls that need a gradient (default: ``forward``'s).
    :param measured: where the ranges come from (a benchmark and its date), for reports.
    :param when_unset: ``{argument name: position in the op's arguments}``: the rule holds only
        for calls in which each is None or False.
    :raises ValueError: on a dtype hal.ops does not take, a range that is not ``low <= high``, or
        a position that is not a positive integer.
    """

    __slots__ = ("kernel", "forward", "with_grad", "measured", "when_unset")

    def __init__(self, kernel: Union[str, Callable], forward: Optional[Mapping[str, RuleValue]] = None,
                 with_grad: Optional[Mapping[str, RuleValue]] = None, measured: str = "",
                 when_unset: Optional[Mapping[str, int]] = None):
        self.kernel = kernel
        self.forward = _ranges(kernel, "forward", forward or {})
        self.with_grad = _ranges(kernel, "with_grad", with_grad) if with_grad is not None else dict(self.forward)
        self.measured = measured
        self.when_unset = dict(when_unset or {})
        for name, pos in self.when_unset.items():
            if not isinstance(pos, int) or isinstance(pos, bool) or pos < 1:
                raise ValueError(f"SizedKernel({kernel!r}): when_unset[{name!r}] is {pos!r}; give the argument's "
                                 "position in the op's call (1 for the first after the input)")

    def applies(self, args: tuple) -> bool:
        """Whether the size rule holds for a call with ``args`` (every ``when_unset`` argument unset)."""
        for pos in self.when_unset.values():
            if pos < len(args) and args[pos] is not None and args[pos] is not False:
                return False
        return True

    def range_for(self, dtype_name: str, grad: bool = False) -> Range:
        """``[low, high)`` of element counts for which the kernel runs; ``(0, inf)`` for every size."""
        return (self.with_grad if grad else self.forward).get(dtype_name, _EVERY_SIZE)

    def describe(self) -> Dict[str, Dict[str, str]]:
        """The ranges as text per pass and dtype (``"numel >= 4096"``, ``"never"``), for reports."""
        out = {name: {dt: _text(r) for dt, r in rules.items()}
               for name, rules in (("forward", self.forward), ("with_grad", self.with_grad)) if rules}
        if self.when_unset:
            out["when_unset"] = {name: "unset" for name in self.when_unset}
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, SizedKernel) and (self.kernel, self.forward, self.with_grad, self.when_unset) == (
            other.kernel, other.forward, other.with_grad, other.when_unset)

    def __hash__(self) -> int:
        return hash((self.kernel, tuple(sorted(self.forward.items())), tuple(sorted(self.with_grad.items()))))

    def __repr__(self) -> str:
        return f"SizedKernel({self.kernel!r}, {self.describe()})"


def _ranges(kernel, which: str, rules: Mapping[str, RuleValue]) -> Dict[str, Range]:
    out = {}
    for dtype, rule in rules.items():
        if dtype not in DTYPES:
            raise ValueError(f"SizedKernel({kernel!r}): {which} names dtype {dtype!r}; hal.ops takes "
                             f"{', '.join(DTYPES)}: use one of those names")
        if rule == "never":
            out[dtype] = _NEVER
            continue
        try:
            low, high = rule
            low = int(low)
            high = float("inf") if high is None else int(high)
        except (TypeError, ValueError):
            raise ValueError(f"SizedKernel({kernel!r}): {which}[{dtype!r}] is {rule!r}; give (low, high) element "
                             "counts (high None for no limit) or 'never'") from None
        if not 0 <= low <= high:
            raise ValueError(f"SizedKernel({kernel!r}): {which}[{dtype!r}] is {rule!r}; it needs 0 <= low <= high")
        out[dtype] = (low, high)
    return out


def _text(r: Range) -> str:
    low, high = r
    if high == 0:
        return "never"
    if high == float("inf"):
        return f"numel >= {low}" if low else "every size"
    return f"{low} <= numel < {high}" if low else f"numel < {high}"
