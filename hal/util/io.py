"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

Files end up with the mode an ordinary ``open(path, "w")`` would give them (``0o666`` less the
umask), not the ``0o600`` of ``mkstemp``: reports, checkpoints and rewritten models are read by
other users and serving processes.
"""
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


def current_umask() -> int:
    """The process umask, read without changing it where ``/proc`` tells it (Linux >= 4.7)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic, but only where /proc is missing)
    os.umask(mask)
    return mask


def default_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


def give_default_mode(path: Union[str, Path]) -> None:
    """chmod *path* (a temporary file about to be renamed into place) to :func:`default_mode`."""
    os.chmod(path, default_mode())


def move_into_place(src: Union[str, Path], path: Union[str, Path]) -> Path:
    """Rename the finished file *src* (written by a library, e.g. ``onnx.save_model``, in a temporary
    folder beside *path*) to *path*, so that readers see the old file or the whole new one: fsync it,
    give it :func:`default_mode`, rename it, fsync the folder.

    Both must be on one file system (``os.replace`` raises ``OSError`` with ``errno.EXDEV`` otherwise).
    """
    src, path = Path(src), Path(path)
    fd = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    give_default_mode(src)  # onnx writes external data 0600
    os.replace(src, path)
    fsync_dir(path.parent if str(path.parent) else Path("."))
    return path


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
        give_default_mode(tmp)  # mkstemp made it 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)
    return path


def read_jsonl(path, schema: str, written_by: str) -> tuple:
    """``(records, notes)`` of a JSONL file whose records carry ``"schema": schema``.

    A torn last line (its writer killed mid-line) is skipped with a note; any other line
    that is not such a record raises :class:`hal.HalError` naming the line and the writer
    (``written_by``, e.g. "hal.metrics.MetricsLogger") that makes valid files.
    """
    import json

    from hal._errors import HalError

    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HalError(f"{path}: cannot read ({exc.strerror}); pass a file written by {written_by}") from None
    records, notes = [], []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            if i == len(lines):
                notes.append(f"{path}: line {i} is incomplete (the writer stopped mid-line); ignored")
                continue
            raise HalError(f"{path}:{i}: not JSON ({exc}); each line must be one {schema} record") from None
        if not isinstance(rec, dict) or rec.get("schema") != schema:
            found = rec.get("schema") if isinstance(rec, dict) else None
            raise HalError(f"{path}:{i}: not a {schema} record (schema={found!r}); pass a file written by "
                           f"{written_by}")
        records.append(rec)
    return records, notes


def append_jsonl(path: Union[str, Path], record: dict) -> None:
    """Append ``record`` as one JSON line with a single ``write`` (``O_APPEND``: writers on one
    file never interleave within a line), then fsync it (and the folder, for a new file).

    :raises hal.HalError: the file cannot be opened for appending (names it and the fix).
    """
    import json

    from hal._errors import HalError

    path = Path(path)
    line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode("utf-8")
    new = not path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise HalError(f"{path}: cannot open for appending ({exc.strerror}); choose a file in a folder "
                       "you can write to") from None
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(path.parent if str(path.parent) else ".")
