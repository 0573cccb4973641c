"""The table of what ``hal run``'s redirection patches: ``hal/data/redirect_targets.json``.

One entry per patch target (``torch.cuda.is_available``, ``torch.Tensor.cuda``,
``torch.utils.data.dataloader.DataLoader.__init__`` ...): ``group``, the part of the shim that patches
it (what each group redirects is in the table's ``groups``), and the torch releases it is patched on:
``since`` (the first checked release that has it; absent: every checked release from the oldest)
and ``until`` (the first checked release that no longer has it; absent: still there in the newest).
``checked_on`` lists the releases the table was checked on: the torch window of
``docs/torch-window.md``.

The table is written from what :func:`collect` finds on each of those releases
(``python scripts/redirect_targets.py``; ``make torch-window`` collects it on every release), so it
says what hal did patch there, not what it means to.  At run time :meth:`Redirection.patch` reads it
to tell a target this torch lacks as expected (a function added in a later release: the call does
not exist to be redirected) from one that moved (hal's table has it on this release: the
redirection silently stops working, which ``hal doctor``'s ``redirect`` check WARNs about);
``tests/unit/test_redirect_targets.py`` walks it on the installed torch.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import torch

from hal.util.data import data_json

TABLE_PATH = Path(__file__).resolve().parents[1] / "data" / "redirect_targets.json"


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """The table (``checked_on``, ``groups``, ``targets``), read once."""
    return data_json("redirect_targets.json")


def release_key(version: str) -> Tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``: a torch release's number, without local or dev tags."""
    nums = re.match(r"(\d+(?:\.\d+)*)", version)
    parts = tuple(int(p) for p in nums.group(1).split(".")) if nums else ()
    return (parts + (0, 0, 0))[:3]


def _patched_on(entry: dict, version: str) -> bool:
    key = release_key(version)
    since, until = entry.get("since"), entry.get("until")
    return (since is None or key >= release_key(since)) and (until is None or key < release_key(until))


def expected(target: str, version: Optional[str] = None) -> Optional[bool]:
    """Whether hal's table has ``target`` patched on torch ``version`` (default: the installed one);
    None when the table does not list it."""
    entry = table()["targets"].get(target)
    return None if entry is None else _patched_on(entry, version or torch.__version__)


def releases(target: str) -> List[str]:
    """The checked torch releases on which ``target`` is patched (empty when the table does not list it)."""
    entry = table()["targets"].get(target)
    return [] if entry is None else [v for v in table()["checked_on"] if _patched_on(entry, v)]


def _span(entry: dict) -> str:
    since, until = entry.get("since"), entry.get("until")
    if since and until:
        return f"torch {since} up to {until} (not included)"
    if since:
        return f"torch {since} and later"
    if until:
        return f"torch before {until}"
    return "every torch release it was checked on"


def absent_reason(target: str, version: Optional[str] = None) -> str:
    """The log's text for a patch target torch ``version`` does not have: absent as expected there,
    or moved (hal's table has it on that release), or one the table does not list."""
    version = version or torch.__version__
    entry = table()["targets"].get(target)
    if entry is None:
        return f"torch {version} has no such attribute: hal leaves it absent"
    if not _patched_on(entry, version):
        return (f"torch {version} has no such attribute (hal redirects it on {_span(entry)}): nothing to "
                f"redirect on this torch")
    return (f"torch {version} has no such attribute, though hal's table has it on {_span(entry)}: moved or "
            f"renamed in this release? hal leaves it absent and does not redirect it; report it with "
            f"`hal doctor --check redirect --json`")


def exists(target: str) -> bool:
    """Whether the installed torch has ``target`` (``torch.cuda.is_available``,
    ``torch.utils.data.dataloader.DataLoader.__init__``): the longest importable module of its name,
    then each attribute after it."""
    import importlib

    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                break
            obj = getattr(obj, attr)
        else:
            return True
        return False
    return False


