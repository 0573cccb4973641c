"""What ``ort-live`` learnt from the installed onnxruntime, kept on disk per onnxruntime build.

Importing onnxruntime (numpy with it) costs more than a scan of a large model, and its answer for
one probe model never changes while the same build is installed.  The cache file,
``$XDG_CACHE_HOME/hal/op_coverage/ort-live-<build>.json`` (``~/.cache`` without it), holds the
build's version and providers and one verdict per probe: the SHA-1 of the one-node model's bytes
and the provider list.  ``<build>`` hashes the path, size and modification time of every native
library in ``onnxruntime/capi``, read without importing onnxruntime, so an upgrade, a reinstall or
another environment uses another file.  ``HAL_PROBE_CACHE=0`` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib.util import find_spec

SCHEMA = "op_coverage.ort_live_probes/1"
ENV_OFF = "HAL_PROBE_CACHE"


def build_id() -> str | None:
    """A short hash naming the installed onnxruntime build, or None when there is none."""
    try:
        spec = find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    capi = os.path.join(list(spec.submodule_search_locations)[0], "capi")
    try:
        libs = [e for e in os.scandir(capi) if ".so" in e.name or e.name.endswith((".pyd", ".dll", ".dylib"))]
    except OSError:
        return None
    if not libs:
        return None
    h = hashlib.sha1()
    for e in sorted(libs, key=lambda e: e.name):
        st = e.stat()
        h.update(f"{e.path}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def probe_key(model_bytes: bytes, providers: list[str]) -> str:
    """The cache key of one probe: the one-node model and the providers it was tried on."""
    h = hashlib.sha1(model_bytes)
    h.update(("\n" + ",".join(providers)).encode())
    return h.hexdigest()


class ProbeCache:
    """The cache file of one onnxruntime build; ``runtime`` and ``verdicts`` are empty when it is new."""

    def __init__(self, build: str | None = None):
        self.build = build_id() if build is None else build
        self.runtime: dict = {}  # {"version": ..., "providers": [...]}
        self.verdicts: dict[str, dict] = {}
        self.dirty = False
        self.path = self._path()
        if self.path and os.path.isfile(self.path):
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
                if data.get("schema") == SCHEMA:
                    self.runtime = data.get("runtime") or {}
                    self.verdicts = data.get("verdicts") or {}
            except (OSError, ValueError):
                pass  # an unreadable cache is rebuilt

    def _path(self) -> str | None:
        if os.environ.get(ENV_OFF, "1") == "0" or not self.build:
            return None
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(root, "hal", "op_coverage", f"ort-live-{self.build}.json")

    def put(self, key: str, verdict: dict) -> None:
        self.verdicts[key] = verdict
        self.dirty = True

    def set_runtime(self, runtime: dict) -> None:
        if runtime != self.runtime:
            self.runtime = dict(runtime)
            self.dirty = True

    def save(self) -> None:
        """Write the file (atomically) when something was added; a read-only home is not an error."""
        if not self.dirty or not self.path:
            return
        self.dirty = False
        from hal.util.io import atomic_write
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            atomic_write(self.path, json.dumps({"schema": SCHEMA, "runtime": self.runtime,
                                                "verdicts": self.verdicts}, sort_keys=True))
        except OSError:
            pass
