"""The transfer log: each redirection once, each call that could not be redirected once."""
from __future__ import annotations

import logging
import threading
from typing import Dict, List

LOGGER = logging.getLogger("hal.transfer")


class TransferLog:
    """What a transfer redirected (``redirected``) and what it could not (``not_redirected``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: Dict[str, dict] = {}

    def _add(self, kind: str, what: str, detail: str) -> None:
        with self._lock:
            rec = self._seen.get(what)
            if rec is not None:
                rec["count"] += 1
                return
            self._seen[what] = {"kind": kind, "call": what, "detail": detail, "count": 1}
        LOGGER.warning("%s: %s -> %s", "redirected" if kind == "redirected" else "NOT redirected",
                       what, detail)

    def redirected(self, what: str, detail: str) -> None:
        self._add("redirected", what, detail)

    def not_redirected(self, what: str, detail: str) -> None:
        self._add("not_redirected", what, detail)

    def rows(self, kind: str) -> List[dict]:
        with self._lock:
            return [dict(r) for r in self._seen.values() if r["kind"] == kind]
