"""Every hal / op_coverage name the README and docs show imports, and every old path still does (warning).

The docs are what users copy: a module, class or function they name (``hal.checkpoint.Checkpointer``,
``op_coverage.plan.Planner``, ``from hal.plugin.kit import VendorPlugin``) must resolve in this tree.
"""
import importlib
import re
import tomllib
import warnings
from pathlib import Path

import pytest

from hal.util.moved import HAL_MOVED
from op_coverage._moved import MOVED

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: dotted words in the docs that are not Python names
NOT_PYTHON = {
    "hal.backends",  # the entry-point group vendor packages register under
    "op_coverage.elided_bytes",  # a metadata_props key of a weight-free model
}
#: old paths the docs may name as such: they import, with their deprecation warning
DEPRECATED = {*HAL_MOVED, *MOVED, "hal.transfer"}
NAME = re.compile(r"(?<![\w./-])((?:hal|op_coverage)(?:\.[A-Za-z_]\w*)+)(?![\w/-]|\.\w)")
FROM = re.compile(r"^\s*from ((?:hal|op_coverage)[\w.]*) import ([\w, ]+)", re.M)


def _names():
    found = {}
    for page in PAGES:
        text = page.read_text()
        for m in NAME.finditer(text):
            name = m.group(1).rstrip(".")
            after = text[m.end():m.end() + 1]
            if name in NOT_PYTHON or after == "/" or name.endswith((".md", ".py", ".json", ".onnx", ".jsonl")):
                continue
            found.setdefault(name, page.name)
        for m in FROM.finditer(text):
            for item in m.group(2).split(","):
                item = item.strip().split(" as ")[0]
                if item:
                    found.setdefault(f"{m.group(1)}.{item}", page.name)
    return found


NAMES = _names()
#: the packages of pyproject's llmstack extra (read from it): a documented name that needs one resolves only where
#: it is installed
LLMSTACK = tuple(re.match(r"[A-Za-z0-9_.-]+", r).group(0).replace("-", "_") for r in tomllib.loads(
    (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["optional-dependencies"]["llmstack"])


def resolve(name: str):
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name and not ".".join(parts[:i]).startswith(e.name):
                raise  # a dependency of the module is missing: that is a real failure
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_docs_name_something():
    assert len(NAMES) > 50, sorted(NAMES)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_documented_name_imports(name):
    old = any(name == d or name.startswith(d + ".") for d in DEPRECATED)
    try:
        with warnings.catch_warnings():
            if old:
                warnings.simplefilter("ignore", DeprecationWarning)
            resolve(name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in LLMSTACK:
            pytest.skip(f"{name} needs {e.name}, of the llmstack extra (scripts/setup.sh with HAL_SETUP_LLMSTACK=0 "
                        "leaves it out)")
        pytest.fail(f"{NAMES[name]} names {name}, which does not resolve: {e}")
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{NAMES[name]} names {name}, which does not resolve: {e}")


@pytest.mark.parametrize("old,new", sorted({**HAL_MOVED, **MOVED}.items()))
def test_an_old_import_path_still_imports_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {new}")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new  # the module keeps its own identity


def test_hal_transfer_is_hal_redirect_under_its_old_name():
    import sys
    sys.modules.pop("hal.transfer", None)
    with pytest.warns(DeprecationWarning, match="hal.transfer is now hal.redirect"):
        import hal.transfer
    import hal.redirect
    assert hal.transfer.Transfer is hal.redirect.Redirection and hal.transfer.enable is hal.redirect.enable


def test_names_inside_a_moved_package_resolve_to_the_same_module():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("op_coverage.rules.base")
    assert old is importlib.import_module("op_coverage.plan.rules.base")
