"""The emulated device's op trace: every aten op that reaches it, as a vendor kernel receives it.

Recorded in C++ from the dispatcher's RecordFunction callbacks (``hal/emu/csrc/aten_trace.cpp``):
calls on emu tensors, or with an emu device argument, whose kernel on the device is not
torch's CompositeImplicitAutograd decomposition (those decompose above the device; their
pieces arrive one by one).  A call made while another device call runs (the pieces of a
CompositeExplicitAutograd kernel such as ``_to_copy``) is counted as nested under its parent,
so top-level counts are what a dispatch mode at the Python key sees.  hal's own calls
(:func:`hal.emu.uncounted`) are not recorded.  No tensor data is kept.
"""
from __future__ import annotations

import re
import threading
from typing import Dict, List, Optional

from hal.emu import _dispatch


class DeviceOpTrace:
    """Start with :meth:`start`, read :meth:`rows`, end with :meth:`stop` (one at a time)."""

    def __init__(self) -> None:
        self._first: Dict[str, str] = {}
        self._lock = threading.Lock()

    def _first_seen(self, op: str) -> None:
        from hal.util.frames import torch_context, user_site
        try:
            site = user_site(1)
        except ValueError:  # a thread torch started: no Python frame above this one
            site = None
        site = site or _forward_site() or f"<{torch_context()}>"
        with self._lock:
            self._first.setdefault(op, site)

    def start(self) -> "DeviceOpTrace":
        """Clear and start recording (the emulator must be the selected backend)."""
        _native().trace_start(self._first_seen)
        return self

    def stop(self) -> None:
        """Stop recording; the rows stay readable."""
        _native().trace_stop()

    @staticmethod
    def optimizer_step(inside: bool) -> None:
        """Ops between ``optimizer_step(True)`` and ``optimizer_step(False)`` are the optimizer's."""
        _native().trace_set_optimizer(inside)

    def rows(self) -> List[dict]:
        """One dict per op: ``op`` (overload name, e.g. ``add.Tensor``), ``count`` (top-level
        calls), ``nested`` (calls made inside another device op, by ``parents``), ``phases``
        (forward: everything outside backward and the optimizer step; backward; optimizer),
        ``dtypes``, ``first_frame`` (the user's ``file:line``; for the backward pass the line that
        made the autograd node when anomaly mode is on, else the node's name)."""
        out = []
        for r in _native().trace_rows():
            out.append({"op": r["op"], "count": r["top"], "nested": r["nested"],
                        "parents": dict(sorted(r["parents"].items())),
                        "dtypes": sorted({torch_dtype_name(d) for d in r["dtypes"]}),
                        "phases": {"forward": r["forward"], "backward": r["backward"],
                                   "optimizer": r["optimizer"]},
                        "first_frame": self._first.get(r["op"])})
        return out


#: c10 ScalarType names -> torch's dtype names (torch.float32 -> "float32")
_C10 = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
        "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
        "ComplexHalf": "complex32", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
        "UInt16": "uint16", "UInt32": "uint32", "UInt64": "uint64"}


def torch_dtype_name(c10_name: str) -> str:
    """``"float32"`` for c10's ``"Float"`` (the name ``torch.float32`` prints without ``torch.``)."""
    return _C10.get(c10_name, c10_name.lower())


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _forward_site() -> Optional[str]:
    """For an op of the backward pass: ``file:line (backward of Node)``, the user's line that made
    the autograd node, when anomaly mode recorded it (``torch.autograd.set_detect_anomaly``)."""
    import torch

    from hal.util.frames import is_internal_file, short_path
    node = torch._C._current_autograd_node() if hasattr(torch._C, "_current_autograd_node") else None
    if node is None:
        return None
    stack = (getattr(node, "metadata", None) or {}).get("traceback_") or []
    for entry in reversed(stack):
        m = _FRAME.search(entry)
        if m and not is_internal_file(m.group(1)):
            return f"{short_path(m.group(1))}:{m.group(2)} (backward of {node.name()})"
    return None


def _native():
    if _dispatch._C is None:
        from hal._errors import HalError
        raise HalError("the op trace records the emulated device: select it first "
                       "(HAL_BACKEND=emu, then import hal)")
    return _dispatch._C
