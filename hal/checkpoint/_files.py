"""Crash-safe file commits for checkpoints.

Every file is written under a temporary name in its final folder, fsynced, then renamed;
the sha256 and size are computed while writing (one pass over the bytes).  Tensors are
written in the safetensors format (read back with the ``safetensors`` library, which
executes no code).

``HAL_CHECKPOINT_CRASH_AT=<point>`` makes the saving process kill itself with SIGKILL at
a named point of the commit (see :data:`CRASH_POINTS`); ``HAL_CHECKPOINT_PAUSE_AT=<point>=<file>``
makes it stop there once ``<file>.arm`` exists (its pid written to ``<file>``) so a test can
kill the whole job in the middle of a save.  Both exist to test crash safety and are never set in normal use.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterable, Tuple

import torch

#: points where HAL_CHECKPOINT_CRASH_AT can kill a save, in the order a save passes them
CRASH_POINTS = (
    "tensors-partial",     # half of the tensor bytes written to the temp file
    "tensors-unrenamed",   # tensor temp file complete and fsynced, not yet renamed
    "rank-files",          # every rank file renamed into place, no manifest yet
    "manifest-partial",    # half of manifest.json written to its temp file
    "manifest-committed",  # manifest.json in place, `latest` not yet updated
    "retention",           # while deleting checkpoints beyond keep_last
)
CRASH_ENV = "HAL_CHECKPOINT_CRASH_AT"
#: ``<point>=<file>``: once ``<file>.arm`` exists, the next save to reach ``<point>`` writes
#: its pid to ``<file>`` and stops there (sleeps), so that a test can kill the whole job
#: while a save is half-written
PAUSE_ENV = "HAL_CHECKPOINT_PAUSE_AT"

_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"),
                     ("uint32", "U32"), ("uint64", "U64")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code

CHUNK = 16 << 20


def crash_point(name: str) -> None:
    """SIGKILL this process when ``HAL_CHECKPOINT_CRASH_AT`` names ``name`` (testing only)."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    point, _, marker = os.environ.get(PAUSE_ENV, "").partition("=")
    if point == name and marker and os.path.exists(marker + ".arm") and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(f"{os.getpid()}\n")
        while True:
            time.sleep(3600)


def tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


class _HashingWriter:
    """Writes chunks on the calling thread while one helper thread hashes them in order.

    Both ``write`` and ``sha256.update`` release the GIL, so on two cores the cost is
    about max(write, hash) instead of their sum.
    """

    def __init__(self, f, total: int, crash: str):
        self.f, self.total, self.crash = f, total, crash
        self.sha = hashlib.sha256()
        self.n = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hal-ckpt-sha256") if total > CHUNK else None
        self._futures = []

    def write(self, data) -> None:
        mv = memoryview(data).cast("B")
        for i in range(0, len(mv), CHUNK):
            part = mv[i:i + CHUNK]
            if self._pool is not None:
                self._futures.append(self._pool.submit(self.sha.update, part))
            else:
                self.sha.update(part)
            self.f.write(part)
            self.n += len(part)
            if self.crash and self.n * 2 >= self.total:
                self.f.flush()
                os.fsync(self.f.fileno())
                crash_point(self.crash)
                self.crash = ""
            if len(self._futures) > 4:  # bound the chunks held for hashing
                self._futures.pop(0).result()

    def hexdigest(self) -> str:
        self.close()
        return self.sha.hexdigest()

    def close(self) -> None:
        for fut in self._futures:
            fut.result()
        self._futures.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _commit(path: Path, chunks: Iterable, total: int, partial_point: str,
            unrenamed_point: str = "") -> Tuple[int, str]:
    tmp = tmp_name(path)
    w = None
    try:
        with open(tmp, "wb") as f:
            w = _HashingWriter(f, total, partial_point)
            for c in chunks:
                w.write(c)
            f.flush()
            os.fsync(f.fileno())
            digest = w.hexdigest()
        if unrenamed_point:
            crash_point(unrenamed_point)
        os.replace(tmp, path)
    except BaseException:
        if w is not None:
            w.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return w.n, digest


def _raw_bytes(t: torch.Tensor):
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy()


def write_tensors(path: Path, tensors: Dict[str, torch.Tensor]) -> Dict[str, dict]:
    """Write ``tensors`` (CPU, contiguous) as a safetensors file; return its manifest entry."""
    header, offset = {"__metadata__": {"format": "pt", "writer": "hal.checkpoint"}}, 0
    for name, t in tensors.items():
        if t.dtype not in _DTYPES:
            from hal.checkpoint._errors import CheckpointError
            raise CheckpointError(f"tensor {name!r} has dtype {t.dtype}, which safetensors cannot hold; "
                                  f"convert it to one of {', '.join(str(d) for d in _DTYPES)} before saving")
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    total = 8 + len(head) + offset

    def chunks():
        yield struct.pack("<Q", len(head))
        yield head
        for t in tensors.values():
            yield _raw_bytes(t)

    n, sha = _commit(path, chunks(), total, "tensors-partial", "tensors-unrenamed")
    return {path.name: {"bytes": n, "sha256": sha}}


def write_json(path: Path, doc, partial_point: str = "") -> Dict[str, dict]:
    """Write ``doc`` as JSON (temp name, fsync, rename); return its manifest entry."""
    data = (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode()
    n, sha = _commit(path, [data], len(data), partial_point)
    return {path.name: {"bytes": n, "sha256": sha}}


def sha256_file(path: Path) -> Tuple[int, str]:
    """Size and sha256 of a file, read in chunks."""
    sha, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            sha.update(b)
            n += len(b)
    return n, sha.hexdigest()
