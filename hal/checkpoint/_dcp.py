"""Sharded model and optimizer state (DTensor parameters) through torch.distributed.checkpoint.

A model whose parameters are DTensors (FSDP2 ``fully_shard``, tensor parallel, a 2-D mesh)
is saved in DCP's own format under ``step-N/dcp/``: each rank writes its shards
(files DCP names, e.g. ``__R_0.distcp``, read back with ``torch.load(weights_only=True)``), the
coordinator writes DCP's ``.metadata`` (a pickle, like the small non-tensor items DCP stores).  The
model and optimizer state come from ``torch.distributed.checkpoint.state_dict.get_state_dict`` and go
back with ``set_state_dict``, so DCP reshards them at load for any world size or layout.
hal adds only its commit protocol around DCP's files, through DCP's published seam: a
``FileSystemWriter`` subclass whose ``finish(metadata, results)`` -- called on the coordinator
with every rank's write results, the ones it records in ``.metadata`` -- keeps which files each
rank wrote.  Rank 0 sends each rank that list, every rank fsyncs and hashes (sha256) its own
files, rank 0 lists them all in ``manifest.json`` after every rank is done, and no DCP file is
opened on load before the manifest's checksums matched: a file changed after the save is refused
before any of its pickles is read.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from hal.checkpoint import _dist
from hal.checkpoint._errors import CheckpointError
from hal.checkpoint._files import sha256_file
from hal.util.io import fsync_dir

#: the subfolder of a step folder that holds DCP's files
FOLDER = "dcp"
#: the manifest's ``mode`` of a checkpoint whose model and optimizer state are DCP's
MODE = "dcp"
#: DCP's own metadata file (written by the coordinator, rank 0)
METADATA = ".metadata"


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return DTensor


def is_dtensor(obj) -> bool:
    """True when ``obj`` is a DTensor (a tensor sharded or replicated over a device mesh)."""
    dt = _dtensor_type()
    return dt is not None and isinstance(obj, dt)


def holds_dtensor(model) -> bool:
    """True when ``model`` has at least one DTensor parameter (FSDP2, tensor parallel, 2-D)."""
    dt = _dtensor_type()
    if dt is None or model is None or not hasattr(model, "parameters"):
        return False
    return any(isinstance(p, dt) for p in model.parameters())


def _placements(t) -> str:
    return ", ".join(str(p) for p in t.placements)


def layout(model) -> dict:
    """How ``model``'s parameters are laid out over ranks: the meshes and placements, counted.

    ``{"meshes": [{"shape": [2, 2], "dim_names": ["dp", "tp"], "placements": "Shard(0), Shard(0)",
    "parameters": 2}, ...], "text": "..."}``, for ``hal checkpoint info`` and the resume log line.
    """
    dt = _dtensor_type()
    groups: Dict[tuple, int] = {}
    for p in model.parameters():
        if dt is not None and isinstance(p, dt):
            mesh = p.device_mesh
            key = (tuple(mesh.mesh.shape), tuple(mesh.mesh_dim_names or ()), _placements(p))
        else:
            key = ((), (), "plain tensor (every rank holds it whole)")
        groups[key] = groups.get(key, 0) + 1
    meshes = [{"shape": list(s), "dim_names": list(n), "placements": pl, "parameters": c}
              for (s, n, pl), c in groups.items()]
    return {"meshes": meshes, "text": describe(meshes)}


def describe(meshes: List[dict]) -> str:
    """One line: ``mesh (dp=2, tp=2): 2 parameters [Shard(0), Shard(0)]; ...``."""
    parts = []
    for m in meshes:
        if not m["shape"]:
            parts.append(f"{m['parameters']} parameter(s) {m['placements']}")
            continue
        names = m["dim_names"] or [f"dim{i}" for i in range(len(m["shape"]))]
        dims = ", ".join(f"{n}={s}" for n, s in zip(names, m["shape"]))
        parts.append(f"mesh ({dims}): {m['parameters']} parameter(s) [{m['placements']}]")
    return "; ".join(parts)


def state(model, optimizer=None) -> dict:
    """``{"model": ..., "optimizer": ...}`` as DCP saves and loads them (sharded, FQN keys)."""
    from torch.distributed.checkpoint import state_dict as sd

    if optimizer is None:
        return {"model": sd.get_model_state_dict(model)}
    msd, osd = sd.get_state_dict(model, optimizer)
    return {"model": msd, "optimizer": osd}


def tensors_info(st: dict) -> dict:
    """Global shape, dtype and placements of every model tensor; optimizer tensors counted."""
    dt = _dtensor_type()
    model = {}
    for name, t in st.get("model", {}).items():
        if isinstance(t, torch.Tensor):
            model[name] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                           "placements": _placements(t) if dt is not None and isinstance(t, dt) else "whole"}
    n, nbytes = 0, 0
    for per_param in (st.get("optimizer") or {}).get("state", {}).values():
        for t in per_param.values():
            if isinstance(t, torch.Tensor):
                n += 1
                nbytes += t.numel() * t.element_size()
    return {"model": model, "optimizer_tensors": n, "optimizer_bytes": nbytes,
            "model_bytes": sum(_numel(v["shape"]) * _itemsize(v["dtype"]) for v in model.values())}


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


@contextlib.contextmanager
def _one_process(group):
    """Without a process group, DCP warns that it assumes one process: that is the intent here."""
    with warnings.catch_warnings():
        if group is None:
            # 2.13: "... is disabled, unavailable or uninitialized"; 2.4: "... is unavailable or uninitialized"
            warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")
        yield


def _takes(fn, name: str) -> bool:
    """True where this torch's ``fn`` has the parameter ``name`` (DCP's signatures grow release by release)."""
    import inspect

    return name in inspect.signature(fn).parameters


def _scope(group, fn) -> dict:
    """``process_group`` / ``no_dist`` for DCP's ``save`` / ``load`` (``fn``): ``group`` None is one process.
    torch 2.4's DCP has no ``no_dist``: it works in one process when no process group is initialized, and
    cannot inside a job that has one."""
    import torch.distributed as dist

    if _takes(fn, "no_dist"):
        return {"process_group": group, "no_dist": group is None}
    if group is None and dist.is_available() and dist.is_initialized():
        raise CheckpointError(f"a one-process DCP save or load inside a distributed job is not possible on torch "
                              f"{torch.__version__}: its torch.distributed.checkpoint has no no_dist argument (2.13 "
                              f"has it); run it in a process without a process group")
    return {"process_group": group}


def files_by_rank(results) -> Tuple[Tuple[str, ...], ...]:
    """The files each rank wrote, from the ``results`` DCP hands its writer's ``finish``.

    ``results[r]`` holds rank ``r``'s ``WriteResult`` items; each one's ``storage_data`` is where
    ``FileSystemWriter`` put the item (``relative_path``: the name ``.metadata`` records), so hal
    never guesses DCP's file naming from a pattern.
    """
    out = []
    for r, rank_results in enumerate(results):
        names = set()
        for wr in rank_results:
            name = getattr(getattr(wr, "storage_data", None), "relative_path", None)
            if not isinstance(name, str) or not name:
                raise CheckpointError(
                    f"torch {torch.__version__}: a WriteResult of rank {r} given to FileSystemWriter.finish has "
                    f"no storage_data.relative_path ({type(getattr(wr, 'storage_data', None)).__name__}; each "
                    "item's file name on the torches of docs/torch-window.md), so hal cannot list the files "
                    "torch.distributed.checkpoint wrote; save with a torch of hal's window")
            names.add(name)
        out.append(tuple(sorted(names)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _listing_writer():
    from torch.distributed.checkpoint import FileSystemWriter

    class ListingWriter(FileSystemWriter):
        #: set by ``finish`` on the coordinator only: the files of every rank, by rank
        listed: Optional[Tuple[Tuple[str, ...], ...]] = None
        #: the state given to ``async_save`` is a host copy already (:class:`Staging`); a torch
        #: whose async_save has no async_stager stages through this writer's ``stage``
        staged = False

        def stage(self, state_dict):
            if not self.staged:
                return super().stage(state_dict)
            self.per_thread_copy_ahead = 0  # as FileSystemWriter.stage: the state is in host memory
            return state_dict

        def finish(self, metadata, results) -> None:
            super().finish(metadata, results)
            self.listed = files_by_rank(results)

    return ListingWriter


def _writer(folder: Path):
    """DCP's ``FileSystemWriter`` whose ``finish`` also keeps the files every rank wrote (``.listed``,
    on the coordinator: see :func:`files_by_rank`)."""
    return _listing_writer()(str(folder), sync_files=True)


def _root_error(exc: BaseException) -> BaseException:
    """The first rank's own exception inside a DCP ``CheckpointException``, else ``exc``."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = failures[min(failures)]
        inner = first[0] if isinstance(first, tuple) else first
        if isinstance(inner, BaseException):
            return inner
    return exc


