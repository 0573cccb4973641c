"""Load an ONNX model for a scan: no weights, safe external-data paths, bounded memory.

The file is read with positioned reads and re-encoded without large tensor payloads (see
:mod:`op_coverage.onnx.wire`), so memory stays at a few MB whatever the weight size and models
over 2 GB load as long as their graph itself fits in a protobuf.  External data files are
never opened; their locations are checked so that a model cannot point the scan (or a later
loader) outside its own folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from op_coverage.errors import ModelNotFound, NotOnnx, TruncatedModel, UnknownOpset, UnsafeExternalData
from op_coverage.onnx import walk
from op_coverage.onnx.wire import ELIDED_KEY, MAX_MESSAGE_DEPTH, FileBytes, WireError, strip_model

_SNIFF = [
    (b"PK\x03\x04", "a zip archive (a PyTorch .pt/.pth checkpoint?); export it with torch.onnx.export first"),
    (b"\x89HDF", "an HDF5 file (a Keras model?); convert it to ONNX first"),
    (b"\x80\x02", "a Python pickle; export the model to ONNX first"),
    (b"{", "a JSON/text file"),
    (b"ir_version", "ONNX text format; convert it with onnx.parser / onnx.save first"),
]


@dataclass
class ExternalFile:
    """One external-data file the model refers to."""

    location: str
    tensors: int = 0
    bytes: int = 0
    exists: bool = True


@dataclass
class LoadedModel:
    """A model as the scan sees it: graph and metadata, large tensor payloads elided."""

    path: Path
    model: onnx.ModelProto
    file_bytes: int
    embedded_weight_bytes: int
    external_files: list[ExternalFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def external_weight_bytes(self) -> int:
        return sum(f.bytes for f in self.external_files)


def _check_location(model_dir: Path, location: str, tensor: str) -> Path:
    fix = "re-save the model with its data files beside it (onnx.save(..., location='name.data'))"
    if not location:
        raise UnsafeExternalData(f"tensor {tensor!r}: external data has no location; {fix}")
    p = Path(location)
    if p.is_absolute() or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise UnsafeExternalData(
            f"tensor {tensor!r}: external data location {location!r} is an absolute path outside the "
            f"model's folder; {fix}")
    if ".." in p.parts or ".." in location.replace("\\", "/").split("/"):
        raise UnsafeExternalData(
            f"tensor {tensor!r}: external data location {location!r} leaves the model's folder ('..'); {fix}")
    target = model_dir / p
    real_dir = os.path.realpath(model_dir)
    real = os.path.realpath(target)
    if os.path.commonpath([real_dir, real]) != real_dir:
        raise UnsafeExternalData(
            f"tensor {tensor!r}: external data location {location!r} resolves through a symlink to {real}, "
            f"outside the model's folder {real_dir}; {fix}")
    return target


def _tensor_nbytes(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    if t.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in t.string_data)
    try:
        bits = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize * 8
    except (KeyError, TypeError, ValueError):
        return 0
    if t.data_type in _FOUR_BIT:
        bits = 4
    return (n * bits + 7) // 8


_FOUR_BIT = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)}


def tensor_bytes(t: onnx.TensorProto) -> int:
    """Size of a tensor's data in bytes, from its metadata only (works on elided tensors)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if info.get("length", "").isdigit():
            return int(info["length"])
        return _tensor_nbytes(t)
    for e in t.metadata_props:
        if e.key == ELIDED_KEY:
            return _tensor_nbytes(t) or int(e.value)
    return _tensor_nbytes(t)


