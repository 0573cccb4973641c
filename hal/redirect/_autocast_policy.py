"""CUDA's autocast policy inside ``torch.autocast("cuda")`` on the cpu backend.

torch's CPU autocast has its own op lists: under it ``log_softmax``, ``softmax``, ``layer_norm``,
``sum``, ``exp`` ... of a float16 tensor stay float16 where CUDA (and the emulator, whose
PrivateUse1 autocast registers CUDA's lists) run them in float32.  While a redirected
``autocast("cuda")`` is entered on the cpu backend, a torch-function mode applies CUDA's lists
(``hal/data/cuda_autocast_policy.json``, from torch's autocast_mode.h) to the calls a
script makes: fp32 ops get their float16/bfloat16 tensors as float32, lower-precision ops their
float32 tensors in the autocast dtype, promote ops their tensors in the widest dtype.  Outside
autocast nothing is pushed, so nothing costs anything there.
"""
from __future__ import annotations

import functools
from typing import Dict

import torch
from torch.overrides import TorchFunctionMode

from hal.util.data import data_json

LOWER, FP32, PROMOTE, NATIVE = "lower_precision", "fp32", "promote", "native"
_LOW = (torch.float16, torch.bfloat16)


@functools.lru_cache(maxsize=1)
def cuda_policy() -> Dict[str, str]:
    """Op name (aten name, or the Python name a script calls) -> ``lower_precision`` / ``fp32``
    / ``promote`` (CUDA's autocast lists) or ``native`` (left in the input dtype by CUDA, run in
    float32 by the CPU's autocast), read from the data file."""
    data = data_json("cuda_autocast_policy.json")
    policy = {}
    for kind, lists in ((LOWER, ("lower_precision",)), (FP32, ("fp32", "fp32_set_opt_dtype", "fp32_append_dtype")),
                        (PROMOTE, ("promote",)), (NATIVE, ("cpu_fp32_not_cuda",))):
        for key in lists:
            policy.update(dict.fromkeys(data[key], kind))
    for name, op in data["python_names"].items():
        if not name.startswith("__comment"):
            policy[name] = policy[op]
    return policy


def _cast(obj, want):
    if isinstance(obj, torch.Tensor):
        return obj.to(want) if obj.is_floating_point() and obj.dtype != want and obj.dtype != torch.float64 else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast(o, want) for o in obj)
    return obj


def _widest(args, kwargs):
    wide = None
    for obj in (*args, *kwargs.values()):
        for o in (obj if isinstance(obj, (list, tuple)) else (obj,)):
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.dtype != torch.float64:
                wide = o.dtype if wide is None else torch.promote_types(wide, o.dtype)
    return wide


_autocast_off = torch._C._DisableAutocast


class CudaAutocastPolicy(TorchFunctionMode):
    """The mode pushed while a redirected ``autocast("cuda")`` is entered on the cpu backend."""

    def __init__(self):
        super().__init__()
        self.policy = cuda_policy()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self.policy.get(getattr(func, "__name__", None))
        if kind is None or not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        if kind == NATIVE:
            pass
        elif kind == FP32:
            if any(isinstance(o, torch.Tensor) and o.dtype in _LOW for o in (*args, *kwargs.values())):
                args, kwargs = _cast(args, torch.float32), {k: _cast(v, torch.float32) for k, v in kwargs.items()}
        elif kind == LOWER:
            low = torch.get_autocast_dtype("cpu")
            args, kwargs = _cast(args, low), {k: _cast(v, low) for k, v in kwargs.items()}
        else:
            wide = _widest(args, kwargs)
            if wide is not None:
                args, kwargs = _cast(args, wide), {k: _cast(v, wide) for k, v in kwargs.items()}
        with _autocast_off():  # the inputs are CUDA's now: no second cast by the CPU's own lists
            return func(*args, **kwargs)
