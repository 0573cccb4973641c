"""The migration checklist of a PyTorch training script, read from its source (nothing is run).

``op_coverage scan train.py --static`` (or :func:`static_scan`) parses each file with
:mod:`ast` and reports, each with ``file:line``, a category, what it is and a concrete fix:
what hal run's redirection will not redirect, CUDA-only libraries with their portable
replacements, custom CUDA code, CUDA/NCCL settings, and the distributed-init, data-loading
and serialization forms (each "works via hal run" or "needs a change").  The facts live in
``op_coverage/data/torch_static_rules.json``; the AST pass is :mod:`op_coverage.torch.static_ast`.

Levels: ``ok`` works via hal run as it is; ``caveat`` runs via hal run but behaves differently
from CUDA; ``change`` needs a code change.  Exit codes as ``scan``: 0 / 3 / 4.
"""
from __future__ import annotations

import ast
import os
import sys
import time
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

from op_coverage.datafiles import read_json
from op_coverage.errors import ScriptNotFound

FORMAT = "op_coverage.torch_static/1"
RULES_FILE = "torch_static_rules.json"
LEVELS = ("ok", "caveat", "change")
#: --fail-on value -> the lowest level that makes the exit code non-zero (scan's names accepted too)
FAIL_ON = {"caveat": "caveat", "change": "change", "never": None,
           "fallback": "caveat", "restriction": "caveat", "unsupported": "change"}
EXIT = {"ok": 0, "caveat": 3, "change": 4}
#: recursion limit while walking one tree (a chain of N binary operators is N levels deep)
DEEP = 20000
#: folders never scanned inside a given folder
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", ".venv", "env", ".tox", ".git",
                       "build", "dist", ".eggs"})


@dataclass(frozen=True)
class Finding:
    """One place in a script: where, which rule, how serious, what it is and how to fix it."""

    file: str
    line: int
    col: int
    rule: str
    category: str
    level: str
    what: str
    fix: str
    code: str
    source: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StaticReport:
    """What :func:`static_scan` returns; ``to_dict()`` is the ``--json`` form."""

    paths: List[str]
    files: List[dict]  # [{"path", "lines", "status"}]; status: scanned / syntax-error / not-utf8 / too-deep
    findings: List[Finding]
    vendors: List[str]
    seconds: float = 0.0
    tool_version: str = ""
    warnings: List[str] = field(default_factory=list)

    def counts(self) -> dict:
        """Findings per level (every level present, zeros included)."""
        out = {lvl: 0 for lvl in LEVELS}
        for f in self.findings:
            out[f.level] += 1
        return out

    def worst(self) -> str:
        return max((f.level for f in self.findings), key=LEVELS.index, default="ok")

    def exit_code(self, fail_on: str = "caveat") -> int:
        """0 when nothing reaches ``fail_on``; 3 for caveats, 4 for needed changes."""
        if fail_on not in FAIL_ON:
            raise ValueError(f"--fail-on {fail_on!r}: unknown; choose one of {', '.join(FAIL_ON)}")
        floor = FAIL_ON[fail_on]
        worst = self.worst()
        if floor is None or LEVELS.index(worst) < LEVELS.index(floor):
            return 0
        return EXIT[worst]

    def to_dict(self, fail_on: str = "caveat") -> dict:
        """The versioned JSON form (schema: ``op_coverage/data/torch_static_report.schema.json``)."""
        by_cat: dict = {}
        for f in self.findings:
            by_cat.setdefault(f.category, {lvl: 0 for lvl in LEVELS})[f.level] += 1
        return {"format": FORMAT, "tool": {"name": "op_coverage", "version": self.tool_version},
                "paths": self.paths, "vendors": self.vendors, "files": self.files,
                "summary": {"files": len(self.files), "findings": len(self.findings), "by_level": self.counts(),
                            "by_category": dict(sorted(by_cat.items()))},
                "findings": [f.to_dict() for f in self.findings], "warnings": self.warnings,
                "seconds": round(self.seconds, 4), "exit_code": self.exit_code(fail_on)}


def load_rules() -> dict:
    """The bundled rules (``op_coverage/data/torch_static_rules.json``), parsed once."""
    return read_json(RULES_FILE)


