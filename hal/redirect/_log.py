"""The redirection log: one row per redirection and per call that could not be redirected, at
the user's line that made it, counted.

A row is keyed by (kind, call, where): the same ``.cuda()`` in a training loop is one row
whose count grows; the same call on two lines of the script is two rows, one per place to
look at.  Calls made by torch or hal themselves (no frame of the user's code on the stack)
are not recorded.  New rows are printed through the logger ``hal.redirect`` by the process
that enabled the shim, on rank 0 only (``RANK`` unset or 0); other ranks and worker
processes count silently.

The hot calls (device arguments, ``torch.cuda`` queries, streams and events) record through
:meth:`RedirectLog.at` with the frame that called the shim's function: the first time a call
site is seen its row is found the slow way (the user's frame, its file and line, the call's
text); after that the site is one dictionary lookup keyed by the calling code object and its
instruction offset, with no walk up the stack and no text built.  A call whose caller is torch's
own code (``nn.Linear(..., device="cuda")`` making its weight) is recorded at the user's line
above it, found by a walk each time.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from types import FrameType
from typing import Callable, Dict, List, Optional, Tuple

from hal.util.frames import is_user, short_path, user_site

LOGGER = logging.getLogger("hal.redirect")
KINDS = ("redirected", "not_redirected")
REDIRECTED, NOT_REDIRECTED = KINDS
_getframe = sys._getframe

#: what :meth:`RedirectLog.at` calls on a call site's first sight: ``describe(key) -> (call, detail)``
Describe = Callable[[tuple], Tuple[str, str]]


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def _user_frame_from(f: Optional[FrameType]) -> Optional[FrameType]:
    while f is not None and not is_user(f):
        f = f.f_back
    return f


class RedirectLog:
    """What a redirection redirected (``redirected``) and what it could not (``not_redirected``)."""

    def __init__(self, echo: Optional[bool] = None):
        self._lock = threading.Lock()
        self._rows: Dict[Tuple[str, str, str], dict] = {}
        #: (id of the calling code object, its instruction offset, the call's key) -> the row, for call
        #: sites in the user's code already seen; ``_codes`` keeps those code objects (and so their ids) alive.
        #: The hottest wrappers look here themselves (``row["count"] += 1`` on a hit) and call :meth:`at`
        #: on a miss
        self.sites: Dict[tuple, dict] = {}
        self._codes: List[object] = []
        self._pid = os.getpid()
        #: print new rows through the logger (default: on rank 0 only)
        self.echo = (_rank() == 0) if echo is None else echo

    def _count(self, kind: str, call: str, detail: str, where: str) -> dict:
        key = (kind, call, where)
        with self._lock:
            row = self._rows.get(key)
            if row is not None:
                row["count"] += 1
                return row
            row = self._rows[key] = {"kind": kind, "call": call, "detail": detail, "where": where, "count": 1}
        if self.echo and os.getpid() == self._pid:
            LOGGER.warning("%s: %s %s -> %s", where,
                           "redirected" if kind == REDIRECTED else "NOT redirected", call, detail)
        return row

    def _add(self, kind: str, call: str, detail: str) -> None:
        where = user_site(3)
        if where is None:  # torch's or hal's own call: not the script's doing
            return
        self._count(kind, call, detail, where)

    def at(self, caller: Optional[FrameType], key: tuple, kind: str, describe: Describe) -> None:
        """Record the call ``key`` (a tuple, cheap to build: a label, with the device asked for) made by
        the frame ``caller`` (the frame that called the shim's function; None: look for the user's frame
        from here).  ``describe(key)`` gives the row's call and detail text; it is called only when the
        call site is first seen.  The site's key in :attr:`sites` is
        ``(id(caller.f_code), caller.f_lasti) + key``."""
        if caller is not None:
            row = self.sites.get((id(caller.f_code), caller.f_lasti) + key)
            if row is not None:
                row["count"] += 1  # one dict update, not under the lock: the steady state of a hot call
                return
        self._first_sight(caller if caller is not None else _getframe(2), caller, key, kind, describe)

    def _first_sight(self, start: FrameType, caller: Optional[FrameType], key: tuple, kind: str,
                     describe: Describe) -> None:
        user = start if is_user(start) else _user_frame_from(start.f_back)
        if user is None:  # torch's or hal's own call: not the script's doing
            return
        call, detail = describe(key)
        row = self._count(kind, call, detail, f"{short_path(user.f_code.co_filename)}:{user.f_lineno}")
        if user is caller:  # the user's code called the shim: this site is one lookup from now on
            code = caller.f_code
            site = (id(code), caller.f_lasti) + key
            with self._lock:
                if site not in self.sites:
                    self._codes.append(code)
                    self.sites[site] = row

    def redirected(self, call: str, detail: str) -> None:
        """Record that ``call`` (made by the user's code) now does ``detail``."""
        self._add(REDIRECTED, call, detail)

    def not_redirected(self, call: str, detail: str) -> None:
        """Record that ``call`` has no equivalent on the backend and what happened instead."""
        self._add(NOT_REDIRECTED, call, detail)

    def rows(self, kind: str) -> List[dict]:
        """Rows of one kind (``"redirected"`` or ``"not_redirected"``), in the order first seen:
        ``{"kind", "call", "detail", "where", "count"}``."""
        if kind not in KINDS:
            raise ValueError(f"RedirectLog.rows: unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        with self._lock:
            return [dict(r) for r in self._rows.values() if r["kind"] == kind]
