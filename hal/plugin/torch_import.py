"""Why ``import torch`` failed, in one line, when a vendor's device extension is what broke it.

From torch 2.5 ``import torch`` also imports every installed device extension (the ``torch.backends``
entry point: torch_npu 2.14 declares one).  An extension whose vendor runtime is not set up then makes
``import torch`` itself raise ``RuntimeError: Failed to load the backend extension: torch_npu``, its
cause (``ImportError: libhccl.so: cannot open shared object file``) further up the traceback.  hal's
commands answer that with what is installed, what is missing and the fix, from the built-in backends'
facts (their ``module`` and ``runtime``), without importing torch.
"""
from __future__ import annotations

import re
from typing import Optional

_FAILED = re.compile(r"Failed to load the backend extension: ([A-Za-z0-9_.]+)")


def explain(exc: BaseException) -> Optional[str]:
    """The line for ``exc`` raised by ``import torch``, or None when a device extension is not the cause."""
    found = _FAILED.search(str(exc))
    if not found:
        return None
    module = found.group(1).rstrip(".")
    from hal.plugin.probe import ProbeContext, installed_label, runtime_missing

    cause = exc.__cause__ or exc.__context__
    why = f" ({type(cause).__name__}: {str(cause).strip().splitlines()[0]})" if cause and str(cause).strip() else ""
    line = f"import torch failed: it loads the installed device extension {installed_label(module)} and that failed{why}"
    runtime = _runtime_of(module)
    missing = runtime_missing(runtime, ProbeContext.without_torch()) if runtime else None
    if missing:
        line += f"; {missing}"
    return line + "; or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to use torch without it"


def _runtime_of(module: str) -> Optional[dict]:
    """The ``runtime`` fact of the built-in backend whose vendor module is ``module``."""
    from hal.plugin.facts import backend_facts, backend_folders

    for name in backend_folders():
        facts = backend_facts(name)
        if facts.get("spec", {}).get("module") == module and facts.get("runtime"):
            return dict(facts["runtime"])
    return None