def iter_tensors(model: onnx.ModelProto):
    """Every tensor of *model*: initializers, sparse initializers and attribute tensors, at any depth.

    A recursion of its own rather than :func:`op_coverage.onnx.walk.graphs`: the order is the
    file's, in which a body's tensors come between those of the attributes around it, and
    :attr:`LoadedModel.external_files` lists the data files in the order they first appear; a
    walk by graph or by node would reorder them.
    """
    def graph_tensors(g):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        for n in g.node:
            yield from node_tensors(n)

    def node_tensors(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for _k, g in walk.attribute_graphs(a):
                yield from graph_tensors(g)

    yield from graph_tensors(model.graph)
    for f in model.functions:
        for n in f.node:
            yield from node_tensors(n)


def _known_opsets() -> dict[str, int]:
    row = onnx.helper.VERSION_TABLE[-1]
    return {"": onnx.defs.onnx_opset_version(), "ai.onnx": onnx.defs.onnx_opset_version(), "ai.onnx.ml": row[3]}


def check_opsets(model: onnx.ModelProto) -> None:
    """Refuse opset versions newer than the installed ``onnx`` knows, and undeclared domains."""
    known = _known_opsets()
    upgrade = f"upgrade onnx (installed {onnx.__version__}) or export the model with an older opset"
    for imp in model.opset_import:
        top = known.get(imp.domain)
        if top is not None and imp.version > top:
            raise UnknownOpset(
                f"opset {imp.domain or 'ai.onnx'} {imp.version} is newer than the newest this onnx "
                f"knows ({top}); {upgrade}")
        if imp.version < 1:
            raise UnknownOpset(f"opset {imp.domain or 'ai.onnx'} version {imp.version} is not valid; re-export the model")
    declared = {i.domain for i in model.opset_import}
    local = {(f.domain, f.name) for f in model.functions}
    for scope, _i, n in walk.nodes(model):
        here = declared if scope.function is None else {i.domain for i in scope.function.opset_import} | declared
        if n.domain not in here and not (n.domain == "ai.onnx" and "" in here) \
                and (n.domain, n.op_type) not in local:
            raise UnknownOpset(
                f"node {n.name or n.op_type!r} in {_where(scope)} uses domain {n.domain or 'ai.onnx'!r}, which "
                f"the model does not import (opset_import has {sorted(d or 'ai.onnx' for d in here)}); "
                "add the domain to opset_import or fix the exporter")


def _where(scope: walk.Scope) -> str:
    """Where a node sits, for an error: ``the main graph/If_node``, ``function d.f/Loop``."""
    if scope.parent is not None:
        return f"{_where(scope.parent)}/{scope.node.name or scope.node.op_type}"
    f = scope.function
    return "the main graph" if f is None else f"function {f.domain}.{f.name}"


def _too_deep(p: Path, why: str) -> str:
    return (f"{p}: subgraphs are nested too deeply to read ({why}); protobuf parsers, onnx's and "
            f"onnxruntime's included, stop at {MAX_MESSAGE_DEPTH} message levels, about 32 nested If/Loop/Scan "
            "bodies, so no ONNX tool can load this model; flatten the nesting (e.g. merge nested Ifs into one "
            "Where or one If with a combined condition) and export again")


def load_for_scan(path: str | os.PathLike) -> LoadedModel:
    """Read *path* for a scan: structure only, no weights, external data paths verified.

    :raises ModelNotFound, NotOnnx, TruncatedModel, UnsafeExternalData, UnknownOpset: with a
        one-line message naming the file, the reason and the fix.
    """
    p = Path(path)
    if not p.exists():
        raise ModelNotFound(f"{p}: no such file; check the path (a folder scans every *.onnx in it)")
    if p.is_dir():
        raise ModelNotFound(f"{p}: is a folder; use scan_folder() or pass a .onnx file")
    size = p.stat().st_size
    if size == 0:
        raise NotOnnx(f"{p}: empty file (0 bytes), not an ONNX model; re-export or re-download it")
    try:
        with open(p, "rb") as fh:
            data = FileBytes(fh.fileno(), size)
            head = data[:16]
            try:
                stripped, stats = strip_model(data)
            except WireError as e:
                if e.too_deep:
                    raise NotOnnx(_too_deep(p, str(e))) from None
                if e.truncated:
                    raise TruncatedModel(
                        f"{p}: file ends in the middle of a protobuf message ({size} bytes; {e}); the copy or "
                        "download was cut short, fetch the file again") from None
                hint = next((why for magic, why in _SNIFF if head.startswith(magic)), None)
                raise NotOnnx(
                    f"{p}: not an ONNX model ({hint or e}); pass a .onnx file written by onnx.save "
                    "or torch.onnx.export") from None
    except PermissionError as e:
        raise ModelNotFound(f"{p}: cannot be read ({e.strerror}); check its permissions") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(stripped)
    except DecodeError as e:
        if "MaxDepth" in str(e):
            raise NotOnnx(_too_deep(p, str(e))) from None
        raise NotOnnx(f"{p}: corrupt ONNX protobuf ({e}); re-export or re-download the model") from None
    if not model.HasField("graph") or model.ir_version <= 0:
        raise NotOnnx(f"{p}: parses as protobuf but has no graph or IR version, so it is not an ONNX "
                      "model; pass a .onnx file written by onnx.save or torch.onnx.export")
    check_opsets(model)
    loaded = LoadedModel(path=p, model=model, file_bytes=size, embedded_weight_bytes=stats.elided_bytes)
    files: dict[str, ExternalFile] = {}
    for t in iter_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        target = _check_location(p.parent, loc, t.name)
        ef = files.get(loc)
        if ef is None:
            ef = files[loc] = ExternalFile(location=loc, exists=target.is_file())
            if not ef.exists:
                loaded.warnings.append(
                    f"external data file {loc!r} is missing beside {p.name}; the scan does not need it, "
                    "but the model will not load without it")
        ef.tensors += 1
        ef.bytes += tensor_bytes(t)
    loaded.external_files = list(files.values())
    return loaded
