"""The built-in backends' facts, each read from that backend's folder in the plugin package.

Every built-in backend has one folder in ``hal_backends`` (the source tree's ``backends/``)
holding all of its facts; the folder's name is the backend's name, and its ``backend.json``
is what marks it (schema ``hal/data/backend.schema.json``)::

    backends/ascend/           the plugin hal_backends.ascend (__init__.py) and its adapters (fused.py)
        backend.json           spec, vendor markers, fused kernels, version matrices
        onnx.profile.json      the ONNX profile of the device's toolchain (an op_coverage target)
        torch-2.13.json        a torch op profile, one per torch version
        observed-ops.json      what ``hal probe --out`` observed on the device (the emulator ships one)

A plugin that declares several backends (``cuda_compatible``) has one such folder per
backend beneath its own (``backends/cuda_compatible/metax/``).  Nothing here lists the
backends: the folders are found by walking the package.  Plugins take the ``kernel``
column of the fused kernels (with its ``sizes``, where the kernel wins only at some sizes)::

    VendorPlugin(builtin_spec("ascend"), fused_kernels=builtin_fused_kernels("ascend"))
"""
from __future__ import annotations

import json
from fnmatch import fnmatchcase
from functools import lru_cache
from importlib import resources
from typing import Dict, List

from hal.plugin.kernels import SizedKernel

#: the package of the built-in plugins, whose folders hold the backends' facts
PACKAGE = "hal_backends"
#: how the files are named in messages and origins: their path in the source tree
SHOWN_ROOT = "backends"
#: the file that makes a folder a backend's folder of facts
FACTS_FILE = "backend.json"


@lru_cache(maxsize=1)
def _tree() -> Dict[str, Dict[str, object]]:
    """``{shown folder path: {file name: file}}`` of every folder of the package that holds a backend.json."""
    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:  # hal's core without its built-in plugins: no built-in facts
        return {}
    found: Dict[str, Dict[str, object]] = {}
    todo = [(SHOWN_ROOT, root)]
    while todo:
        shown, folder = todo.pop()
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
        files = {p.name: p for p in entries if p.is_file()}
        if FACTS_FILE in files:
            found[shown] = files
        todo += [(f"{shown}/{p.name}", p) for p in entries if p.is_dir() and not p.name.startswith(("_", "."))]
    names: Dict[str, str] = {}
    for shown in found:
        name = shown.rsplit("/", 1)[-1]
        if name in names:
            raise RuntimeError(f"two folders of facts name backend {name!r}: {names[name]} and {shown}; "
                               "a backend's folder is named after it, so rename one")
        names[name] = shown
    return {names[n]: found[names[n]] for n in sorted(names)}


def backend_folders() -> Dict[str, str]:
    """``{backend name: shown folder path}`` (``"metax": "backends/cuda_compatible/metax"``), by name."""
    return {shown.rsplit("/", 1)[-1]: shown for shown in _tree()}


def builtin_files(pattern: str) -> List[str]:
    """Shown paths of the files matching ``pattern`` (fnmatch on the file name, e.g. ``"torch-*.json"``)
    in every built-in backend's folder, by backend name, then file name."""
    return [f"{shown}/{name}" for shown, files in _tree().items() for name in files if fnmatchcase(name, pattern)]


@lru_cache(maxsize=None)
def read_builtin_json(path: str) -> dict:
    """One JSON file of a backend's folder by its shown path (cached: treat the result as read-only)."""
    folder, _, name = path.rpartition("/")
    files = _tree().get(folder, {})
    if name not in files:
        raise FileNotFoundError(f"{path}: no such file among the built-in backends' facts; "
                                f"the folders are {', '.join(_tree()) or f'none ({PACKAGE} is not importable)'}")
    return json.loads(files[name].read_text(encoding="utf-8"))


def backend_facts(name: str) -> dict:
    """The ``backend.json`` of the built-in backend ``name``.

    Raises KeyError naming the known built-in backends when there is no folder of that name.
    """
    folders = backend_folders()
    if name not in folders:
        raise KeyError(f"{name!r} is not a built-in backend: no folder {SHOWN_ROOT}/.../{name}/ holds a "
                       f"{FACTS_FILE}; built-in backends: {', '.join(folders) or f'none ({PACKAGE} is not importable)'}")
    return read_builtin_json(f"{folders[name]}/{FACTS_FILE}")


@lru_cache(maxsize=1)
def fused_kernel_facts() -> dict:
    """The fused-kernel facts of every built-in backend (vendor function, arguments, source,
    confidence, how the adapter bridges conventions): ``{"backends": {backend: {hal op: entry}},
    "not_declared": {backend: {"op, op": why}}}``, from each folder's backend.json."""
    facts = {n: backend_facts(n) for n in backend_folders()}
    return {"backends": {n: f["fused_kernels"] for n, f in facts.items() if "fused_kernels" in f},
            "not_declared": {n: f["fused_kernels_not_declared"] for n, f in facts.items()
                             if "fused_kernels_not_declared" in f}}


def builtin_fused_kernels(backend: str) -> Dict[str, object]:
    """``{hal op: "module:function"}`` declared for the built-in ``backend`` (empty if none); an
    entry with ``sizes`` (where the kernel beats the torch composition) becomes a
    :class:`hal.plugin.kernels.SizedKernel`."""
    table = fused_kernel_facts()["backends"].get(backend, {})
    return {op: _declared(entry) for op, entry in table.items()}


def _declared(entry: dict):
    sizes = entry.get("sizes")
    if sizes is None:
        return entry["kernel"]
    return SizedKernel(entry["kernel"], forward=sizes.get("forward"), with_grad=sizes.get("with_grad"),
                       measured=sizes.get("measured", ""), when_unset=sizes.get("when_unset"))


def builtin_runtime(backend: str) -> dict:
    """The vendor runtime the built-in ``backend``'s device module needs beside its package (its backend.json
    ``runtime``: ``name``, ``home_env``, ``setup``, ``check``, ``source``); empty when the file declares none."""
    return dict(backend_facts(backend).get("runtime", {}))


def builtin_stack_fact(backend: str, stack: str) -> dict:
    """How ``stack``'s device seam is filled for the built-in ``backend`` (its backend.json
    ``stacks`` entry, e.g. ``{"accelerator": "module:Class" or None, "why": ..., "source": ...}``);
    empty when the file says nothing."""
    return dict(backend_facts(backend).get("stacks", {}).get(stack, {}))
