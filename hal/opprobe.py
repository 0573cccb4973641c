"""Observed op support of a device: run each op of a list, compare with the CPU, classify.

``native``   ran on the device, matched the CPU, no fallback was signalled;
``fallback`` matched the CPU but the stack signalled a fallback while running it (the
             emulator's :class:`hal.emu.FallbackWarning`, or a vendor warning such as
             MPS's "will fall back to run on the CPU");
``failing``  raised, or gave a result that differs from the CPU beyond tolerance.

The same call a vendor runs on real hardware to produce its profile (``hal probe``).
"""
from __future__ import annotations

import datetime
import re
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

#: float32 tolerance against the CPU: loose enough for TF32 convolutions and reordered
#: reductions on accelerators, tight enough to catch a wrong kernel
RTOL, ATOL = 1e-3, 1e-4
_FALLBACK_RE = re.compile(r"fall(s|ing)?[ -]?back|fallback|run on the CPU", re.IGNORECASE)


def _x(*shape, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g)
    return t.abs() + 0.1 if positive else t


#: name -> (inputs on the CPU, function of those inputs); names are the user-facing ops
CASES: Dict[str, Tuple[Callable[[], tuple], Callable]] = {
    "add": (lambda: (_x(4, 5), _x(4, 5, seed=1)), torch.add),
    "mul": (lambda: (_x(4, 5), _x(4, 5, seed=1)), torch.mul),
    "div": (lambda: (_x(4, 5), _x(4, 5, seed=1, positive=True)), torch.div),
    "exp": (lambda: (_x(4, 5),), torch.exp),
    "rsqrt": (lambda: (_x(4, 5, positive=True),), torch.rsqrt),
    "erf": (lambda: (_x(4, 5),), torch.erf),
    "lgamma": (lambda: (_x(4, 5, positive=True),), torch.lgamma),
    "sum": (lambda: (_x(4, 5),), lambda a: a.sum(dim=1)),
    "mean": (lambda: (_x(4, 5),), lambda a: a.mean()),
    "amax": (lambda: (_x(4, 5),), lambda a: a.amax(dim=0)),
    "cumsum": (lambda: (_x(4, 5),), lambda a: a.cumsum(1)),
    "matmul": (lambda: (_x(4, 8), _x(8, 3, seed=1)), torch.matmul),
    "bmm": (lambda: (_x(2, 4, 8), _x(2, 8, 3, seed=1)), torch.bmm),
    "linear": (lambda: (_x(4, 8), _x(3, 8, seed=1), _x(3, seed=2)), F.linear),
    "relu": (lambda: (_x(4, 5),), F.relu),
    "gelu": (lambda: (_x(4, 5),), F.gelu),
    "silu": (lambda: (_x(4, 5),), F.silu),
    "softmax": (lambda: (_x(4, 5),), lambda a: F.softmax(a, dim=-1)),
    "log_softmax": (lambda: (_x(4, 5),), lambda a: F.log_softmax(a, dim=-1)),
    "layer_norm": (lambda: (_x(4, 8),), lambda a: F.layer_norm(a, (8,))),
    "conv2d": (lambda: (_x(1, 2, 6, 6), _x(3, 2, 3, 3, seed=1)), F.conv2d),
    "max_pool2d": (lambda: (_x(1, 2, 6, 6),), lambda a: F.max_pool2d(a, 2)),
    "embedding": (lambda: (torch.tensor([0, 2, 1]), _x(4, 3)), F.embedding),
    "cross_entropy": (lambda: (_x(4, 5), torch.tensor([0, 1, 4, 2])), F.cross_entropy),
    "sort": (lambda: (_x(4, 5),), lambda a: torch.sort(a, dim=1).values),
    "topk": (lambda: (_x(4, 5),), lambda a: torch.topk(a, 2).values),
    "index_select": (lambda: (_x(4, 5), torch.tensor([0, 3])), lambda a, i: a.index_select(0, i)),
    "where": (lambda: (_x(4, 5), _x(4, 5, seed=1)), lambda a, b: torch.where(a > 0, a, b)),
    "scaled_dot_product_attention": (lambda: (_x(1, 2, 4, 8), _x(1, 2, 4, 8, seed=1), _x(1, 2, 4, 8, seed=2)),
                                     F.scaled_dot_product_attention),
}


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    return obj


def _cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_cpu(o) for o in obj)
    return obj


def probe_op(name: str, device: torch.device) -> dict:
    """Run one op of :data:`CASES` on ``device``; ``{"status", "detail"}``."""
    make, fn = CASES[name]
    inputs = make()
    expected = fn(*inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = _cpu(fn(*(_to(i, device) for i in inputs)))
        except Exception as exc:  # the op failing is what we are measuring
            return {"status": "failing", "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    try:
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    except AssertionError as exc:
        return {"status": "failing", "detail": "result differs from the CPU: " + str(exc).splitlines()[0]}
    fell = [str(w.message) for w in caught if _FALLBACK_RE.search(str(w.message))]
    if fell:
        return {"status": "fallback", "detail": fell[0][:200]}
    return {"status": "native", "detail": "ran on the device and matched the CPU"}


def probe_ops(backend, names: Optional[Sequence[str]] = None, progress=None) -> dict:
    """The observed op-support profile of ``backend`` (schema ``hal.op_profile/1``).

    :param backend: a loaded :class:`hal.backend.Backend`.
    :param names: ops of :data:`CASES` to run (default: all).
    :param progress: optional callable wrapping the iterable of names (e.g. tqdm).
    """
    names = list(names or CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; known ops: {', '.join(CASES)}")
    device = backend.device()
    ops = {}
    for name in (progress(names) if progress else names):
        if backend.device_type == "emu":
            from hal.emu import reset_fallback_report
            reset_fallback_report()  # so each op's first fallback warns again
        ops[name] = probe_op(name, device)
    counts = {s: sum(1 for r in ops.values() if r["status"] == s) for s in ("native", "fallback", "failing")}
    return {
        "schema": "hal.op_profile/1", "backend": backend.name, "device_type": backend.device_type,
        "device": str(device), "torch": torch.__version__,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "provenance": "live probe (hal probe): each op run on the device and compared with the CPU",
        "summary": counts, "ops": ops,
    }
