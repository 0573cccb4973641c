"""Each built-in backend's facts sit in one folder of backends/ (docs/plugins.md, "Where a vendor's facts live")."""
import json
import re
from fnmatch import fnmatchcase
from pathlib import Path

import jsonschema
import pytest

from hal.plugin import facts
from hal.plugin.registry import Registry
from hal.plugin.spec import builtin_spec

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ROOT / "backends"
#: the data files a backend's folder may hold (anything else is a typo or a fact in the wrong place)
KINDS = ("backend.json", "onnx.profile.json", "torch-*.json", "observed-ops.json")


def test_every_backend_json_validates_against_its_schema():
    schema = json.loads((ROOT / "hal" / "data" / "backend.schema.json").read_text())
    files = sorted(BACKENDS.rglob(facts.FACTS_FILE))
    assert len(files) == len(facts.backend_folders())
    for f in files:
        jsonschema.Draft202012Validator(schema).validate(json.loads(f.read_text()))


def test_each_declared_backend_has_the_folder_of_its_plugin():
    reg = Registry(env={"HAL_DISABLE_PLUGIN_AUTOLOAD": "1"})
    folders = facts.backend_folders()
    declared = {c.name: c.plugin for c in reg.candidates()}
    assert set(declared) == set(folders)
    for name, plugin in declared.items():
        # a plugin of one backend is that backend's folder; a plugin of several has one folder per backend
        assert folders[name] in (f"backends/{plugin}", f"backends/{plugin}/{name}"), (name, plugin, folders[name])


def _shipped(rel: str, pattern: str) -> bool:
    """True when setuptools' package-data ``pattern`` (a glob, ``*`` within one folder) takes ``rel``."""
    parts, globs = rel.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(fnmatchcase(p, g) for p, g in zip(parts, globs))


def test_every_data_file_of_the_folders_is_a_known_kind_and_shipped():
    text = (ROOT / "pyproject.toml").read_text()
    globs = re.findall(r'"([^"]+)"', re.search(r"^hal_backends = \[(.*?)\]", text, re.M | re.S).group(1))
    found = 0
    for f in sorted(BACKENDS.rglob("*")):
        if f.is_dir() or f.suffix in (".py", ".pyc"):
            continue
        rel = f.relative_to(BACKENDS).as_posix()
        assert any(fnmatchcase(f.name, k) for k in KINDS), f"backends/{rel}: a backend's folder holds {KINDS} only"
        assert (f.parent / facts.FACTS_FILE).is_file(), f"backends/{rel}: its folder has no {facts.FACTS_FILE}"
        assert any(_shipped(rel, g) for g in globs), f"backends/{rel}: no hal_backends package-data glob {globs} takes it"
        found += 1
    assert found == len(facts.builtin_files("*.json"))


def test_an_unknown_backend_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="'tpu9000' is not a built-in backend.*built-in backends: ascend, biren"):
        builtin_spec("tpu9000")