def walk(redirection) -> Dict[str, List[str]]:
    """Hold the patches ``redirection`` made (or could not) against the table, on the installed torch.

    ``absent_expected``: targets this torch lacks where the table says so; ``absent_moved``: targets
    it lacks though the table has them on this release, or that the table does not list;
    ``undeclared``: torch targets patched that the table does not list (the table holds torch's attributes
    only; the child-process hook on ``multiprocessing`` is not torch's)."""
    targets = table()["targets"]
    patched, absent = list(redirection.patched), list(redirection.not_patched)
    return {"absent_expected": [n for n in absent if expected(n) is False],
            "absent_moved": [n for n in absent if expected(n) is not False],
            "undeclared": [n for n in patched if n.startswith("torch.") and n not in targets]}


def collect(also: Iterable[str] = ()) -> dict:
    """What the redirection patches on the installed torch with the selected backend, by part
    (``patched`` / ``not_patched``: {target: group}), and ``present``: whether this torch has each
    target the table lists or the redirection tried (some parts patch on some backends only, so
    the table is written from the presence of each target, not from one backend's patches); ``also``:
    more target names to say the presence of (those another release's collection found).
    The input of :func:`merge`."""
    from hal.redirect._enable import enable

    with enable() as t:
        sites = dict(t.patch_sites)
        patched, absent = list(t.patched), list(t.not_patched)
        backend = t.backend.name
    try:
        known = set(table()["targets"])
    except OSError:  # no table yet: the first collection writes it
        known = set()
    names = sorted(known | set(patched) | set(absent) | set(also))
    return {"torch": torch.__version__, "backend": backend,
            "patched": {n: sites.get(n, "?") for n in patched},
            "not_patched": {n: sites.get(n, "?") for n in absent},
            "present": {n: (n in patched) or (n not in absent and exists(n)) for n in names}}


def merge(collections: Iterable[dict], groups: Optional[Dict[str, str]] = None,
          known: Optional[Dict[str, dict]] = None) -> dict:
    """The table from :func:`collect`'s results, one or more per torch release (several backends of one
    release are merged; the releases in ascending order become ``checked_on``).  ``groups``: what each
    group redirects, and ``known``: the table's entries in force (their groups are kept for targets no
    collection patched).  A target whose presence a release's collections do not say, or present on
    releases that are not one unbroken run of the checked ones, raises ``ValueError``."""
    by_release: Dict[str, dict] = {}
    for c in collections:
        name = ".".join(map(str, release_key(c["torch"])))
        got = by_release.setdefault(name, {"present": {}, "group": {}})
        for target, there in c.get("present", {}).items():
            got["present"][target] = got["present"].get(target, False) or there
        for target, group in {**c.get("not_patched", {}), **c["patched"]}.items():
            got["group"].setdefault(target, group)
    names = sorted(by_release, key=release_key)
    every = sorted(set().union(*(r["present"] for r in by_release.values())) if by_release else set())
    known = known or {}
    targets = {}
    for target in every:
        on = []
        for release in names:
            there = by_release[release]["present"].get(target)
            if there is None:
                raise ValueError(f"{target}: the collection on torch {release} does not say whether it is there "
                                 f"(collected before the table listed it); run collect on torch {release} again")
            if there:
                on.append(release)
        if not on:
            continue
        first, last = names.index(on[0]), names.index(on[-1])
        if on != names[first:last + 1]:
            raise ValueError(f"{target} is on torch {', '.join(on)} but not on every release between: "
                             f"the table's since/until cannot say so")
        group = next((r["group"][target] for r in by_release.values() if target in r["group"]),
                     known.get(target, {}).get("group", "?"))
        entry = {"group": group[len("hal."):] if group.startswith("hal.") else group}
        if first > 0:
            entry["since"] = names[first]
        if last < len(names) - 1:
            entry["until"] = names[last + 1]
        targets[target] = entry
    used = sorted({e["group"] for e in targets.values()})
    groups = groups or {}
    return {"checked_on": names, "groups": {g: groups.get(g, "") for g in used}, "targets": targets}
