"""``hal::rotary_embedding``: rotary position embedding, half-split or interleaved."""
import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run


def _rotary(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, seq_dim: int) -> Tensor:
    return run("rotary_embedding", device_type(x), (x, cos, sin, interleaved, seq_dim), comp.rotary_embedding,
               host.rotary_embedding)


def _setup(ctx, inputs, output):
    x, cos, sin, interleaved, seq_dim = inputs
    ctx.save_for_backward(cos, sin)
    ctx.interleaved, ctx.seq_dim = interleaved, seq_dim


def _backward(ctx, grad):
    cos, sin = ctx.saved_tensors
    # a rotation's adjoint is the rotation by the opposite angle
    return ROTARY_EMBEDDING(grad, cos, -sin, ctx.interleaved, ctx.seq_dim), None, None, None, None


ROTARY_EMBEDDING = define("rotary_embedding", _rotary,
                          fake=lambda x, cos, sin, interleaved, seq_dim: torch.empty_like(x),
                          setup_context=_setup, backward=_backward, composition=comp.rotary_embedding)


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False, seq_dim: int = 1) -> Tensor:
    """Rotate pairs of features of ``x`` by position-dependent angles (RoPE).

    Layout (flash-attn's convention): ``x`` is (batch, seq, heads, head_dim) with
    ``seq_dim=1``; use ``seq_dim=0`` for (seq, batch, heads, head_dim) (Megatron/apex) and
    ``seq_dim=-2`` for (batch, heads, seq, head_dim) (Hugging Face).  ``cos`` and ``sin``
    are (positions, rotary_dim / 2) with positions >= seq (a longer cache is cut to the
    first ``seq`` rows); features past ``rotary_dim`` pass through unchanged.

    Pairs: ``interleaved=False`` (half-split, GPT-NeoX/LLaMA) rotates (i, i + rotary_dim/2);
    ``interleaved=True`` (GPT-J) rotates (2i, 2i + 1).  Each pair (a, b) becomes
    ``(a*cos - b*sin, b*cos + a*sin)``.  Hugging Face's cos/sin of width head_dim hold each
    angle twice: pass ``cos[..., :head_dim // 2]``.

    Differentiable with respect to ``x`` (cos/sin are treated as constants).

    Example::

        inv = 1.0 / 10000 ** (torch.arange(0, d, 2) / d)
        ang = torch.outer(torch.arange(seq), inv)
        q = hal.ops.rotary_embedding(q, ang.cos(), ang.sin())
    """
    op = "rotary_embedding"
    _checks.floating_tensor(op, "x", x)
    _checks.floating_tensor(op, "cos", cos)
    _checks.floating_tensor(op, "sin", sin)
    shape = x.shape
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(f"hal.ops.{op}: x has shape {tuple(shape)}; it needs a sequence dim and a feature dim")
    sd = seq_dim % ndim if -ndim <= seq_dim < ndim else None
    if sd is None or sd == ndim - 1:
        raise ValueError(f"hal.ops.{op}: seq_dim={seq_dim} is not a sequence dim of x {tuple(shape)} "
                         "(it must name a dim other than the last)")
    table = cos.shape
    if len(table) != 2 or table != sin.shape:
        raise ValueError(f"hal.ops.{op}: cos {tuple(table)} and sin {tuple(sin.shape)} must both be "
                         "(positions, rotary_dim / 2)")
    seq, d = shape[sd], shape[-1]
    if table[0] < seq:
        raise ValueError(f"hal.ops.{op}: cos/sin hold {table[0]} positions but x has {seq} along "
                         f"seq_dim={seq_dim}; build the tables for at least {seq} positions")
    if 2 * table[1] > d:
        raise ValueError(f"hal.ops.{op}: cos/sin cover {2 * table[1]} rotary dims but x's head dim is {d}; "
                         "pass tables of width rotary_dim / 2 (Hugging Face tables: cos[..., :head_dim // 2])")
    if not (x.is_cpu and cos.is_cpu and sin.is_cpu):
        _checks.same_device(op, x, cos=cos, sin=sin)
    if cos.requires_grad or sin.requires_grad:
        _checks.no_grad_needed(op, "cos", cos)
        _checks.no_grad_needed(op, "sin", sin)
    return ROTARY_EMBEDDING(x, _rows(cos, seq), _rows(sin, seq), bool(interleaved), sd)


def _rows(table: Tensor, seq: int) -> Tensor:
    """The first ``seq`` rows of a cos/sin table, contiguous: the table itself when it is that already
    (a decode step's one-row table: slicing and ``contiguous`` cost ~1-2 us a call)."""
    if table.shape[0] == seq and table.is_contiguous():
        return table
    return table[:seq].contiguous()
