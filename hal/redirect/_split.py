"""Calls that answer the user's code for the backend and torch's own code with the truth.

A ``torch.cuda`` function replaced under the shim runs the backend's answer when the user's
code (or a third-party library) calls it and torch's own function when torch or hal calls it
(:mod:`hal.util.frames`): torch must keep seeing the truth, or a CUDA build without a driver
sends it into CUDA.  The same rule reports the calls that have no answer on the backend.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

from hal.redirect._core import _INTERNAL, Redirection
from hal.redirect._devices import MARK, marked, native_call
from hal.util.in_graph import compiled_in_graph

_getframe = sys._getframe


#: the attribute of a split function holding its answer for the user's code (:func:`answer_for_user`)
FOR_USER = "__hal_for_user__"


def split(orig: Callable, for_user: Callable, takes_caller: bool = False) -> Callable:
    """A function that runs ``for_user`` for the user's code and ``orig`` for torch's and hal's.
    ``takes_caller``: ``for_user`` takes the calling frame as its first argument (to record the call
    there, :meth:`hal.redirect.RedirectLog.at`, without looking for it again).  Whose code called is one
    lookup by module name (``hal.redirect._core._INTERNAL``); where hal._C has it, the split is its
    ``SplitCall`` (a C call) and only the answer runs Python."""
    split_call = native_call("SplitCall")
    if split_call is not None:
        call = compiled_in_graph(split_call(orig, for_user, _INTERNAL, takes_caller))
    elif takes_caller:
        def call(*args, **kwargs):
            f = _getframe(1)
            if _INTERNAL[f.f_globals.get("__name__")]:
                return orig(*args, **kwargs)
            return for_user(f, *args, **kwargs)
    else:
        def call(*args, **kwargs):
            if _INTERNAL[_getframe(1).f_globals.get("__name__")]:
                return orig(*args, **kwargs)
            return for_user(*args, **kwargs)
    setattr(call, FOR_USER, functools.partial(for_user, None) if takes_caller else for_user)
    return marked(call, orig)


def answer_for_user(fn: Callable) -> Callable:
    """What ``fn`` (a function the shim replaced with :func:`split`, or any other) answers the user's code,
    for hal's parts that answer one call with another's answer (``torch.accelerator`` with ``torch.cuda``'s)."""
    return getattr(fn, FOR_USER, fn)


def patch_split(t: Redirection, owner, name: str, for_user: Callable, takes_caller: bool = False) -> None:
    """Replace ``owner.name`` by :func:`split` of it and ``for_user`` until ``t`` ends."""
    orig = getattr(owner, name, None)
    if orig is None:
        orig = for_user if not takes_caller else functools.partial(for_user, None)
    t.patch(owner, name, split(orig, for_user, takes_caller))


def reporting(t: Redirection, what: str, fn: Callable) -> Callable:
    """``fn``, reported as not redirected (named ``what``) each time the user's code calls it."""
    def call(*args, **kwargs):
        t.log.not_redirected(what, "no equivalent on the selected backend; called torch's own function")
        return fn(*args, **kwargs)
    return call


def report_the_rest(t: Redirection, owner, label: str, defined_in: str = "torch.cuda", skip=()) -> None:
    """Report every public function defined in ``defined_in`` (a module or its submodules)
    that module ``owner`` holds and the shim has not replaced (nor ``skip`` names), when the
    user's code calls it (as ``label.<name>``)."""
    for name, obj in list(vars(owner).items()):
        if (not name.startswith("_") and name not in skip and callable(obj) and not isinstance(obj, type)
                and not getattr(obj, MARK, False) and getattr(obj, "__module__", "").startswith(defined_in)):
            patch_split(t, owner, name, reporting(t, f"{label}.{name}", obj))