class Pending:
    """A DCP save under way (or done): :meth:`finish` waits, learns this rank's files, hashes them."""

    def __init__(self, folder: Path, rank: int, group, writer, future: Optional[Future] = None,
                 error: Optional[BaseException] = None):
        self.folder, self.rank, self.group, self.writer = folder, rank, group, writer
        self.future, self.error = future, error

    def finish(self) -> Tuple[Dict[str, dict], Optional[tuple]]:
        """``(manifest entries of this rank's DCP files, failure or None)``.

        Collective on the checkpoint group: rank 0 (DCP's coordinator) sends every rank the file
        list its writer's ``finish`` kept, whether or not the save failed, so that every rank
        goes on to the commit's gather.
        """
        if self.future is not None:
            try:
                self.future.result()
            except BaseException as exc:  # DCP raises the same error on every rank
                self.error = exc
            self.future = None
        listed = _dist.broadcast(self.writer.listed if self.rank == 0 else None, self.group)
        if self.error is not None:
            inner = _root_error(self.error)
            err = inner.errno if isinstance(inner, OSError) else None
            text = (f"{inner.strerror} (errno {inner.errno})" if isinstance(inner, OSError) and inner.errno
                    else f"{type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[-1][:300]}")
            return {}, (self.rank, err, f"torch.distributed.checkpoint could not write {self.folder}: {text}")
        if listed is None or self.rank >= len(listed):
            return {}, (self.rank, None, f"torch.distributed.checkpoint finished the save of {self.folder} "
                        f"without listing rank {self.rank}'s files in FileSystemWriter.finish on rank 0 "
                        f"(torch {torch.__version__}), so they cannot be hashed into the manifest; save "
                        "with a torch of hal's window (docs/torch-window.md)")
        try:
            return own_files(self.folder, self.rank, listed[self.rank]), None
        except OSError as exc:
            return {}, (self.rank, exc.errno, f"rank {self.rank} cannot read back {self.folder}: {exc}")


