"""``torch.accelerator`` as the torch window has it: absent before 2.6, raising in 2.6 where no
accelerator is present, answering ``None`` from 2.7.  hal asks through these two calls, so that a
torch without the module (a vendor's 2.4 stack) takes the path of a machine with no other
accelerator instead of an ``AttributeError``."""
from __future__ import annotations

from typing import Optional

import torch


def has_api() -> bool:
    """True where this torch has ``torch.accelerator`` (2.6 and later)."""
    return getattr(torch, "accelerator", None) is not None


def current() -> Optional[torch.device]:
    """The accelerator torch sees (``torch.device``), or ``None``: none present, or this torch has no
    ``torch.accelerator``."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return _compiled_accelerator()
    try:
        try:
            return acc.current_accelerator(check_available=True)
        except TypeError:  # 2.6-2.7: no check_available argument
            return acc.current_accelerator() if acc.is_available() else None
    except RuntimeError:  # 2.6: "Cannot access accelerator device when none is available"
        return None


def _compiled_accelerator() -> Optional[torch.device]:
    """Before torch.accelerator (2.4-2.5): the accelerator this torch was built for (``torch._C._get_accelerator``,
    what vendor bridges of those releases ask too) where its device module sees a device."""
    getter = getattr(torch._C, "_get_accelerator", None)
    if getter is None:
        return None
    acc = getter()
    module = getattr(torch, acc.type, None) if acc.type != "cpu" else None
    available = getattr(module, "is_available", None)
    return acc if available is not None and available() else None


def is_available() -> bool:
    """``torch.accelerator.is_available()``; False on a torch without it."""
    return current() is not None
