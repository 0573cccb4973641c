"""How a ``hal.ops`` call crosses into its implementation.

Every operator is a ``torch.library`` custom op (``torch.ops.hal.<name>``, with a fake
implementation and autograd), which is what ``torch.compile``, ``torch.export``,
FakeTensor, tensor subclasses (DTensor) and dispatch modes need to see.  In plain eager
code that boundary is pure cost: its Python layers take ~20-50 us a call, more than the
whole of a decode-sized kernel.  So :class:`Op` decides per call:

* **eager** — every tensor argument a plain ``torch.Tensor`` (or ``nn.Parameter``), no
  dynamo tracing, no torch dispatch mode and no functorch transform active: the
  implementation is called directly (the same function the custom op runs), or through
  an ``autograd.Function`` built from the op's own autograd formula when a gradient is
  needed — unless the device has no fused kernel for the op, or its declared sizes leave
  this call to the composition (``hal.plugin.kernels.SizedKernel``): the torch composition
  runs under autograd; or its fused kernel is itself differentiable torch ops
  (``F.layer_norm`` on the CPU): the backward is then torch's, as without hal;
* **otherwise** (``torch.compile``, ``torch.export``, ``torch.jit.trace`` and the ONNX
  exporters, FakeTensor, DTensor, dispatch modes, functorch transforms) — the custom op.

Where a fused kernel runs on both, both routes run the same implementation and backward formula,
so results are bitwise the same; bench/bench_op_boundary.py measures what each route costs.

The decision itself is made in C where ``hal._C`` has ``OpEntry`` (csrc/op_entry.cpp; Python >=
3.11): a Python ``__call__`` with its argument walk costs 0.8-1.8 us a call (the C one 0.4-0.7 us),
as much as a decode-sized kernel.  :class:`Op` is the same decision in Python, used elsewhere and
with ``HAL_OPS_NATIVE=0``.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import torch
from torch import Tensor
from torch.nn import Parameter

from hal.ops._dispatch import DIFFERENTIABLE_FUSED, autograd_route, record_composition
from hal.util.in_graph import compiled_in_graph

_PLAIN = (Tensor, Parameter)
_is_compiling = torch.compiler.is_compiling
_is_tracing = torch.jit.is_tracing  # torch.jit.trace / the TorchScript ONNX exporter record dispatcher ops
_grad_enabled = torch.is_grad_enabled
# The only private torch names here: no public API answers "is a torch dispatch mode / a functorch
# transform active" on any torch of hal's window (torch.utils._python_dispatch and torch._functorch
# read these same two).  Where a torch lacks either, every call takes the custom op (always correct).
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)


#: what makes a call of the C entry take the custom op whatever its arguments (zero-argument
#: callables, any true).  Not torch.compiler.is_compiling: the C entry is declared to torch.compile
#: (hal.util.in_graph), so dynamo records it in its graph and never runs it on real tensors while
#: tracing; the graph's later tracing passes fake or functional tensors, which take the custom op.
_GUARDS = tuple(g for g in (_is_tracing, _dispatch_modes, _functorch_active) if g is not None)


def _eager_args(args) -> Optional[bool]:
    """None when the call must take the custom op; else whether any tensor requires grad.

    The custom op is taken under dynamo tracing, ``torch.jit.trace``, a torch dispatch mode,
    a functorch transform, or with any tensor that is not a plain ``Tensor`` / ``Parameter``.
    """
    if _is_compiling() or _is_tracing() or _dispatch_modes is None or _functorch_active is None:
        return None
    if _dispatch_modes() or _functorch_active():
        return None
    grad = False
    for a in args:
        if isinstance(a, Tensor):
            if type(a) not in _PLAIN:
                return None
            grad = grad or a.requires_grad
        elif isinstance(a, (list, tuple)):
            for v in a:
                if isinstance(v, Tensor):
                    if type(v) not in _PLAIN:
                        return None
                    grad = grad or v.requires_grad
    return grad


class Op:
    """One ``hal.ops`` operator's entry: custom op when traced, direct call when eager.

    :param custom: the ``torch.ops.hal.<name>`` overload packet (the traced route).
    :param impl: the function the custom op wraps (the eager route; it dispatches to a path).
    :param setup_context: ``(ctx, inputs, output)`` as given to ``register_autograd``, or
        None for an operator without autograd (a backward, an in-place optimizer step).
    :param backward: ``(ctx, *grads) -> grads per input`` as given to ``register_autograd``.
    """

    __slots__ = ("name", "custom", "impl", "function", "composition")

    def __init__(self, custom, impl: Callable, setup_context: Optional[Callable] = None,
                 backward: Optional[Callable] = None, composition: Optional[Callable] = None,
                 name: Optional[str] = None):
        self.custom = custom
        self.impl = impl
        self.composition = composition
        self.name = name or impl.__name__.strip("_")
        self.function = None
        if setup_context is not None:
            # forward(ctx, ...) rather than a separate setup_context: torch's apply for the
            # latter style goes through functorch's custom_function_call (~20 us a call more)
            def forward(ctx, *args):
                out = impl(*args)
                setup_context(ctx, args, out)
                return out

            self.function = type(f"{impl.__name__.strip('_')}_function", (torch.autograd.Function,), {
                "forward": staticmethod(forward),
                "backward": staticmethod(backward),
            })

    def __call__(self, *args):
        grad = _eager_args(args)
        if grad is None:
            return self.custom(*args)
        if grad:
            return self.grad_call(*args)
        return self.impl(*args)

    def grad_call(self, *args):
        """An eager call in which some tensor requires grad (the eager route's autograd part)."""
        if self.function is not None and _grad_enabled():
            route = autograd_route(self.name, args) if self.composition is not None else None
            if route == DIFFERENTIABLE_FUSED:  # the fused kernel is torch ops: torch's autograd
                return self.impl(*args)
            if route is not None:  # no fused kernel here: the torch composition, under autograd
                try:
                    out = self.composition(*args)
                except NotImplementedError:
                    return self.function.apply(*args)  # the device lacks an op: the host kernel
                record_composition(self.name, route)
                return out
            return self.function.apply(*args)
        return self.impl(*args)

    def __repr__(self) -> str:
        return f"hal.ops Op({self.name})"


def define(name: str, impl: Callable, *, fake: Callable, setup_context: Optional[Callable] = None,
           backward: Optional[Callable] = None, composition: Optional[Callable] = None,
           mutates_args=()) -> Op:
    """Register ``impl`` as the custom op ``hal::<name>`` (fake kernel, autograd) and return its :class:`Op`.

    ``impl``'s annotations are the op's schema (``torch.library.custom_op``'s rules);
    ``setup_context`` / ``backward`` are ``register_autograd``'s and also build the eager
    ``autograd.Function``.  ``composition`` (same arguments as ``impl``, torch ops only) is
    what an eager call that needs a gradient runs where the device has no fused kernel: the
    torch ops under autograd, as the model would run them without hal, instead of hal's
    closed-form backward composition.
    """
    custom = torch.library.custom_op(f"hal::{name}", mutates_args=mutates_args)(impl)
    custom.register_fake(fake)
    if setup_context is not None:
        custom.register_autograd(backward, setup_context=setup_context)
    global _entered_in_c
    op = Op(getattr(torch.ops.hal, name), impl, setup_context, backward, composition, name)
    chosen = entry(op)
    _entered_in_c = chosen is not op
    return chosen


#: whether the last operator :func:`define` made was given the C entry (None: none yet)
_entered_in_c: Optional[bool] = None


def entry(op: Op):
    """``op``'s decision made in C (``hal._C.OpEntry``: same routes, same arguments) where it is
    built, else ``op`` itself.  ``HAL_OPS_NATIVE=0`` keeps the Python entry."""
    native = _native_entry()
    if native is None:
        return op
    fast = native(op.custom, op.impl, op.grad_call, _GUARDS, _PLAIN, Tensor, op.name)
    fast.op = op  # the Python entry, for its attributes (function, composition)
    fast.__name__ = fast.__qualname__ = op.name  # what torch.compile's graph names the call by
    fast.__module__ = "hal.ops"
    return compiled_in_graph(fast)  # traced by torch.compile: fake tensors take the custom op


def native_entry() -> bool:
    """True when hal.ops operators are entered through ``hal._C.OpEntry`` (C), False for the Python
    :class:`Op` (chosen when the operators were defined, at ``import hal.ops``)."""
    return _entered_in_c if _entered_in_c is not None else _native_entry() is not None


def _native_entry():
    if os.environ.get("HAL_OPS_NATIVE", "1") == "0" or _dispatch_modes is None or _functorch_active is None:
        return None
    try:
        from hal._C import OpEntry
    except ImportError:  # not built, or Python < 3.11 (no OpEntry)
        return None
    return OpEntry
