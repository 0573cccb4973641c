"""Python's start-up hook in the processes a ``hal run`` script starts (docs/redirect.md, "Child processes").

``hal run`` puts this folder first on ``PYTHONPATH`` while the script runs.  This file loads
``hal/redirect/_child_start.py`` by its path (importing hal would import torch in every Python
child) and calls its ``start()``, which takes over a child that runs a script file; then it takes
its folder off ``sys.path`` and runs the ``sitecustomize`` it shadows (the user's own, or the
environment's), as Python would have.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, spec):
    from importlib.util import module_from_spec
    module = module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _start() -> None:
    from importlib.util import spec_from_file_location
    path = os.path.join(os.path.dirname(_HERE), "_child_start.py")
    _load("_hal_child_start", spec_from_file_location("_hal_child_start", path)).start()


def _chain() -> None:
    """The ``sitecustomize`` this one shadows, run as Python would have run it."""
    from importlib.machinery import PathFinder
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None:
        _load("sitecustomize", spec)  # in sys.modules in place of this one


try:
    _start()
except Exception as exc:  # noqa: BLE001 - never stop the child's own program from starting
    sys.stderr.write(f"hal run: this child process starts without the redirection: {type(exc).__name__}: {exc}\n")
_chain()
