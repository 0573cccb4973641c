"""A section of the report: its verdict (worst last in :data:`ORDER`), its one-line summary and its figures."""
from __future__ import annotations

PASS, INFO, NOT_CHECKED, FAIL = "pass", "info", "not_checked", "fail"
#: verdicts, best first
ORDER = (PASS, INFO, NOT_CHECKED, FAIL)


def worst(*verdicts: str) -> str:
    """The worst of ``verdicts``."""
    return max(verdicts, key=ORDER.index)


def section(verdict: str, summary: str, **figures) -> dict:
    """A section: ``verdict``, ``summary`` and its figures (the report's schema names them per section)."""
    return {"verdict": verdict, "summary": summary, **figures}