def own_files(folder: Path, rank: int, written) -> Dict[str, dict]:
    """Size and sha256 of the DCP files ``rank`` wrote (``written``, as DCP's ``finish`` listed them;
    rank 0 also DCP's ``.metadata``), fsynced again: durable before the manifest."""
    names = list(written)
    if rank == 0:
        names.append(METADATA)
    out = {}
    for name in names:
        path = folder / name
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        n, sha = sha256_file(path)
        out[f"{FOLDER}/{name}"] = {"bytes": n, "sha256": sha}
    fsync_dir(folder)
    return out


def local_tensors(obj):
    """Every tensor of a state (dicts, lists, tuples), a DTensor as its local shard: what staging copies."""
    dt = _dtensor_type()
    if dt is not None and isinstance(obj, dt):
        yield obj.to_local()
    elif isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from local_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from local_tensors(v)


class HostStage:
    """hal's own copy of this rank's shards in host memory, into buffers kept between saves.

    The path for what DCP's ``DefaultStager`` (:class:`Staging`) does not cover: a torch
    without it -- before 2.9: 2.4.1, 2.6.0 and 2.7.1 of hal's window, whose ``async_save`` would
    otherwise stage through ``FileSystemWriter.stage``, new memory and two copies on every save
    (6x this copy at 192 MiB, torch 2.13), and whose cached form pins memory, which fails on a
    host without an accelerator -- and shards on an accelerator DCP's stager cannot pin host
    memory for (torch 2.13 and 2.14 pin through ``torch.cuda`` only, and warn otherwise: on
    hal's emulated device its copy is pageable, this one pinned).  Figures:
    ``bench/bench_checkpoint_staging.py``, docs/checkpoint.md.  The buffers (pinned when the shard
    lives on an accelerator that allows it) are allocated at the first save and reused, so a save
    copies each shard once, into memory already touched.  The caller must not stage again before DCP has written the
    previous copy (``Checkpointer.save`` waits for the previous save first).  Holds one host
    copy of this rank's shards until :meth:`release`.
    """

    def __init__(self):
        self._buffers: Dict[tuple, torch.Tensor] = {}
        self._devices: set = set()

    def _buffer(self, path: tuple, t: torch.Tensor) -> torch.Tensor:
        buf = self._buffers.get(path)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = None
            if t.device.type != "cpu":
                try:
                    buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                except RuntimeError:  # no pinned memory for this device: plain host memory
                    buf = None
            if buf is None:
                buf = torch.empty(t.shape, dtype=t.dtype)
            self._buffers[path] = buf
        if t.device.type != "cpu":
            self._devices.add(t.device)
        buf.copy_(t.detach(), non_blocking=buf.is_pinned())
        return buf

    def _copy(self, obj, path: tuple):
        dt = _dtensor_type()
        if dt is not None and isinstance(obj, dt):
            # the same global tensor and placements, its local shard now in host memory
            return dt(self._buffer(path, obj.to_local()), obj._spec, requires_grad=False)
        if isinstance(obj, torch.Tensor):
            return self._buffer(path, obj)
        if isinstance(obj, dict):
            return {k: self._copy(v, path + (k,)) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._copy(v, path + (i,)) for i, v in enumerate(obj))
        return copy.deepcopy(obj)  # numbers, strings (param_groups): small, and training may change them

    def stage(self, st: dict) -> dict:
        """A copy of ``st`` whose tensors are this stage's host buffers, filled now."""
        out = self._copy(st, ())
        for dev in self._devices:
            torch.get_device_module(dev.type).synchronize(dev)
        self._devices.clear()
        return out

    def release(self) -> None:
        """Drop the buffers (the next save allocates them again)."""
        self._buffers.clear()


