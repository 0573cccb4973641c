"""``ReduceOp.PREMUL_SUM`` where gloo lacks it: each rank multiplies its input by the factor, then
the ranks sum.

NCCL serves ``PREMUL_SUM`` (``ReduceOp.PREMUL_SUM(f)``, ``torch.distributed._make_nccl_premul_sum(f)``):
FSDP2 reduce-scatters its gradients with it after ``set_gradient_divide_factor`` (torchtitan sets
one).  gloo refuses it (``Cannot use ReduceOp.PREMUL_SUM with Gloo``, torch 2.13).  While ``hal run``'s
redirection or :func:`hal.dist.init` is in force, hal serves it on every group whose backend for the
tensor's device is gloo (the cpu backend, and the ``cpu:gloo`` half of ``cpu:gloo,<device>:<ccl>``).

Where: the ``torch.distributed`` functions that take ``op=`` (:data:`FUNCTIONS`) are wrapped.  A call
whose op is a ``PREMUL_SUM`` and whose group reaches gloo runs as the same function with the input
multiplied and ``op=SUM``; every other call goes to torch's function as it was (one class test more
per call: results unchanged, docs/dist.md has the cost).  Why there and not in c10d:

- the backend c10d picks per device (``ProcessGroupGloo``) is C++; wrapping it in a Python c10d
  backend would put Python on every collective of every CPU group and change what
  ``get_backend()`` answers, and replacing the methods of torch's C++ ``ProcessGroup`` class would
  also reach the Python groups that subclass it (pybind's override lookup);
- the functions are what FSDP2 (``dist.reduce_scatter_single``), DDP comm hooks, torchtitan and user
  code call, looked up at call time.  A function bound by name before the wrapping (``from
  torch.distributed import all_reduce`` before ``hal.dist.init()``) keeps torch's own; under
  ``hal run`` the wrapping is in place before the script runs;
- async calls (``async_op=True``) need nothing more: the multiplication happens before the
  collective is issued, and the work returned is the collective's own;
- inside ``_coalescing_manager`` torch records the call as it is made: it records the multiplied
  input and ``SUM``, so the coalesced call gloo receives is a plain sum.

A collective that writes its tensor in place (``all_reduce``, ``all_reduce_coalesced``, ``reduce``,
whose buffer gloo writes on every rank, the root's and the others') is multiplied in place; one
whose input is read-only for the caller (``reduce_scatter``, ``reduce_scatter_single``,
``reduce_scatter_tensor``) gets a multiplied copy.  A Python c10d group (the emulator's ``emuccl``,
a vendor CCL written in Python) serves its own ops: calls on it are passed on untouched.
:func:`premul_sum_factor` and :func:`premultiplied` are what such a CCL uses to serve the op itself.

``ReduceOp.AVG``: gloo in torch 2.13 averages in every collective that takes an op (``hal
conformance``'s CCL check compares it with a plain computation), and hal passes it on.  An older gloo
does not: torch 2.7's ``reduce_scatter_tensor`` silently *sums* with ``AVG`` (its ``all_reduce`` and
``reduce`` refuse the op), so FSDP2, which reduce-scatters float32 gradients with ``AVG``, gets
gradients ``world size`` times too large there (Adam hides the scale until a checkpoint saved at one
world size is resumed at another).  :func:`gloo_averages` measures it once per process, and where
gloo does not average, hal serves ``AVG`` on gloo groups as ``PREMUL_SUM(1 / group size)``.
"""
from __future__ import annotations

import datetime
import functools
import inspect
import threading
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from hal.dist.errors import DistError


@dataclass(frozen=True)
class Function:
    """One wrapped ``torch.distributed`` function: the parameter that carries the data and whether
    the collective writes it in place (multiplied in place) or only reads it (a multiplied copy)."""

    name: str
    operand: str
    in_place: bool
    required: bool = True   # in every torch of hal's window; the others are wrapped where torch has them


#: the torch.distributed functions that take ``op=`` (torch 2.13; the rest are newer or deprecated)
FUNCTIONS: Tuple[Function, ...] = (
    Function("all_reduce", "tensor", True),
    Function("all_reduce_coalesced", "tensors", True, required=False),
    Function("reduce", "tensor", True),
    Function("reduce_scatter", "input_list", False),
    Function("reduce_scatter_tensor", "input", False),
    Function("reduce_scatter_single", "input", False, required=False),
    Function("_reduce_scatter_base", "input", False, required=False),
)