def python_files(path: Union[str, Path]) -> List[Path]:
    """``path`` itself when it is a file, else every ``*.py`` below it (sorted; caches, virtual
    environments and hidden folders skipped)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ScriptNotFound(f"{path}: no such file or folder; pass a training script (train.py) or a folder "
                             f"of them")
    found = []
    for root, dirs, files in os.walk(p):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found += [Path(root) / f for f in sorted(files) if f.endswith(".py")]
    return found


def _vendor_text(rules: dict, vendors: Sequence[str]) -> dict:
    table = rules["vendors"]
    chosen = [table[v] for v in vendors]
    join = "; ".join
    return {
        "ccl_backends": join(f"{v['c10d_backend']} ({v['vendor']})" for v in chosen if v["c10d_backend"]),
        "ccl_env": join(f"{v['ccl_env_prefix']}* ({v['vendor']} {v['ccl']})" for v in chosen if v["ccl_env_prefix"]),
        "visible_devices": join(f"{' / '.join(v['visible_devices_env'])} ({v['vendor']})" for v in chosen
                                if v["visible_devices_env"]),
        "smi_tools": join(f"{v['management_tool']} ({v['vendor']})" for v in chosen if v["management_tool"]),
        "device_types": "|".join(v["device_type"] for v in chosen),
    }


def resolve_vendors(names: Iterable[str], rules: Optional[dict] = None) -> "tuple[List[str], List[str]]":
    """Vendor keys of the rules' table for ``-t`` names (a key, a device type or a vendor name,
    case-insensitive); returns (keys, names that matched none).  No names: every vendor."""
    rules = rules or load_rules()
    table = rules["vendors"]
    wanted = [n.strip().lower() for name in names for n in name.split(",") if n.strip()]
    if not wanted or "all" in wanted:
        return list(table), []
    keys, unknown = [], []
    for w in wanted:
        base = w.split("-")[0]  # torch profile names: ascend-2.13, mlu-2.4, musa-2.7
        hit = [k for k, v in table.items()
               if {w, base} & {k, v["device_type"], v["c10d_backend"] or "", v["vendor"].lower()}]
        if hit:
            keys += [k for k in hit if k not in keys]
        else:
            unknown.append(w)
    return keys or list(table), unknown


def _read(path: Path) -> "tuple[Optional[str], str]":
    """The source text and a status: ``scanned``, or ``not-utf8`` (decoded as Latin-1)."""
    data = path.read_bytes()
    try:
        import io
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(enc), "scanned"
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("latin-1"), "not-utf8"


def _fill(text: str, fill: dict) -> str:
    """``text`` with ``{ccl_env}``-style placeholders replaced (user code in it keeps its braces)."""
    for k, v in fill.items():
        text = text.replace("{" + k + "}", v)
    return text


def _finding(rule: dict, file: str, line: int, col: int, lines: List[str], fill: dict, what=None, fix=None,
             level=None) -> Finding:
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return Finding(file=file, line=line, col=col, rule=rule["id"], category=rule["category"],
                   level=level or rule["level"], what=_fill(what or rule["what"], fill),
                   fix=_fill(fix or rule["fix"], fill), code=code[:200], source=rule["source"])


def scan_file(path: Path, shown: str, rules: dict, fill: dict, index=None) -> "tuple[dict, List[Finding]]":
    """Findings of one file (``shown`` is the name the report uses)."""
    from op_coverage.torch.static_ast import RuleIndex, scan_tree

    index = index or RuleIndex(rules)
    by_id = index.by_id
    text, status = _read(path)
    lines = text.splitlines()
    findings: List[Finding] = []
    if status == "not-utf8":
        findings.append(_finding(by_id["not-utf8"], shown, 1, 0, lines, fill))
    rule = by_id["syntax-error"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEEP))  # long a + b + ... chains nest one level per term
    try:
        hits = scan_tree(ast.parse(text, filename=shown), index)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None) or 1
        reason = getattr(e, "msg", None) or str(e)
        findings.append(_finding(rule, shown, line, (getattr(e, "offset", None) or 1) - 1, lines, fill,
                                 what=f"SyntaxError: {reason}: {rule['what']}"))
        return {"path": shown, "lines": len(lines), "status": "syntax-error"}, findings
    except RecursionError:
        findings.append(_finding(rule, shown, 1, 0, lines, fill,
                                 what="an expression nested too deeply to scan: the file was not checked",
                                 fix="split the expression (a long chain of + or and), or review this file by hand"))
        return {"path": shown, "lines": len(lines), "status": "too-deep"}, findings
    finally:
        sys.setrecursionlimit(limit)
    for h in hits:
        findings.append(_finding(by_id[h.rule], shown, h.line, h.col, lines, fill, what=h.what, fix=h.fix,
                                 level=h.level))
    return {"path": shown, "lines": len(lines), "status": status}, findings


def static_scan(paths: Union[str, Path, Sequence[Union[str, Path]]], vendors: Iterable[str] = ()) -> StaticReport:
    """Scan training scripts without running them: the migration checklist for hal run.

    :param paths: a ``.py`` file, a folder (every ``*.py`` below it) or a list of either.
    :param vendors: narrow the vendor equivalents named in fixes (``ascend``, ``mlu``,
        ``musa``, ...; ``-t`` on the command line); none: every vendor.
    :returns: a :class:`StaticReport`; findings sorted by file and line.  A file that does not
        parse is one ``syntax-error`` finding (the others are still scanned); a file that is
        not UTF-8 is read as Latin-1 with a ``not-utf8`` finding.
    :raises ScriptNotFound: a path does not exist, or a folder holds no ``.py`` file.
    """
    from op_coverage._version import __version__
    from op_coverage.torch.static_ast import RuleIndex

    start = time.perf_counter()
    rules = load_rules()
    keys, unknown = resolve_vendors(vendors, rules)
    fill = _vendor_text(rules, keys)
    index = RuleIndex(rules)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files, findings = [], []
    for p in paths:
        found = python_files(p)
        if not found:
            raise ScriptNotFound(f"{p}: no .py file in this folder; pass a training script or a folder that "
                                 f"holds some")
        for f in found:
            shown = str(f)
            meta, fs = scan_file(f, shown, rules, fill, index)
            files.append(meta)
            findings += fs
    findings.sort(key=lambda x: (x.file, x.line, x.col, x.rule))
    warnings = [f"-t {u}: no vendor of that name in the static rules; naming every vendor's equivalents"
                for u in unknown]
    return StaticReport(paths=[str(p) for p in paths], files=files, findings=findings, vendors=keys,
                        seconds=time.perf_counter() - start, tool_version=__version__, warnings=warnings)
