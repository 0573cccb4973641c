"""Declaring hal's C callables to ``torch.compile``: calls its graphs hold as they are.

Dynamo traces Python functions by reading their bytecode; a C callable it does not know
breaks the graph (``Unsupported method call``), and ``fullgraph=True`` fails.  hal's C
wrappers (the redirection shim's ``hal._C.DeviceCall`` and friends, ``hal.ops``' ``OpEntry``)
are therefore declared with ``torch.compiler.allow_in_graph`` (public since torch 2.1): dynamo
records the call in its graph, and when the graph is traced further (FakeTensor,
AOTAutograd) the wrapper runs on traced tensors and takes its traced route.
"""
from __future__ import annotations

import sys
import weakref
from typing import Callable

from hal.util.import_hooks import after_import

#: C callables not yet declared (torch._dynamo not imported yet)
_undeclared: "weakref.WeakSet" = weakref.WeakSet()


def _declare_undeclared(_dynamo) -> None:
    import torch

    pending = list(_undeclared)
    _undeclared.clear()
    if pending:
        torch.compiler.allow_in_graph(pending)


def compiled_in_graph(wrapper: Callable) -> Callable:
    """Declare ``wrapper`` (a C callable, weak-referenceable) to ``torch.compile`` as a call its graph
    holds, and return it.

    The declaration waits for the module ``torch._dynamo`` (the only private torch name here, as an
    import to wait for: no public API says whether dynamo is loaded, and importing it costs about a
    second), so a script that never compiles never pays for it.
    """
    if "torch._dynamo" in sys.modules:
        import torch

        torch.compiler.allow_in_graph(wrapper)
        return wrapper
    if not _undeclared:  # the first one waiting: one hook for all of them
        after_import("torch._dynamo", _declare_undeclared)
    _undeclared.add(wrapper)
    return wrapper