def _default_stager(on_device: bool):
    """``(DCP's DefaultStager, None)`` configured for hal's asynchronous save, or ``(None, why not)``.

    The copy is made before ``stage`` returns (``use_async_staging=False``: ``Checkpointer.save``
    returns once the state is copied, so the loop may change it at once), into ordinary process
    memory (``use_shared_memory=False``: the writer is a thread of this process); pinned memory
    and non-blocking copies only for shards on an accelerator -- with the defaults,
    ``StagingOptions()``, torch 2.13 refuses a host without one (``AssertionError: Non-blocking
    copy requires that the current accelerator is available``).  A stager that warns as it is
    made (torch 2.13, 2.14: it pins through ``torch.cuda`` only, "Ignoring pin_memory flag ...")
    is not used.
    """
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None, (f"torch {torch.__version__}'s torch.distributed.checkpoint.staging has no DefaultStager "
                      "(it came with torch 2.9)")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            stager = DefaultStager(StagingOptions(use_pinned_memory=on_device, use_shared_memory=False,
                                                  use_async_staging=False, use_non_blocking_copy=on_device))
        except (AssertionError, RuntimeError, TypeError) as exc:
            return None, f"DCP's DefaultStager refused the options: {type(exc).__name__}: {exc}"
    if said:
        stager.close()
        return None, f"DCP's DefaultStager: {str(said[0].message).strip()}"
    return stager, None


class Staging:
    """How this rank's shards reach host memory for an asynchronous save; the copy is kept between saves.

    DCP's own ``DefaultStager`` where this torch has one and it can serve the shards (see
    :func:`_default_stager`; on torch 2.13 without an accelerator it copies 192 MiB of FSDP2 and
    AdamW state into the same host memory every save, in 0.7-1.2x HostStage's time; on a busy
    host it costs milliseconds per CPU storage over 32 KiB, which it copies as bytes through
    torch's intra-op threads: docs/checkpoint.md), else :class:`HostStage`, which says when.  Either way the state is copied once into host memory
    that the next save reuses, one host copy of this rank's shards held until :meth:`release`.
    """

    def __init__(self):
        self._host = HostStage()
        self._dcp = None            # DCP's DefaultStager, made at the first save that can use it
        self._on_device: Optional[bool] = None
        #: which stager copied the last save (``"DefaultStager"`` or ``"HostStage"``) and, if HostStage
        #: while torch has a DefaultStager, why
        self.used: Optional[str] = None
        self.why_not_dcp: Optional[str] = None
        #: the host tensors of the last copy (their addresses, to see that a save reuses the memory)
        self.data_ptrs: List[int] = []
        self.nbytes = 0

    def stage(self, st: dict) -> dict:
        """A copy of ``st`` in host memory, made now (the caller may change ``st`` as soon as this returns)."""
        on_device = any(t.device.type != "cpu" for t in local_tensors(st))
        if on_device != self._on_device:  # the first save, or shards that moved
            self.release()
            self._on_device = on_device
            self._dcp, self.why_not_dcp = _default_stager(on_device)
        out = self._dcp.stage(st) if self._dcp is not None else self._host.stage(st)
        self.used = "DefaultStager" if self._dcp is not None else "HostStage"
        host = list(local_tensors(out))
        self.data_ptrs = [t.data_ptr() for t in host]
        self.nbytes = sum(t.numel() * t.element_size() for t in host)
        return out

    def release(self) -> None:
        """Free the host copy (the next save allocates it again)."""
        if self._dcp is not None:
            self._dcp.close()   # after close() a DefaultStager stages no more
        self._dcp, self._on_device = None, None
        self._host.release()
        self.data_ptrs, self.nbytes = [], 0


