"""Tensor-in, tensor-out layer over the C++ host kernels of ``hal._C``.

Each function takes torch tensors on any device, runs the kernel on host memory (a
device tensor is copied to the host and the result copied back) and returns tensors on
the input's device.  Kernels take float32, float16 and bfloat16; anything else raises
:class:`hal.ops.KernelUnsupported` (as does a missing ``hal._C``), so a caller can fall
back.  Non-contiguous inputs are made contiguous first.

Used by ``hal.ops`` (the CPU backend's fused kernels, and the last-resort fallback of
every other device) and by device emulators that want native speed on the host.

The kernels are called through their raw entries (``hal._C.*_raw``: ``Tensor.data_ptr()``
addresses, dims and a dtype code), which skip numpy and its per-buffer checks.  This module
keeps their contract (csrc/common.h): every buffer it passes is a live, C-contiguous CPU
tensor of the kernel's dtype (float32 where the kernel says so) whose shape matches the
dims passed, and outputs are fresh tensors.  A CPU input that is already contiguous and of
the kernel's dtype is used in place (no detach, no copy); anything else gets a contiguous
host copy first, as before.  Shapes the kernels would have refused raise ValueError here.
"""
from __future__ import annotations

import functools
import math
from typing import List, Optional, Sequence, Tuple

import torch

from hal.ops._dispatch import KernelUnsupported
from hal.ops.compositions import as_dtype

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# the dtype argument of hal._C's raw entries (hal._C.DTYPE_CODES)
_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_C = None
_C_ERROR: Optional[str] = None


def native():
    """The ``hal._C`` module; raises :class:`KernelUnsupported` naming why it is missing."""
    global _C, _C_ERROR
    if _C is None and _C_ERROR is None:
        try:
            import hal._C as mod
            _C = mod
        except ImportError as exc:
            _C_ERROR = (f"the C++ host kernels (hal._C) are not built ({exc}); reinstall hal with a "
                        "C++17 compiler and OpenMP available")
    if _C is None:
        raise KernelUnsupported(_C_ERROR)
    return _C


def available() -> bool:
    """True when the host kernels can run."""
    try:
        native()
    except KernelUnsupported:
        return False
    return True


