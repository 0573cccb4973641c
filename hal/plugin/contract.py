"""Does a vendor package's release have what a plugin calls?  Read from its wheel, never imported.

A vendor package (``torch_npu``, ``torch_mlu``, ...) imports only beside its driver stack (CANN,
CNToolkit), which no CI machine has; but its wheel holds the Python that exposes each function,
and that is enough to check a plugin against a release before a user meets the difference::

    from hal.plugin.contract import check
    problems = check("torch_npu-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", "torch_npu",
                     ["backends/ascend/fused.py"])

What a release *exposes* (:func:`exposed`): every ``package.NAME = ...`` assignment in its sources
(torch_npu binds its ops so, ``torch_npu.npu_rms_norm = torch.ops.npu.npu_rms_norm``), every
top-level ``def`` / assignment of the package's ``__init__.py`` and the names of its ``__all__``;
with each op's schema where the release ships it in PyTorch's ``native_functions.yaml`` format
(``func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)``): its
parameters, positional and keyword-only.  What a plugin *calls* (:func:`calls`): each
``vendor_attr("package", "NAME")(positional..., keyword=...)`` in its source.
"""
from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union


@dataclass
class Call:
    """One call of a vendor function in a plugin's source."""

    name: str
    positional: int
    keywords: Tuple[str, ...]
    where: str


@dataclass
class Exposed:
    """What a release exposes: names, and the schema of those it declares in a functions yaml."""

    names: set = field(default_factory=set)
    #: op -> (positional parameters, keyword-only parameters)
    schemas: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = field(default_factory=dict)


def sources(wheel: Union[str, Path], package: str) -> Dict[str, str]:
    """``{path in the wheel: text}`` of the package's ``.py`` / ``.pyi`` / ``.yaml`` files."""
    prefix = package.replace(".", "/") + "/"
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                if n.startswith(prefix) and n.endswith((".py", ".pyi", ".yaml"))}


def exposed(files: Dict[str, str], package: str) -> Exposed:
    """The names ``package`` exposes at its top level, and parameters where a meta implementation says."""
    out = Exposed()
    init = package.replace(".", "/") + "/__init__.py"
    for path, text in files.items():
        if path.endswith(".yaml"):
            for m in _FUNC.finditer(text):
                out.schemas.setdefault(m.group(1), _parameters(m.group(2)))
            continue
        # ``package.NAME = ...`` at the start of a line (any indentation): a regular expression, not a parse of
        # every file (a release has well over a thousand)
        out.names |= set(re.findall(rf"^[ \t]*{re.escape(package)}\.(\w+)[ \t]*=(?!=)", text, re.M))
        if path == init:
            try:
                out.names |= _top_level(ast.parse(text))
            except SyntaxError:
                pass
    return out


def calls(plugin: Union[str, Path], package: str) -> List[Call]:
    """Each ``vendor_attr(package, NAME)(...)`` call in the plugin's source, with its keywords."""
    path = Path(plugin)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
            inner = node.func
            if (getattr(inner.func, "id", getattr(inner.func, "attr", None)) == "vendor_attr" and len(inner.args) == 2
                    and all(isinstance(a, ast.Constant) for a in inner.args) and inner.args[0].value == package):
                positional = -1 if any(isinstance(a, ast.Starred) for a in node.args) else len(node.args)
                found.append(Call(inner.args[1].value, positional, tuple(k.arg for k in node.keywords if k.arg),
                                  f"{path.name}:{node.lineno}"))
    return found


def check(wheel: Union[str, Path], package: str, plugins: Sequence[Union[str, Path]]) -> List[str]:
    """What the plugins call that the release lacks (a name, a keyword, a positional argument too many):
    one line each, empty when all is there."""
    have = exposed(sources(wheel, package), package)
    release = Path(wheel).name
    problems = []
    for plugin in plugins:
        for c in calls(plugin, package):
            if c.name not in have.names:
                problems.append(f"{c.where}: {package}.{c.name} is not in {release}")
                continue
            schema = have.schemas.get(c.name)
            if schema is None:
                continue  # exposed, no schema shipped: the name is all that can be checked
            positional, keyword_only = schema
            if c.positional > len(positional):
                problems.append(f"{c.where}: {package}.{c.name} takes {len(positional)} positional arguments in "
                                f"{release}, the call passes {c.positional}")
            for kw in c.keywords:
                if kw not in positional + keyword_only:
                    problems.append(f"{c.where}: {package}.{c.name} takes no keyword {kw!r} in {release} "
                                    f"(its parameters: {', '.join(positional + keyword_only)})")
    return problems


#: one schema line of a native_functions.yaml: ``func: NAME[.overload](ARGS) -> RETURNS``
_FUNC = re.compile(r"^\s*(?:-\s*)?func:\s*(\w+)(?:\.\w+)?\((.*)\)\s*->", re.M)


def _parameters(args: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(positional, keyword-only) parameter names of a schema's argument list."""
    positional, keyword_only, after_star = [], [], False
    depth, part, parts = 0, "", []
    for ch in args:  # split at the commas outside brackets (``int[2] size``, ``Tensor(a!) self``)
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    for p in (p.strip() for p in parts):
        if not p:
            continue
        if p == "*":
            after_star = True
            continue
        name = p.split("=")[0].split()[-1]
        (keyword_only if after_star else positional).append(name)
    return tuple(positional), tuple(keyword_only)


def _top_level(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names if a.name != "*"}
    return names