def _staged_as_is():
    """A DCP stager for a state already copied to host memory (by :class:`Staging`)."""
    from torch.distributed.checkpoint.staging import AsyncStager

    class _AsIs(AsyncStager):
        _synchronize_after_execute = False

        def stage(self, state_dict):
            return state_dict

        def synchronize_staging(self) -> None:
            pass

        def close(self) -> None:
            pass

    return _AsIs()


def start(step_dir: Path, st: dict, rank: int, group, async_save: bool,
          stage: Optional[Staging] = None) -> Pending:
    """Start DCP's save of ``st`` into ``step_dir/dcp`` (collective on ``group``).

    With ``async_save`` the state is staged to host memory now (by ``stage``, or by
    ``dcp.async_save`` itself without one) and the files are written by DCP's thread;
    otherwise written before returning.  Errors are kept in the returned :class:`Pending`,
    so every rank reaches the commit's gather.
    """
    import torch.distributed.checkpoint as dcp

    folder = step_dir / FOLDER
    writer = _writer(folder)
    try:
        folder.mkdir(exist_ok=True)
        if group is None:
            with _one_process(None):
                dcp.save(st, storage_writer=writer, **_scope(None, dcp.save))
            return Pending(folder, rank, group, writer)
        if async_save:
            kw = dict(storage_writer=writer, **_scope(group, dcp.async_save))
            if stage is not None:
                st = stage.stage(st)
                if _takes(dcp.async_save, "async_stager"):
                    kw["async_stager"] = _staged_as_is()
                else:  # torch before async_stager (2.4.1, 2.6.0, 2.7.1): async_save stages through the writer
                    writer.staged = True
            fut = dcp.async_save(st, **kw)
            return Pending(folder, rank, group, writer, future=getattr(fut, "upload_completion", fut))
        dcp.save(st, storage_writer=writer, **_scope(group, dcp.save))
    except BaseException as exc:  # noqa: BLE001 - every rank must reach the commit
        return Pending(folder, rank, group, writer, error=exc)
    return Pending(folder, rank, group, writer)


def load(step_dir: Path, model, optimizer, group) -> None:
    """Read ``step_dir/dcp`` into ``model`` (and ``optimizer``), resharded to their layout now."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint import state_dict as sd

    st = state(model, optimizer)
    try:
        with _one_process(group):
            dcp.load(st, storage_reader=FileSystemReader(str(step_dir / FOLDER)), **_scope(group, dcp.load))
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        inner = _root_error(exc)
        first = (str(inner).strip().splitlines() or [type(inner).__name__])[-1]
        raise CheckpointError(f"{step_dir}: torch.distributed.checkpoint cannot load the sharded state "
                              f"into this model ({type(inner).__name__}: {first[:300]}); build the model "
                              "(and optimizer) with the same parameter names and shapes as when saving"
                              ) from None
    if optimizer is None:
        sd.set_model_state_dict(model, st["model"])
    else:
        sd.set_state_dict(model, optimizer, model_state_dict=st["model"], optim_state_dict=st["optimizer"])


def full_model(step_dir: Path) -> Dict[str, torch.Tensor]:
    """The whole model state of a DCP checkpoint, in this process, with no process group.

    Reads DCP's metadata for every ``model.*`` tensor's global shape and dtype, then lets
    ``dcp.load(no_dist=True)`` assemble each full tensor from every rank's shards.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = FileSystemReader(str(step_dir / FOLDER))
    meta = reader.read_metadata()
    full = {}
    for key, md in meta.state_dict_metadata.items():
        if key.startswith("model.") and isinstance(md, TensorStorageMetadata):
            full[key[len("model."):]] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
    if not full:
        raise CheckpointError(f"{step_dir}: the DCP checkpoint holds no model tensors")
    with _one_process(None):
        dcp.load({"model": full}, storage_reader=FileSystemReader(str(step_dir / FOLDER)), **_scope(None, dcp.load))
    return full
