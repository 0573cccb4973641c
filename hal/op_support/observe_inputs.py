"""Example inputs for an aten overload, built from its schema (``torch.ops.aten.<packet>.<overload>._schema``).

Used by ``hal probe --trace``: every op of a trace is run on the device with small tensors of the
trace's dtypes.  Inputs are built for a few *configurations* (tensor rank, index layout); the caller
keeps the first one the CPU accepts.  An argument type that cannot be built raises
:class:`CannotBuild` with the reason, so no op is ever dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

#: tensor shapes tried, in order (square, so matrix products and convolutions line up)
SHAPES: Tuple[Tuple[int, ...], ...] = ((4, 4), (2, 4, 4), (1, 2, 4, 4), (4,), (1, 2, 4, 4, 4))
#: index/target layouts: same shape as the data, or one index per row
INDEX_MODES = ("same", "rows")

_FLOATS = {"p": 0.5, "eps": 1e-5, "epsilon": 1e-5, "momentum": 0.1, "alpha": 1.0, "beta": 1.0,
           "negative_slope": 0.01, "threshold": 0.5, "lambd": 0.5, "min_val": -1.0, "max_val": 1.0,
           "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "lr": 0.01, "scale": 1.0}
_STRINGS = {"reduce": "sum", "approximate": "none", "mode": "bilinear", "rounding_mode": "trunc",
            "padding_mode": "zeros", "side": "left", "interpolation": "linear", "reduction": "mean"}


class CannotBuild(Exception):
    """An argument of the op's schema that the builder cannot make (the message says which, and why)."""


@dataclass(frozen=True)
class Config:
    """One way to fill a schema: data-tensor shape, index layout, dtype."""

    shape: Tuple[int, ...]
    index_mode: str
    dtype: torch.dtype

    @property
    def spatial(self) -> int:
        return max(len(self.shape) - 2, 1)

    def describe(self) -> str:
        return f"tensors {tuple(self.shape)} {str(self.dtype).replace('torch.', '')}, index {self.index_mode}"


def configs(dtype: torch.dtype) -> List[Config]:
    """Every configuration, in the order they are tried."""
    return [Config(s, m, dtype) for s in SHAPES for m in INDEX_MODES]


def _data(cfg: Config, gen: torch.Generator, shape=None) -> torch.Tensor:
    shape = cfg.shape if shape is None else shape
    dt = cfg.dtype
    if dt == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dt.is_complex:
        return torch.randn(shape, generator=gen, dtype=dt)
    if dt.is_floating_point:
        # positive and away from zero: log/sqrt/div/reciprocal stay finite on both sides
        return (torch.rand(shape, generator=gen, dtype=torch.float32) + 0.5).to(dt)
    return torch.randint(1, 4, shape, generator=gen).to(dt)


def _index(cfg: Config, shape=None) -> torch.Tensor:
    if shape is None:
        shape = cfg.shape if cfg.index_mode == "same" else (cfg.shape[0],)
    return torch.zeros(shape, dtype=torch.long)


def _is_index(name: str) -> bool:
    return name in ("index", "indices", "idx") or name.endswith(("_index", "_indices"))


def _tensor(name: str, cfg: Config, gen: torch.Generator) -> torch.Tensor:
    if _is_index(name):
        return _index(cfg)
    if name == "target":
        return _index(cfg) if cfg.index_mode == "rows" else _data(cfg, gen)
    if name in ("mean", "rstd") and len(cfg.shape) >= 2:  # layer-norm statistics: one per row
        return _data(cfg, gen, tuple(cfg.shape[:-1]) + (1,))
    if name == "mask":
        return torch.rand(cfg.shape, generator=gen) > 0.5
    if name in ("weight", "bias", "running_mean", "running_var", "save_mean", "save_invstd") and len(cfg.shape) >= 3:
        if name == "weight":
            return _data(cfg, gen)  # a conv weight (out=shape[0], in=shape[1], k...) lines up with the input
        return _data(cfg, gen, (cfg.shape[1],))
    return _data(cfg, gen)