def _check(op: str, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.dtype not in DTYPES:
            raise KernelUnsupported(f"host kernel {op} takes float32, float16 or bfloat16, not {t.dtype}",
                                    per_dtype=True)


def _code(op: str, t: torch.Tensor) -> int:
    """The raw entries' dtype code for ``t`` (:func:`_check` for one tensor, and its code)."""
    code = _CODE.get(t.dtype)
    if code is None:
        _check(op, t)
    return code



#: float16 calls on fewer elements run the float16 kernel itself: measured 2026-12-06 on this project's
#: 2-core x86-64 machine, the copies of the float32 route cost more than the scalar float16 loop below
#: 1024-4096 elements for every kernel (swiglu and rms_norm cross first), and the results are the same bytes
HALF_DIRECT_BELOW = 2048


def _half_in_float(fn):
    """float16 calls whose floating tensors are all float16 run the float32 kernel on upcast
    copies and round the outputs to float16 once.

    The kernels compute in float and round each output once either way, so the results are
    those of the float16 kernel; but GCC leaves the float16 kernels' fused loops scalar
    (its cost model refuses to vectorise a conversion with the exp polynomial), which made
    float16 5-20x slower than bfloat16 (bench/bench_ops_sizes.py), while torch's own
    conversions are vectorised.  Below :data:`HALF_DIRECT_BELOW` elements the copies cost more
    than the scalar loop (4-11 us a call at (1, 64)), and the float16 kernel runs directly.  A call
    mixing float16 with float32 tensors takes the float16 kernel as before.
    """
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if args[0].dtype is not torch.float16 or args[0].numel() < HALF_DIRECT_BELOW:
            return fn(*args, **kwargs)
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype is not torch.float16:
                return fn(*args, **kwargs)

        def up(a):
            return a.float() if isinstance(a, torch.Tensor) and a.dtype is torch.float16 else a
        out = fn(*map(up, args), **{k: up(v) for k, v in kwargs.items()})
        if isinstance(out, tuple):
            return tuple(o.half() if isinstance(o, torch.Tensor) and o.dtype is torch.float32 else o for o in out)
        return out.half()

    # hal.ops' dispatch asks once per dtype: other dtypes skip this wrapper's frame (~0.3 us a call)
    call.for_dtype = lambda dtype: call if dtype is torch.float16 else fn
    return call


def _host(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``t`` as a C-contiguous CPU tensor of ``dtype`` (``t``'s own when None): ``t`` itself when
    it is one already (only its address is used), else a contiguous host copy."""
    if t.is_cpu and (dtype is None or t.dtype == dtype) and t.is_contiguous():  # is_cpu: no device object
        return t
    h = t.detach().to("cpu").contiguous()
    return h if dtype is None else h.to(dtype)


def _back(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t if like.is_cpu else t.to(like.device)


def _want(ok: bool, op: str, name: str, t: torch.Tensor, expected: str) -> None:
    """ValueError for a buffer whose shape the kernel cannot take (the raw entries do not check)."""
    if not ok:
        raise ValueError(f"host kernel {op}: {name} has shape {tuple(t.shape)}, expected {expected}")


def _vector(op: str, name: str, t: torch.Tensor, n: int) -> None:
    _want(t.dim() == 1 and t.shape[0] == n, op, name, t, f"({n},)")


def _same_size(op: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    _want(t.numel() == x.numel(), op, name, t, f"{tuple(x.shape)} (as many elements as x)")


# -- norms -----------------------------------------------------------------------------
@_half_in_float
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * weight``."""
    code = _code("rms_norm", x)
    C = _C or native()
    n = x.shape[-1]
    xh, wh = _host(x), _host(weight, x.dtype)
    _vector("rms_norm", "weight", wh, n)
    y = torch.empty_like(xh)
    numel = x.numel()
    if numel:
        C.rms_norm_fwd_raw(xh.data_ptr(), wh.data_ptr(), y.data_ptr(), numel // n, n, code, float(eps))
    return _back(y, x)


@_half_in_float
def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)``."""
    code = _code("add_rms_norm", x)
    C = _C or native()
    n = x.shape[-1]
    xh, wh, rh = _host(x), _host(weight, x.dtype), _host(residual, x.dtype)
    _vector("add_rms_norm", "weight", wh, n)
    _same_size("add_rms_norm", "residual", rh, x)
    y, h = torch.empty_like(xh), torch.empty_like(xh)
    if x.numel():
        C.add_rms_norm_fwd_raw(xh.data_ptr(), rh.data_ptr(), wh.data_ptr(), y.data_ptr(), h.data_ptr(),
                               x.numel() // n, n, code, float(eps))
    return _back(y, x), _back(h, x)


@_half_in_float
def rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) of :func:`rms_norm`."""
    code = _code("rms_norm_backward", x)
    C = _C or native()
    n = x.shape[-1]
    xh, gh, wh = _host(x), _host(grad, x.dtype), _host(weight, x.dtype)
    _vector("rms_norm_backward", "weight", wh, n)
    _same_size("rms_norm_backward", "grad", gh, x)
    dx = torch.empty_like(xh)
    dw = torch.zeros(n, dtype=torch.float32)
    if x.numel():
        C.rms_norm_bwd_raw(gh.data_ptr(), xh.data_ptr(), wh.data_ptr(), dx.data_ptr(), dw.data_ptr(),
                           x.numel() // n, n, code, float(eps))
    return _back(dx, x), _back(as_dtype(dw, weight.dtype), weight)


@_half_in_float
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float,
               residual: Optional[torch.Tensor] = None):
    """LayerNorm over the last dim; with ``residual``, of ``x + residual``.

    :return: ``out``, or ``(out, x + residual)`` when ``residual`` is given.
    """
    code = _code("layer_norm", x)
    C = _C or native()
    n = x.shape[-1]
    xh, wh = _host(x), _host(weight, x.dtype)
    _vector("layer_norm", "weight", wh, n)
    bh = None if bias is None else _host(bias, x.dtype)
    if bh is not None:
        _vector("layer_norm", "bias", bh, n)
    rh = None if residual is None else _host(residual, x.dtype)
    if rh is not None:
        _same_size("layer_norm", "residual", rh, x)
    y = torch.empty_like(xh)
    h = None if rh is None else torch.empty_like(xh)
    if x.numel():
        C.layer_norm_fwd_raw(xh.data_ptr(), 0 if rh is None else rh.data_ptr(), wh.data_ptr(),
                             0 if bh is None else bh.data_ptr(), y.data_ptr(), 0 if h is None else h.data_ptr(),
                             x.numel() // n, n, code, float(eps))
    if residual is None:
        return _back(y, x)
    return _back(y, x), _back(h, x)


@_half_in_float
def layer_norm_backward(grad: torch.Tensor, grad_residual_out: Optional[torch.Tensor], x: torch.Tensor,
                        weight: torch.Tensor, eps: float):
    """(grad_x, grad_weight, grad_bias) of LayerNorm at ``x`` (the normalised input).

    ``grad_residual_out`` (the gradient reaching ``x + residual`` directly) is added to grad_x.
    """
    code = _code("layer_norm_backward", x)
    C = _C or native()
    n = x.shape[-1]
    xh, gh, wh = _host(x), _host(grad, x.dtype), _host(weight, x.dtype)
    _vector("layer_norm_backward", "weight", wh, n)
    _same_size("layer_norm_backward", "grad", gh, x)
    eh = None if grad_residual_out is None else _host(grad_residual_out, x.dtype)
    if eh is not None:
        _same_size("layer_norm_backward", "grad_residual_out", eh, x)
    dx = torch.empty_like(xh)
    dw = torch.zeros(n, dtype=torch.float32)
    db = torch.zeros(n, dtype=torch.float32)
    if x.numel():
        C.layer_norm_bwd_raw(gh.data_ptr(), 0 if eh is None else eh.data_ptr(), xh.data_ptr(), wh.data_ptr(),
                             dx.data_ptr(), dw.data_ptr(), db.data_ptr(), x.numel() // n, n, code,
                             float(eps))
    return _back(dx, x), _back(as_dtype(dw, weight.dtype), weight), _back(as_dtype(db, weight.dtype), weight)


# -- rotary ----------------------------------------------------------------------------
def _angles(t: torch.Tensor, seq: int, dtype) -> torch.Tensor:
    """A cos/sin table whose first ``seq`` rows are those of ``t``, as a contiguous CPU tensor of float32
    or ``dtype`` (x's): ``t`` itself when it is one already (the kernel reads rows < seq only, and reads a
    bfloat16 or float16 table as float32 itself), else a float32 copy of ``t[:seq]``."""
    if t.is_cpu and (t.dtype is torch.float32 or t.dtype is dtype) and t.dim() == 2 and t.is_contiguous():
        return t
    return _host(t[:seq], torch.float32)


@_half_in_float
def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
                     seq_dim: int = 1) -> torch.Tensor:
    """Rotary embedding; see :func:`hal.ops.rotary_embedding` for the layout."""
    code = _code("rotary_embedding", x)
    C = _C or native()
    seq_dim = seq_dim % x.dim()
    seq = x.shape[seq_dim]
    pos_div = math.prod(x.shape[seq_dim + 1:-1])
    xh = _host(x)
    c, s = _angles(cos, seq, x.dtype), _angles(sin, seq, x.dtype)
    if c.dtype is not s.dtype:
        c, s = _host(c, torch.float32), _host(s, torch.float32)
    ok = c.dim() == 2 and c.shape[0] >= seq
    _want(ok, "rotary_embedding", "cos", cos, f"({seq}, rotary_dim / 2)")
    _want(s.dim() == 2 and s.shape[0] >= seq and s.shape[1] == c.shape[1], "rotary_embedding", "sin", sin,
          f"({seq}, {c.shape[1]})")
    y = torch.empty_like(xh)
    if x.numel():
        d = x.shape[-1]
        C.rotary_fwd_raw(xh.data_ptr(), c.data_ptr(), s.data_ptr(), y.data_ptr(), x.numel() // d, d, c.shape[1],
                         max(pos_div, 1), seq, bool(interleaved), 1, code, _CODE[c.dtype])
    return _back(y, x)


# -- activations -----------------------------------------------------------------------
def _even(op: str, n: int) -> None:
    if n % 2:
        raise ValueError(f"{op}: the last dim of x is {n}; it must be even ([gate | up] halves)")


@_half_in_float
def swiglu(x: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` where ``a, b`` are the two halves of the last dim of ``x``."""
    code = _code("swiglu", x)
    C = _C or native()
    xh = _host(x)
    shape = x.shape
    n = shape[-1]
    _even("swiglu", n)
    y = torch.empty(*shape[:-1], n // 2, dtype=x.dtype)
    numel = x.numel()
    if numel:
        C.swiglu_fwd_raw(xh.data_ptr(), y.data_ptr(), numel // n, n // 2, code)
    return _back(y, x)


@_half_in_float
def swiglu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad_x of :func:`swiglu`."""
    code = _code("swiglu_backward", x)
    C = _C or native()
    n = x.shape[-1]
    _even("swiglu_backward", n)
    xh, gh = _host(x), _host(grad, x.dtype)
    _want(2 * gh.numel() == x.numel(), "swiglu_backward", "grad", gh, f"{tuple(x.shape[:-1]) + (n // 2,)}")
    dx = torch.empty_like(xh)
    if x.numel():
        C.swiglu_bwd_raw(gh.data_ptr(), xh.data_ptr(), dx.data_ptr(), x.numel() // n, n // 2, code)
    return _back(dx, x)


@_half_in_float
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (``approximate="none"``) or with the tanh approximation."""
    code = _code("gelu", x)
    C = _C or native()
    xh = _host(x)
    y = torch.empty_like(xh)
    numel = x.numel()
    if numel:
        C.gelu_fwd_raw(xh.data_ptr(), y.data_ptr(), numel, code, approximate == "tanh")
    return _back(y, x)


@_half_in_float
def gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """grad_x of :func:`gelu`."""
    code = _code("gelu_backward", x)
    C = _C or native()
    xh, gh = _host(x), _host(grad, x.dtype)
    _same_size("gelu_backward", "grad", gh, x)
    dx = torch.empty_like(xh)
    if x.numel():
        C.gelu_bwd_raw(gh.data_ptr(), xh.data_ptr(), dx.data_ptr(), x.numel(), code,
                       approximate == "tanh")
    return _back(dx, x)


# -- softmax ---------------------------------------------------------------------------
def _tiled_mask(mask: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The mask as a contiguous (mask_rows, cols) buffer whose rows tile x's rows."""
    m = mask.reshape((1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    j = 0  # leading dims where the mask broadcasts can be tiled instead of materialised
    while j < len(shape) - 1 and m.shape[j] == 1:
        j += 1
    if all(m.shape[i] == shape[i] for i in range(j, len(shape))):
        return m.reshape(-1, shape[-1]).contiguous()
    return m.expand(*shape).reshape(-1, shape[-1]).contiguous()


@_half_in_float
def softmax(x: torch.Tensor, mask: Optional[torch.Tensor] = None, causal: bool = False,
            scale: float = 1.0) -> torch.Tensor:
    """``softmax(scale * x + mask)`` over the last dim; see :func:`hal.ops.softmax`."""
    code = _code("softmax", x)
    C = _C or native()
    xh = _host(x)
    y = torch.empty_like(xh)
    numel = x.numel()
    if not numel:
        return _back(y, x)
    shape = x.shape
    cols = shape[-1]
    m, kind, mrows = None, 0, 1
    if mask is not None:
        mh = _host(mask)
        mh = mh if mh.dtype == torch.bool else mh.float()
        m = _tiled_mask(mh, x.shape)
        kind, mrows = (1 if m.dtype == torch.bool else 2), m.shape[0]
    q_len = shape[-2] if causal and len(shape) >= 2 else 1  # read by causal calls only
    C.softmax_fwd_raw(xh.data_ptr(), 0 if m is None else m.data_ptr(), kind, mrows, y.data_ptr(),
                      numel // cols, cols, code, float(scale), bool(causal), q_len)
    return _back(y, x)


@_half_in_float
def softmax_backward(grad: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """grad_x of :func:`softmax` from its output."""
    code = _code("softmax_backward", out)
    C = _C or native()
    yh, gh = _host(out), _host(grad, out.dtype)
    _same_size("softmax_backward", "grad", gh, out)
    dx = torch.empty_like(yh)
    if out.numel():
        cols = out.shape[-1]
        C.softmax_bwd_raw(gh.data_ptr(), yh.data_ptr(), dx.data_ptr(), out.numel() // cols, cols,
                          code, float(scale))
    return _back(dx, out)


# -- optimizer -------------------------------------------------------------------------
def fused_adamw_(params: List[torch.Tensor], grads: List[torch.Tensor], exp_avgs: List[torch.Tensor],
                 exp_avg_sqs: List[torch.Tensor], lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float, step: float, maximize: bool = False) -> None:
    """One AdamW step in place (float32/float16/bfloat16).

    Device or non-contiguous tensors are staged through contiguous host copies and the
    results copied back in place, so the host kernel serves any device as a fallback.
    """
    groups = (params, grads, exp_avgs, exp_avg_sqs)
    for ts in groups:
        for t in ts:
            _check("fused_adamw", t)
    if not len(params) == len(grads) == len(exp_avgs) == len(exp_avg_sqs):
        raise ValueError(f"fused_adamw: params, grads, exp_avgs and exp_avg_sqs must have the same length (got "
                         f"{len(params)}, {len(grads)}, {len(exp_avgs)}, {len(exp_avg_sqs)})")
    for i, p in enumerate(params):
        for name, ts in (("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs)):
            if ts[i].dtype != p.dtype:
                raise TypeError(f"fused_adamw: {name}[{i}] is {ts[i].dtype} but params[{i}] is {p.dtype}; "
                                "cast it to the same dtype")
            if ts[i].numel() != p.numel():
                raise ValueError(f"fused_adamw: tensors [{i}] differ in size")
    staged = [[_host(t) for t in ts] for ts in groups]
    C = _C or native()
    C.adamw_step_raw([p.data_ptr() for p in staged[0]], [g.data_ptr() for g in staged[1]],
                     [m.data_ptr() for m in staged[2]], [v.data_ptr() for v in staged[3]],
                     [p.numel() for p in staged[0]], [_CODE[p.dtype] for p in staged[0]], float(lr), float(beta1),
                     float(beta2), float(eps), float(weight_decay), float(step), bool(maximize))
    for orig, host_copy in zip((params, exp_avgs, exp_avg_sqs), (staged[0], staged[2], staged[3])):
        for t, h in zip(orig, host_copy):
            if h is not t:
                with torch.no_grad():
                    t.copy_(h)


# -- vision ----------------------------------------------------------------------------
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Kept box indices (int64) by decreasing score, greedy, IoU > threshold suppressed."""
    C = _C or native()
    keep = C.nms(boxes.detach().to("cpu", torch.float64).numpy(), scores.detach().to("cpu", torch.float64).numpy(),
                 float(iou_threshold))
    return _back(torch.from_numpy(keep), boxes)


def roi_align(input: torch.Tensor, boxes: torch.Tensor, spatial_scale: float, pooled_height: int,
              pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """RoIAlign of ``input`` (N, C, H, W) over ``boxes`` (K, 5)."""
    code = _code("roi_align", input)
    C = _C or native()
    xh = _host(input)
    bh = _host(boxes, torch.float32)
    _want(xh.dim() == 4, "roi_align", "input", xh, "(N, C, H, W)")
    _want(bh.dim() == 2 and bh.shape[1] == 5, "roi_align", "boxes", bh, "(K, 5) as (batch_index, x1, y1, x2, y2)")
    N, Ch, H, W = xh.shape
    out = torch.empty(boxes.shape[0], input.shape[1], pooled_height, pooled_width, dtype=input.dtype)
    if out.numel():
        C.roi_align_fwd_raw(xh.data_ptr(), bh.data_ptr(), out.data_ptr(), N, Ch, H, W, bh.shape[0],
                            pooled_height, pooled_width, code, float(spatial_scale),
                            int(sampling_ratio), bool(aligned))
    return _back(out, input)


def roi_align_backward(grad: torch.Tensor, boxes: torch.Tensor, spatial_scale: float, pooled_height: int,
                       pooled_width: int, sampling_ratio: int, aligned: bool,
                       input_shape: Sequence[int]) -> torch.Tensor:
    """grad_input of :func:`roi_align` (in ``grad``'s dtype)."""
    code = _code("roi_align_backward", grad)
    C = _C or native()
    gh = _host(grad)
    bh = _host(boxes, torch.float32)
    gi = torch.zeros(*input_shape, dtype=torch.float32)
    _want(gh.dim() == 4, "roi_align_backward", "grad", gh, "(K, C, PH, PW)")
    _want(gi.dim() == 4 and gi.shape[1] == gh.shape[1], "roi_align_backward", "grad_input", gi,
          f"(N, {gh.shape[1]}, H, W)")
    _want(tuple(bh.shape) == (gh.shape[0], 5), "roi_align_backward", "boxes", bh, f"({gh.shape[0]}, 5)")
    if grad.numel() and gi.numel():
        K, Ch, PH, PW = gh.shape
        N, _, H, W = gi.shape
        C.roi_align_bwd_raw(gh.data_ptr(), bh.data_ptr(), gi.data_ptr(), N, Ch, H, W, K, PH, PW, code,
                            float(spatial_scale), int(sampling_ratio), bool(aligned))
    return _back(gi.to(grad.dtype), grad)