#: the attribute that marks hal's wrapper (and holds torch's function)
MARK = "__hal_premul_sum__"
_ReduceOp = getattr(dist, "ReduceOp", None)  # absent from a torch built without distributed
_PREMUL_SUM = _ReduceOp.RedOpType.PREMUL_SUM if _ReduceOp is not None else None
_AVG = _ReduceOp.RedOpType.AVG if _ReduceOp is not None else None
Factor = Union[float, torch.Tensor]


def premul_sum_factor(op) -> Optional[Factor]:
    """The factor of a ``PREMUL_SUM`` op (a float, or a scalar tensor), None for any other op.

    ``op`` is what a collective was given (``dist.ReduceOp.SUM``, ``dist.ReduceOp.PREMUL_SUM(0.5)``)
    or what a c10d backend finds in its options (``opts.reduceOp``).
    """
    if op.__class__ is not _ReduceOp or op.op != _PREMUL_SUM:
        return None
    if not hasattr(op, "factor"):
        raise DistError(f"torch {torch.__version__}'s ReduceOp does not give Python the factor of a PREMUL_SUM "
                        f"(2.13 does), so hal cannot serve it on gloo; divide the tensor yourself and use "
                        f"ReduceOp.SUM, or run on a backend whose CCL has PREMUL_SUM")
    return op.factor