def _int_list(name: str, cfg: Config) -> list:
    sp, nd = cfg.spatial, len(cfg.shape)
    if name in ("size", "shape"):
        return list(cfg.shape)
    if name in ("stride", "dilation"):
        return [1] * sp
    if name in ("padding", "output_padding"):
        return [0] * sp
    if name in ("kernel_size",):
        return [1] * sp
    if name in ("output_size",):
        return [2] * sp
    if name in ("dims", "perm"):
        return list(reversed(range(nd)))
    if name in ("dim", "dims_to_reduce"):
        return [0]
    if name == "normalized_shape":
        return [cfg.shape[-1]]
    if name in ("repeats", "sizes"):
        return [1] * nd
    if name == "pad":
        return [0, 0]
    if name in ("split_sizes", "split_size"):
        return [cfg.shape[0] // 2, cfg.shape[0] - cfg.shape[0] // 2]
    return [1] * nd


def _int(name: str, cfg: Config) -> int:
    if name in ("dim", "dim0", "start_dim", "axis"):
        return 0
    if name in ("dim1", "end_dim"):
        return -1
    if name in ("k", "groups", "repeats", "chunks", "sections", "num_classes", "split_size", "length", "step",
                "diagonal_offset", "upscale_factor", "downscale_factor", "steps", "n", "end", "high"):
        return 1 if name not in ("end", "high", "steps", "n") else 3
    if name in ("offset", "diagonal", "start", "low", "sparse_dim", "reduction"):
        return 0 if name != "reduction" else 1
    return 1


def type_name(t) -> str:
    """A schema type in native_functions.yaml spelling: ``Optional[List[int]]`` -> ``int[]?``."""
    s = str(t)
    if s.startswith("Optional[") and s.endswith("]"):
        return type_name(s[len("Optional["):-1]) + "?"
    if s.startswith("List[") and s.endswith("]"):
        return type_name(s[len("List["):-1]) + "[]"
    return {"number": "Scalar"}.get(s, s)


def build_arg(arg, cfg: Config, gen: torch.Generator):
    """A value for one schema argument (``torch._C.Argument``); :class:`CannotBuild` when impossible."""
    t = type_name(arg.type)
    name = arg.name
    if arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write:  # out= tensors
        if t.startswith("Tensor[]"):
            return [torch.empty(0, dtype=cfg.dtype)]
        dt = torch.long if "indice" in name or name == "index" else cfg.dtype
        return torch.empty(0, dtype=dt)
    if t.endswith("?"):
        if arg.has_default_value():
            return arg.default_value
        return None
    if arg.has_default_value() and not t.startswith("Tensor"):
        return arg.default_value
    if t == "Tensor":
        return _tensor(name, cfg, gen)
    if t == "Tensor[]":
        if name.startswith("max_exp_avg"):  # fused Adam(W) without amsgrad
            return []
        if name == "state_steps":
            return [torch.tensor(1.0), torch.tensor(1.0)]
        return [_tensor(name, cfg, gen), _tensor(name, cfg, gen)]
    if t == "Tensor?[]" or t == "Tensor?[]?":
        return [_index(cfg, (cfg.shape[0],))]
    if t in ("int", "SymInt"):
        return _int(name, cfg)
    if t.startswith(("int[", "SymInt[")):
        return _int_list(name, cfg)
    if t == "float":
        return _FLOATS.get(name, 0.5)
    if t.startswith("float["):
        return [1.0] * cfg.spatial
    if t == "Scalar":
        return 1 if not (cfg.dtype.is_floating_point or cfg.dtype.is_complex) else 1.0
    if t == "bool":
        return name in ("training", "train")
    if t.startswith("bool["):
        return [True, False, False]  # output_mask: only the input gradient (weight/bias may be None)
    if t == "ScalarType":
        return cfg.dtype
    if t == "str" and name in _STRINGS:
        return _STRINGS[name]
    raise CannotBuild(f"argument '{name}' of type {t} has no default and no example value")


def build_call(op, cfg: Config, seed: int = 0, device: Optional[torch.device] = None):
    """``(args, kwargs)`` for ``op`` under ``cfg``; tensors on the CPU (``device`` fills a ``device=`` kwarg)."""
    gen = torch.Generator().manual_seed(seed)
    args, kwargs = [], {}
    for a in op._schema.arguments:
        v = build_arg(a, cfg, gen)
        if a.name == "device" and type_name(a.type).startswith("Device") and device is not None:
            v = device
        if a.kwarg_only:
            is_out = a.alias_info is not None and a.alias_info.is_write
            if a.has_default_value() and a.name != "device" and not is_out:
                continue
            kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs


def move(obj, device):
    """Tensors (also inside lists) moved to ``device``; other values unchanged."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: move(v, device) for k, v in obj.items()}
    return obj


def resolve_overload(name: str):
    """``torch.ops.aten`` overload for ``name`` (``add.Tensor``, ``addmm``); :class:`CannotBuild` if torch lacks it."""
    packet, _, overload = name.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, packet), overload or "default")
    except (AttributeError, RuntimeError):
        raise CannotBuild(f"torch {torch.__version__} has no aten::{name}") from None


def metadata_only(op) -> Optional[str]:
    """Why the values of ``op``'s result cannot be compared with the CPU's (random or uninitialised), or None."""
    name = op._schema.name.split("::")[-1]
    if torch.Tag.nondeterministic_seeded in op.tags:
        return "random op: compared shapes and dtypes only"
    if name.startswith(("empty", "new_empty", "resize", "_resize", "set_")) or name in ("_pin_memory",):
        return "uninitialised result: compared shapes and dtypes only"
    return None

