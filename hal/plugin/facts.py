"""The built-in backends' facts, each read from that backend's folder in the plugin package.

Every built-in backend has one folder in ``hal_backends`` (the source tree's ``backends/``)
holding all of its facts; the folder's name is the backend's name, and its ``backend.json``
is what marks it (schema ``hal/data/backend.schema.json``)::

    backends/ascend/           the plugin hal_backends.ascend (__init__.py) and its adapters (fused.py)
        backend.json           spec, vendor markers, fused kernels, version matrices, peak FLOP/s
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
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from importlib import resources
from typing import Dict, List, Optional

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


#: dtype names a caller may give -> the names of ``peak_flops`` figures (torch's own names pass as they are)
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
                  "tensorfloat32": "tf32", "fp8": "float8"}


def flops_dtype(dtype) -> str:
    """The name ``peak_flops`` figures give ``dtype`` (a ``torch.dtype`` or a name): bfloat16, float16, float32,
    tf32 (float32 products run in TensorFloat32), float8 (every ``float8_*`` format), int8."""
    name = str(dtype).lower()
    name = name[len("torch."):] if name.startswith("torch.") else name
    name = _DTYPE_ALIASES.get(name, name)
    return "float8" if name.startswith("float8") else name


@dataclass(frozen=True)
class PeakFlops:
    """A device's dense peak for one dtype, from its backend's facts (:func:`builtin_peak_flops`).

    ``flops`` (FLOP/s, without sparsity) is None where there is no such fact, and ``why`` then says which
    one is missing; ``device`` is the product the fact names, ``source`` the vendor page it comes from."""

    backend: str
    device_name: Optional[str]
    dtype: Optional[str]
    flops: Optional[float] = None
    device: Optional[str] = None
    source: Optional[str] = None
    why: str = ""


def builtin_peak_flops(backend: str, device_name: Optional[str], dtype) -> PeakFlops:
    """The dense peak FLOP/s of the device named ``device_name`` -- as its vendor's torch module reports it
    (``torch.cuda.get_device_name()``, ``torch.npu.get_device_name()``) -- for products in ``dtype`` (see
    :func:`flops_dtype`), from the built-in ``backend``'s backend.json ``peak_flops``: the first entry one of
    whose ``device_names`` patterns (fnmatch, case-sensitive) matches.

    Never raises for a missing fact: ``flops`` is None and ``why`` names what is missing (the device name,
    the dtype, the backend's facts, an entry for the device, its figure for the dtype)::

        builtin_peak_flops("cuda", "NVIDIA H100 80GB HBM3", torch.bfloat16).flops   # 989.4e12
    """
    dtype = flops_dtype(dtype) if dtype is not None else None
    out = dict(backend=backend, device_name=device_name, dtype=dtype)
    if not device_name:
        return PeakFlops(**out, why="the device's name is unknown (the run's records do not name it)")
    if dtype is None:
        return PeakFlops(**out, why="the dtype the matrix products ran in is unknown (none was seen in the "
                                    "counted step)")
    try:
        entries = backend_facts(backend).get("peak_flops", [])
    except KeyError:
        return PeakFlops(**out, why=f"{backend!r} is not a built-in backend: hal holds no facts of its devices")
    where = f"{backend_folders()[backend]}/{FACTS_FILE}"
    if not entries:
        return PeakFlops(**out, why=f"{where} holds no peak FLOPs of any {backend} device")
    entry = next((e for e in entries if any(fnmatchcase(device_name, p) for p in e["device_names"])), None)
    if entry is None:
        known = ", ".join(e["device"] for e in entries)
        return PeakFlops(**out, why=f"no peak FLOPs fact for {device_name!r} in {where} (it has: {known})")
    figure = entry["dense_tflops"].get(dtype)
    if figure is None:
        return PeakFlops(**out, device=entry["device"], source=entry["source"],
                         why=f"{where} gives {entry['device']} no {dtype} figure (it gives: "
                             f"{', '.join(entry['dense_tflops'])})")
    return PeakFlops(**out, flops=float(figure) * 1e12, device=entry["device"], source=entry["source"])
