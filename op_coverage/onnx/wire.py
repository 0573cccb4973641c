"""Read an ONNX protobuf without materialising tensor payloads.

The scan needs every node, type and shape of a model but none of its weights.  This module
walks the protobuf wire format of a ``ModelProto`` read with positioned reads
(:class:`FileBytes`) and re-encodes it without the payload fields of large ``TensorProto``
messages (``raw_data``, ``float_data``, ...).  Weights are never read, so scanning a 1 GB
model with embedded weights costs a few MB of memory.  An elided tensor keeps its name, dims and data type and
gains one ``metadata_props`` entry, ``op_coverage.elided_bytes``, with the payload size on
disk.

Only the message fields that can (transitively) contain tensors are descended into; every
other field is copied byte for byte.  This is a walk of its own, not :mod:`op_coverage.onnx.walk`
(which walks parsed messages): it runs before anything is parsed, precisely so that no tensor is.
"""
from __future__ import annotations

import os

ELIDED_KEY = "op_coverage.elided_bytes"
#: payloads up to this size are kept: shape inference needs small constants (Reshape shapes)
KEEP_PAYLOAD_BYTES = 4096

# message kinds and the fields that lead to tensors (field number -> child kind)
_CHILDREN = {
    "model": {7: "graph", 25: "function", 20: "training"},
    "training": {1: "graph", 3: "graph"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "function": {7: "node", 11: "attribute"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "tensor": {},
}
_TENSOR_PAYLOAD_FIELDS = frozenset({4, 5, 6, 7, 9, 10, 11})
#: nesting depth of protobuf messages (the ModelProto is 1) that onnx's Python protobuf (upb) and
#: onnxruntime parse; each If/Loop/Scan body adds 3 (node, attribute, graph), so about 32 nested
#: bodies fit.  Deeper models cannot be loaded by any of them, so the scan stops there too.
MAX_MESSAGE_DEPTH = 100
# ModelProto field -> wire type, used to recognise a file that is not an ONNX model at all
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


class WireError(ValueError):
    """The bytes are not a well-formed protobuf; ``truncated`` tells a cut-off file apart."""

    def __init__(self, message: str, truncated: bool = False, too_deep: bool = False):
        super().__init__(message)
        self.truncated = truncated
        self.too_deep = too_deep


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    chunk = buf[pos:min(pos + 10, end)]  # one read per varint (a FileBytes read is a call, not an index)
    result = 0
    shift = 0
    for i, b in enumerate(chunk):
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    if len(chunk) < 10:
        raise WireError(f"varint runs past the end at byte {pos + len(chunk)}", truncated=True)
    raise WireError(f"varint longer than 10 bytes at byte {pos + 10}")


class FileBytes:
    """A file as a read-only bytes-like sequence, read with positioned reads (``os.pread``).

    Unlike a memory map, reading a tensor's few header bytes never maps the pages around
    them: on kernels whose page cache uses large folios, touching one byte of a mapped file
    can map up to 2 MB, so a model with hundreds of weight headers would map most of its
    weights.  Small reads go through one cached block; large slices are read directly.
    """

    BLOCK = 1 << 16

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size
        self._block_index = -1
        self._block = b""

    def __len__(self) -> int:
        return self.size

    def _pread(self, n: int, offset: int) -> bytes:
        parts = []
        while n > 0:
            got = os.pread(self.fd, n, offset)
            if not got:
                break
            parts.append(got)
            n -= len(got)
            offset += len(got)
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step != 1:
                raise ValueError("FileBytes slices take no step")
            if stop <= start:
                return b""
            bi = start // self.BLOCK
            if stop > (bi + 1) * self.BLOCK:
                return self._pread(stop - start, start)
            off = start - bi * self.BLOCK
            return self._load(bi)[off:off + stop - start]
        if key < 0:
            key += self.size
        if not 0 <= key < self.size:
            raise IndexError("FileBytes index out of range")
        bi = key // self.BLOCK
        return self._load(bi)[key - bi * self.BLOCK]

    def _load(self, bi: int) -> bytes:
        if bi != self._block_index:
            self._block = self._pread(min(self.BLOCK, self.size - bi * self.BLOCK), bi * self.BLOCK)
            self._block_index = bi
        return self._block


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _skip(buf, pos: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(buf, pos, end)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == 2:
        length, pos = _varint(buf, pos, end)
        pos += length
    elif wire_type == 5:
        pos += 4
    else:
        raise WireError(f"unsupported wire type {wire_type} at byte {pos}")
    if pos > end:
        raise WireError(f"field runs past the end of its message ({pos} > {end})", truncated=True)
    return pos


def _elided_entry(nbytes: int) -> bytes:
    key = ELIDED_KEY.encode()
    value = str(nbytes).encode()
    entry = b"\x0a" + _encode_varint(len(key)) + key + b"\x12" + _encode_varint(len(value)) + value
    return b"\x82\x01" + _encode_varint(len(entry)) + entry  # field 16, wire type 2


class Stats:
    """What the stripper saw: payload bytes elided and kept."""

    def __init__(self) -> None:
        self.elided_bytes = 0
        self.elided_tensors = 0


def _strip(buf, start: int, end: int, kind: str, stats: Stats, depth: int = 1) -> bytes:
    if depth > MAX_MESSAGE_DEPTH:
        raise WireError(f"a {kind} message at byte {start} is nested {depth} protobuf messages deep "
                        f"(more than {MAX_MESSAGE_DEPTH})", too_deep=True)
    children = _CHILDREN[kind]
    out: list[bytes] = []
    pos = start
    copy_from = start
    is_tensor = kind == "tensor"
    payload = 0
    if is_tensor:
        # first pass: how large is the payload?
        p = start
        while p < end:
            tag, q = _varint(buf, p, end)
            field, wt = tag >> 3, tag & 7
            r = _skip(buf, q, end, wt)
            if field in _TENSOR_PAYLOAD_FIELDS:
                payload += (r - _varint(buf, q, end)[1]) if wt == 2 else (r - q)  # content, not its length prefix
            p = r
        if payload <= KEEP_PAYLOAD_BYTES:
            return bytes(buf[start:end])
    while pos < end:
        field_start = pos
        tag, pos = _varint(buf, pos, end)
        field, wt = tag >> 3, tag & 7
        if is_tensor and field in _TENSOR_PAYLOAD_FIELDS:
            out.append(bytes(buf[copy_from:field_start]))
            pos = _skip(buf, pos, end, wt)
            copy_from = pos
            continue
        child = children.get(field)
        if child is not None and wt == 2:
            length, body = _varint(buf, pos, end)
            body_end = body + length
            if body_end > end:
                raise WireError(f"field {field} runs past the end of its message", truncated=True)
            if length <= KEEP_PAYLOAD_BYTES and depth + 1 + length // 2 <= MAX_MESSAGE_DEPTH:
                # nothing inside can be elided (a payload is smaller than the message holding it) and
                # the message cannot nest too deep (each level takes a tag and a length): copied as is
                pos = body_end
                continue
            out.append(bytes(buf[copy_from:field_start]))
            inner = _strip(buf, body, body_end, child, stats, depth + 1)
            out.append(bytes(buf[field_start:pos]))
            out.append(_encode_varint(len(inner)))
            out.append(inner)
            pos = copy_from = body_end
            continue
        pos = _skip(buf, pos, end, wt)
    out.append(bytes(buf[copy_from:end]))
    if is_tensor:
        stats.elided_bytes += payload
        stats.elided_tensors += 1
        out.append(_elided_entry(payload))
    return b"".join(out)


def strip_model(buf) -> tuple[bytes, Stats]:
    """Return the ``ModelProto`` bytes in *buf* with large tensor payloads removed.

    :param buf: the serialized model: :class:`FileBytes`, ``bytes``, ``mmap`` or ``memoryview``.
    :raises WireError: the bytes are not a protobuf ``ModelProto`` or are cut short.
    """
    end = len(buf)
    stats = Stats()
    pos = 0
    # validate the top level before descending: an arbitrary file fails here
    while pos < end:
        tag, q = _varint(buf, pos, end)
        field, wt = tag >> 3, tag & 7
        expected = _MODEL_FIELDS.get(field)
        if expected is None or expected != wt:
            raise WireError(f"byte {pos}: field {field} (wire type {wt}) is not part of an ONNX ModelProto")
        pos = _skip(buf, q, end, wt)
    return _strip(buf, 0, end, "model", stats), stats
