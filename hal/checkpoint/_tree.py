"""Training state as a JSON skeleton plus a flat dict of tensors.

``encode`` walks a state dict (model, optimizer, scheduler, scaler, user extras) and
returns a JSON-safe tree in which every tensor is replaced by ``{"__tensor__": name}``;
the tensors go to a flat ``{name: tensor}`` dict bound for safetensors.  ``decode`` is
the inverse.  No pickle anywhere: what cannot be expressed this way is refused with the
path of the offending value.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import torch

from hal.checkpoint._errors import CheckpointError

_MARKERS = ("__tensor__", "__tuple__", "__dict__", "__float__", "__dtype__", "__device__",
            "__ndarray__")


def _float(x: float):
    if math.isfinite(x):
        return x
    return {"__float__": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def encode(obj: Any, tensors: Dict[str, torch.Tensor], path: str,
           snapshot: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """JSON-safe form of ``obj``; tensors are passed through ``snapshot`` into ``tensors``."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _float(float(obj))
    if isinstance(obj, torch.Tensor):
        name = path if path not in tensors else f"{path}#{len(tensors)}"  # {"a/b": t} vs {"a": {"b": t}}
        tensors[name] = snapshot(obj)
        return {"__tensor__": name}
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).replace("torch.", "")}
    if isinstance(obj, torch.device):
        return {"__device__": str(obj)}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        items = [encode(v, tensors, f"{path}/{i}", snapshot) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else {"__tuple__": items}
    if isinstance(obj, dict):
        plain = all(isinstance(k, str) and k not in _MARKERS for k in obj)
        if plain:
            return {k: encode(v, tensors, f"{path}/{k}", snapshot) for k, v in obj.items()}
        return {"__dict__": [[encode(k, tensors, f"{path}/key{i}", snapshot),
                              encode(v, tensors, f"{path}/{k}", snapshot)]
                             for i, (k, v) in enumerate(obj.items())]}
    np = _numpy()
    if np is not None:
        if isinstance(obj, np.ndarray):
            name = path if path not in tensors else f"{path}#{len(tensors)}"
            tensors[name] = snapshot(torch.from_numpy(obj.copy()))
            return {"__ndarray__": name}
        if isinstance(obj, np.generic):
            return encode(obj.item(), tensors, path, snapshot)
    raise CheckpointError(
        f"{path}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be stored without pickle; "
        "hal checkpoints hold tensors, numbers, strings, bools, None, lists, tuples and dicts only; "
        "convert it (for example to a dict of numbers) before saving")


def decode(obj: Any, tensors: Dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`encode`; tensors are looked up by name in ``tensors``."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (k, v), = obj.items()
        if k == "__tensor__" or k == "__ndarray__":
            if v not in tensors:
                raise CheckpointError(f"tensor {v!r} is referenced by the state but missing from the "
                                      "tensor file; the checkpoint is damaged: resume from an older one")
            t = tensors[v]
            return t.numpy() if k == "__ndarray__" else t
        if k == "__tuple__":
            return tuple(decode(x, tensors) for x in v)
        if k == "__dict__":
            return {_hashable(decode(a, tensors)): decode(b, tensors) for a, b in v}
        if k == "__float__":
            return float(v)
        if k == "__dtype__":
            return getattr(torch, v)
        if k == "__device__":
            return torch.device(v)
    return {k: decode(v, tensors) for k, v in obj.items()}


def _hashable(k):
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    return numpy


def to_inline(obj: Any, path: str) -> dict:
    """``obj`` as one JSON document with its (small) tensors inline in base64.

    For per-rank state such as a data loader's position, whose tensors are a few bytes of
    generator state: ``{"tree": <encode>, "tensors": {name: {dtype, shape, b64}}}``.
    """
    import base64

    tensors: Dict[str, torch.Tensor] = {}
    tree = encode(obj, tensors, path, lambda t: t.detach().to("cpu").contiguous())
    inline = {name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                     "b64": base64.b64encode(t.reshape(-1).view(torch.uint8).numpy().tobytes()).decode()}
              for name, t in tensors.items()}
    return {"tree": tree, "tensors": inline}


def from_inline(doc: dict) -> Any:
    """Inverse of :func:`to_inline`."""
    import base64

    tensors = {}
    for name, e in (doc.get("tensors") or {}).items():
        raw = bytearray(base64.b64decode(e["b64"]))
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        tensors[name] = t.view(getattr(torch, e["dtype"])).reshape(e["shape"]).clone()
    return decode(doc.get("tree"), tensors)
