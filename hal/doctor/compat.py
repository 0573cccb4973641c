"""Are the installed driver / runtime / torch / vendor-extension versions a known-good combination?

Facts live in each built-in backend's ``backend.json`` (``compat``; see :mod:`hal.plugin.facts`),
and in ``hal/data/compat.json`` for matrices of no single backend; each row has its source.  The tables are
incomplete, so a pair that is not listed is reported as ``not listed`` (WARN at most);
only a combination the vendor documents as unusable (a driver older than the CUDA
runtime's minimum) is a FAIL.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from hal.plugin.facts import FACTS_FILE, backend_facts, backend_folders
from hal.util.data import data_json


SHARED = "hal/data/compat.json"


@lru_cache(maxsize=None)
def matrices() -> Dict[str, dict]:
    """``{matrix id: matrix}``: those of ``hal/data/compat.json``, then each built-in backend's; every
    matrix carries ``file``, the file it was read from."""
    found = [(SHARED, m) for m in data_json("compat.json")["matrices"]]
    for name, folder in backend_folders().items():
        found += [(f"{folder}/{FACTS_FILE}", m) for m in backend_facts(name).get("compat", ())]
    out: Dict[str, dict] = {}
    for where, m in found:
        if m["id"] in out:
            raise RuntimeError(f"version matrix {m['id']!r} is in both {out[m['id']]['file']} and {where}; "
                               "give one of them another id")
        out[m["id"]] = dict(m, file=where)
    return out


def vtuple(text: str) -> Tuple[int, ...]:
    """Leading numeric parts of a version: ``"2.7.1.post8+cpu"`` → ``(2, 7, 1)``."""
    nums = []
    for part in re.split(r"[.+\-]", str(text).strip().lstrip("v")):
        if not part.isdigit():
            m = re.match(r"^(\d+)", part)
            if m:
                nums.append(int(m.group(1)))
            break
        nums.append(int(part))
    return tuple(nums)


def same_release(a: str, b: str, parts: int = 3) -> bool:
    """True when ``a`` and ``b`` agree on their first ``parts`` numbers (``x`` in b = any)."""
    b = str(b).split("x")[0].rstrip(".")
    ta, tb = vtuple(a), vtuple(b)
    k = min(parts, len(tb))
    return k > 0 and ta[:k] == tb[:k]


def _source(row: dict, matrix: str) -> str:
    s = row.get("source") or {}
    if s.get("repo"):
        return f"{s['repo']} {s.get('path', '')} @{str(s.get('commit') or '')[:8]}".strip()
    return s.get("url", matrices()[matrix]["file"])


def _finding(status: str, message: str, row: Optional[dict] = None, matrix: Optional[str] = None) -> dict:
    return {"status": status, "message": message, "source": _source(row, matrix) if row else None}


def pair(matrix: str, key_col: str, key: str, col: str, installed: str, what: str) -> dict:
    """Compare ``installed`` (column ``col``) with the rows whose ``key_col`` matches ``key``."""
    rows = [r for r in matrices()[matrix]["rows"] if r.get(key_col) and same_release(key, r[key_col], 4)]
    if not rows:
        rows = [r for r in matrices()[matrix]["rows"] if r.get(key_col) and same_release(key, r[key_col], 3)]
    if not rows:
        return _finding("WARN", f"{what}: {key_col} {key} is not listed in {matrix}; "
                                f"compatibility with {col} {installed} is unknown")
    for r in rows:
        vals = r[col] if isinstance(r[col], list) else [r[col]]
        if any(v and same_release(installed, str(v).split(" ")[0], 2 if col in ("torch", "python") and
                                  len(vtuple(str(v))) <= 2 else 3) for v in vals):
            return _finding("OK", f"{what}: {key_col} {key} with {col} {installed} is a listed combination", r, matrix)
    listed = sorted({str(v) for r in rows for v in (r[col] if isinstance(r[col], list) else [r[col]])})
    return _finding("WARN", f"{what}: {key_col} {key} is listed with {col} {', '.join(listed)}, not "
                            f"{installed}; install a listed pair", rows[0], matrix)


def cuda_driver(runtime: str, driver_branch: Optional[str], driver_cuda: Optional[str]) -> List[dict]:
    """CUDA runtime (``torch.version.cuda``) against the driver (``nvidia-smi``) and its CUDA level."""
    out = []
    major = vtuple(runtime)[:1]
    if driver_branch:
        row = next((r for r in matrices()["cuda-minor-version-compat"]["rows"]
                    if vtuple(r["cuda"])[:1] == major), None)
        if row is None:
            out.append(_finding("WARN", f"CUDA {runtime}: no minimum driver listed for this major version"))
        else:
            need = vtuple(row["min_driver_linux"].lstrip(">="))
            have = vtuple(driver_branch)
            ok = have[:1] >= need[:1]
            out.append(_finding("OK" if ok else "FAIL",
                                f"driver {driver_branch} {'meets' if ok else 'is below'} the minimum "
                                f"{row['min_driver_linux']} for CUDA {row['cuda']} runtimes"
                                + ("" if ok else "; update the NVIDIA driver"), row,
                                "cuda-minor-version-compat"))
    if driver_cuda:
        d, r = vtuple(driver_cuda), vtuple(runtime)
        if d[:2] >= r[:2]:
            out.append(_finding("OK", f"driver supports CUDA {driver_cuda} >= torch's CUDA {runtime}"))
        elif d[:1] == r[:1]:
            out.append(_finding("WARN", f"driver supports CUDA {driver_cuda} < torch's CUDA {runtime}: "
                                        f"runs under minor-version compatibility (some features missing); "
                                        f"update the driver"))
        else:
            out.append(_finding("FAIL", f"driver supports CUDA {driver_cuda} but torch needs CUDA {runtime}; "
                                        f"update the driver or install a torch built for CUDA {driver_cuda}"))
    return out


def torch_floor() -> Optional[str]:
    """The oldest torch hal declares (its ``torch>=`` requirement, read from the installed package's metadata:
    the one place it is written, pyproject.toml); None when the metadata is not there."""
    from importlib import metadata

    try:
        requires = metadata.requires("hal") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        m = re.match(r"^torch\s*>=\s*([0-9][0-9.]*)\s*(;|$)", req)
        if m:
            return m.group(1)
    return None


def check(backend_name: str, versions: Dict[str, str]) -> List[dict]:
    """Findings for the selected backend's versions (``torch``, ``runtime``, ``driver``, vendor module)."""
    torch_v = versions.get("torch", "")
    findings: List[dict] = []
    floor = torch_floor()
    if floor and torch_v and vtuple(torch_v) < vtuple(floor):
        findings.append(_finding("FAIL", f"torch {torch_v} is older than hal's floor {floor} (the oldest torch hal "
                                         f"is tested on, docs/torch-window.md): hal needs torch {floor} or newer, "
                                         f"from PyPI or a vendor stack built on it"))
    if backend_name == "cuda" and versions.get("runtime"):
        findings += cuda_driver(versions["runtime"], versions.get("driver_branch"), versions.get("driver"))
    elif backend_name == "ascend" and versions.get("torch_npu"):
        findings.append(pair("torch_npu-torch-cann", "torch_npu", versions["torch_npu"], "torch", torch_v,
                             "torch_npu"))
        if versions.get("cann"):
            findings.append(pair("torch_npu-torch-cann", "torch_npu", versions["torch_npu"], "cann",
                                 versions["cann"], "torch_npu"))
    elif backend_name == "cambricon" and versions.get("torch_mlu"):
        findings.append(pair("torch_mlu-torch-ctr", "torch_mlu", versions["torch_mlu"], "torch", torch_v, "torch_mlu"))
    elif backend_name == "musa" and versions.get("torch_musa"):
        findings.append(pair("torch_musa-torch", "torch_musa", versions["torch_musa"], "torch", torch_v, "torch_musa"))
    elif backend_name == "biren" and versions.get("torch_supa"):
        findings.append(pair("biren-torch_supa", "torch_supa", versions["torch_supa"], "torch", torch_v, "torch_supa"))
    elif backend_name == "enflame" and versions.get("torch_gcu"):
        findings.append(pair("enflame-torch_gcu", "torch_gcu", versions["torch_gcu"], "torch", torch_v, "torch_gcu"))
    elif backend_name == "rocm" and versions.get("runtime"):
        rocm = ".".join(map(str, vtuple(versions["runtime"])[:2])) + ".x"
        findings.append(pair("rocm-pytorch-tested", "rocm", rocm, "torch", torch_v, "ROCm"))
    if not findings:
        findings.append(_finding("OK", f"torch {torch_v}" + (f" with {backend_name} runtime "
                                 f"{versions['runtime']}" if versions.get("runtime") else "") +
                                 ": no version table applies to this backend"))
    return findings
