"""Float64 references and tolerances for the hal.ops backend tests (not a test module).

References are written from the operators' definitions, independently of
``hal.ops.compositions``, and evaluated in float64 on the CPU.
"""
import contextlib
import math

import pytest
import torch

import hal.ops
from hal.ops import host

#: the paths every op test runs through: the default dispatch, then each path forced
PATHS = ("auto", "composition", "host")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: (atol, rtol) per dtype: one or two roundings of the output on top of float32 arithmetic
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3),
       torch.bfloat16: (3e-2, 3e-2)}


def on_path(path):
    """Context manager running hal.ops on ``path`` ("auto" = hal's own choice)."""
    if path == "host" and not host.available():
        pytest.skip("hal._C (C++ host kernels) is not built on this machine")
    return contextlib.nullcontext() if path == "auto" else hal.ops.use_path(path)


def close(got, ref, dtype=None):
    atol, rtol = TOL[dtype or got.dtype]
    torch.testing.assert_close(got.detach().cpu().double(), ref.detach().cpu().double(), atol=atol, rtol=rtol)


def randn(*shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(device)


# -- references ------------------------------------------------------------------------
def rms_norm(x, w, eps):
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def layer_norm(x, w, b, eps):
    x = x.double()
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w.double()
    return y if b is None else y + b.double()


def rotary(x, cos, sin, interleaved, seq_dim):
    """Pair by pair, with explicit loops over the rotary dims."""
    x = x.double().movedim(seq_dim % x.dim(), 0)  # (seq, ..., d)
    out = x.clone()
    half = cos.shape[1]
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2)
        c = cos[: x.shape[0], i].double().reshape(shape)
        s = sin[: x.shape[0], i].double().reshape(shape)
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out.movedim(0, seq_dim % x.dim())


def swiglu(x):
    x = x.double()
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return a / (1 + torch.exp(-a)) * b


def gelu(x, approximate):
    x = x.double()
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def softmax(x, mask, causal, scale):
    v = x.double() * scale
    keep = torch.ones_like(v, dtype=torch.bool)
    if mask is not None:
        if mask.dtype == torch.bool:
            keep = keep & mask.expand_as(v)
        else:
            v = v + mask.double()
    if causal:
        q, k = v.shape[-2:]
        i = torch.arange(q)[:, None]
        j = torch.arange(k)[None, :]
        keep = keep & (j <= i)
    e = torch.where(keep, torch.exp(v - v.masked_fill(~keep, -math.inf).amax(-1, keepdim=True).nan_to_num(0)),
                    torch.zeros_like(v))
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s.clamp_min(1e-300), torch.zeros_like(e))
