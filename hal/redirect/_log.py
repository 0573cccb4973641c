"""The redirection log: one row per redirection and per call that could not be redirected, at
the user's line that made it, counted.

A row is keyed by (kind, call, where): the same ``.cuda()`` in a training loop is one row
whose count grows; the same call on two lines of the script is two rows, one per place to
look at.  Calls made by torch or hal themselves (no frame of the user's code on the stack)
are not recorded.  New rows are printed through the logger ``hal.redirect`` by the process
that enabled the shim, on rank 0 only (``RANK`` unset or 0); other ranks and worker
processes count silently.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Dict, List, Optional, Tuple

from hal.util.frames import user_site

LOGGER = logging.getLogger("hal.redirect")
KINDS = ("redirected", "not_redirected")


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


class RedirectLog:
    """What a redirection redirected (``redirected``) and what it could not (``not_redirected``)."""

    def __init__(self, echo: Optional[bool] = None):
        self._lock = threading.Lock()
        self._rows: Dict[Tuple[str, str, str], dict] = {}
        self._pid = os.getpid()
        #: print new rows through the logger (default: on rank 0 only)
        self.echo = (_rank() == 0) if echo is None else echo

    def _add(self, kind: str, call: str, detail: str) -> None:
        where = user_site(3)
        if where is None:  # torch's or hal's own call: not the script's doing
            return
        key = (kind, call, where)
        with self._lock:
            row = self._rows.get(key)
            if row is not None:
                row["count"] += 1
                return
            self._rows[key] = {"kind": kind, "call": call, "detail": detail, "where": where, "count": 1}
        if self.echo and os.getpid() == self._pid:
            LOGGER.warning("%s: %s %s -> %s", where,
                           "redirected" if kind == "redirected" else "NOT redirected", call, detail)

    def redirected(self, call: str, detail: str) -> None:
        """Record that ``call`` (made by the user's code) now does ``detail``."""
        self._add("redirected", call, detail)

    def not_redirected(self, call: str, detail: str) -> None:
        """Record that ``call`` has no equivalent on the backend and what happened instead."""
        self._add("not_redirected", call, detail)

    def rows(self, kind: str) -> List[dict]:
        """Rows of one kind (``"redirected"`` or ``"not_redirected"``), in the order first seen:
        ``{"kind", "call", "detail", "where", "count"}``."""
        if kind not in KINDS:
            raise ValueError(f"RedirectLog.rows: unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        with self._lock:
            return [dict(r) for r in self._rows.values() if r["kind"] == kind]
