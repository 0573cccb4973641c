"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


def fsync_dir(path: Union[str, Path]) -> None:
    """fsync a directory so a rename inside it survives a power cut (no-op where unsupported)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Union[str, Path], data: Union[bytes, str], encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode(encoding)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)
    return path