@functools.lru_cache(maxsize=None)
def gloo_averages() -> bool:
    """True when this torch's gloo averages with ``ReduceOp.AVG``, measured once per process.

    Two threads form a 2-rank gloo group of their own (an in-process ``HashStore``, the loopback
    device: no other rank and no process group of the job is involved) and reduce-scatter ``[r + 1,
    r + 1]`` with ``AVG`` (``reduce_scatter_tensor``'s path, FSDP2's gradient reduction) and
    all-reduce it: the average is 1.5 on both.  torch 2.7's gloo answers 3.0 (the sum) from the
    reduce-scatter and refuses the all-reduce; 2.13's answers 1.5.  A probe that cannot run (no
    gloo, no loopback device) counts as "does not average": serving ``AVG`` as a premultiplied sum
    is right on every gloo, only not needed on one that averages.
    """
    gloo = getattr(dist, "ProcessGroupGloo", None)
    if gloo is None:
        return False
    store, got = dist.HashStore(), [None, None]

    def rank(r: int) -> None:
        try:
            opts = gloo._Options()
            opts._timeout = datetime.timedelta(seconds=20)
            opts._devices = [gloo.create_device(hostname="127.0.0.1")]
            pg = gloo(store, r, 2, opts)
            rs = dist.ReduceScatterOptions()
            rs.reduceOp = _AVG
            out = torch.empty(1)
            pg._reduce_scatter_base(out, torch.full((2,), float(r + 1)), rs).wait()
            ar = dist.AllreduceOptions()
            ar.reduceOp = _AVG
            t = torch.full((1,), float(r + 1))
            pg.allreduce([t], ar).wait()
            got[r] = (out.item(), t.item())
        except Exception:  # noqa: BLE001 - refused op, no device: "does not average"
            got[r] = None

    threads = [threading.Thread(target=rank, args=(r,), name=f"hal-gloo-avg-probe-{r}", daemon=True)
               for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return got == [(1.5, 1.5), (1.5, 1.5)]


def premultiplied(tensor: torch.Tensor, factor: Factor, in_place: bool) -> torch.Tensor:
    """``tensor`` multiplied by ``factor`` (in place, or a new tensor), as a rank's input to a
    ``PREMUL_SUM`` is before the sum; a tensor factor is read on ``tensor``'s device.

    :raises DistError: for a tensor that is not floating point or complex (NCCL's premul-sum takes
        half, bfloat16, float and double alone, so a script that runs here runs on NCCL).
    """
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise DistError(f"ReduceOp.PREMUL_SUM on a {tensor.dtype} tensor: the factor multiplies "
                        f"floating-point data only (NCCL's premul-sum takes float16, bfloat16, float32 "
                        f"and float64); reduce a floating-point tensor, or multiply it yourself and use "
                        f"ReduceOp.SUM")
    if isinstance(factor, torch.Tensor) and factor.device != tensor.device:
        factor = factor.to(tensor.device)
    return tensor.mul_(factor) if in_place else tensor * factor


def _premultiplied_all(operand, factor: Factor, in_place: bool):
    if isinstance(operand, torch.Tensor):
        return premultiplied(operand, factor, in_place)
    return [premultiplied(t, factor, in_place) for t in operand]


def reaches_gloo(group, device: torch.device) -> bool:
    """True when a collective on ``group`` (None: the default group) with tensors on ``device``
    runs in gloo: a group of torch's own ``ProcessGroup`` class whose backend for that device type
    is gloo.  A Python c10d group serves its own ops (False)."""
    group = dist.group.WORLD if group is None else group
    if type(group) is not dist.ProcessGroup:
        return False
    try:
        backend = group._get_backend(device)  # torch 2.13: the c10d backend serving that device type
    except RuntimeError:
        return False
    gloo = getattr(dist, "ProcessGroupGloo", None)
    return gloo is not None and isinstance(backend, gloo)


def _wrap(fn: Function, orig: Callable) -> Callable:
    sig = inspect.signature(orig)
    names = list(sig.parameters)
    missing = [p for p in ("op", "group", fn.operand) if p not in names]
    if missing:
        raise DistError(f"torch.distributed.{fn.name}{sig}: no parameter {', '.join(missing)} (hal checked "
                        f"torch 2.13); hal cannot serve ReduceOp.PREMUL_SUM on gloo for this torch: report "
                        f"it with the torch version")
    op_at = names.index("op")

    def serve(args, kwargs, op):
        average = op == _AVG and not gloo_averages()
        factor = None if average else premul_sum_factor(op)
        if factor is None and not average:
            return orig(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        a = bound.arguments
        operand = a[fn.operand]
        first = operand if isinstance(operand, torch.Tensor) else next(iter(operand), None)
        if first is None or not reaches_gloo(a.get("group"), first.device):
            return orig(*args, **kwargs)
        if average:
            if not (first.is_floating_point() or first.is_complex()):
                raise DistError(f"ReduceOp.AVG on a {first.dtype} tensor over gloo: torch {torch.__version__}'s "
                                f"gloo does not average (its reduce_scatter_tensor sums; 2.13's averages) and "
                                f"hal serves AVG there on floating-point data only; reduce with ReduceOp.SUM "
                                f"and divide by the group size yourself")
            factor = 1.0 / dist.get_world_size(a.get("group"))
        a[fn.operand] = _premultiplied_all(operand, factor, fn.in_place)
        a["op"] = _ReduceOp.SUM
        return orig(*bound.args, **bound.kwargs)

    def call(*args, **kwargs):
        op = args[op_at] if len(args) > op_at else kwargs.get("op")
        if op.__class__ is not _ReduceOp:  # SUM, AVG, MAX, ...: the enum, never a PREMUL_SUM
            if op is _AVG and not gloo_averages():  # a gloo that sums instead (torch 2.7)
                return serve(args, kwargs, op)
            return orig(*args, **kwargs)
        return serve(args, kwargs, op)

    functools.update_wrapper(call, orig)
    setattr(call, MARK, orig)
    return call


def install(patch: Callable[[object, str, object], None]) -> List[str]:
    """Wrap each of :data:`FUNCTIONS` in ``torch.distributed`` with ``patch(owner, name, value)``
    (the caller's undo stack); nothing when hal's wrappers are there already.

    :return: the names wrapped.
    :raises DistError: when a function every torch of hal's window has is missing or has lost a
        parameter the wrapper reads (torch moved it: fail here rather than serve it wrongly).
    """
    if getattr(dist.all_reduce, MARK, None) is not None:
        return []
    plan = []
    for fn in FUNCTIONS:
        orig = getattr(dist, fn.name, None)
        if orig is None:
            if fn.required:
                raise DistError(f"torch.distributed.{fn.name} is missing (hal checked torch 2.13); hal cannot "
                                f"serve ReduceOp.PREMUL_SUM on gloo for this torch: report it with the "
                                f"torch version")
            continue
        plan.append((fn.name, _wrap(fn, orig)))
    for name, wrapper in plan:  # all checked first: nothing is patched when one is refused
        patch(dist, name, wrapper)
    return [name for name, _ in plan]


class _Installed:
    """The wrappers :func:`hal.dist.init` put in place, undone by :func:`hal.dist.destroy`."""

    def __init__(self):
        self.undo: List[Tuple[str, Callable]] = []

    def patch(self, owner, name: str, value) -> None:
        self.undo.append((name, getattr(owner, name)))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Put torch's functions back, last first; a name something else has wrapped since keeps
        that wrapper (it ends by restoring hal's, which passes every call on as torch's would)."""
        while self.undo:
            name, orig = self.undo.pop()
            if getattr(getattr(dist, name, None), MARK, None) is orig:
                setattr(dist, name, orig)


INSTALLED = _Installed()
