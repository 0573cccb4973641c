"""Eight small training workloads written in plain torch: the architectures issue 12's proof runs on.

Nothing is downloaded and nothing outside ``torch`` is imported (no torchvision: NMS and RoIAlign
are written here in torch ops).  Each factory ``f(seed=0)`` builds its model and a fixed synthetic
batch on the CPU, deterministically from ``seed``, and returns a :class:`Workload`::

    w = transformer_lm().to("emu")            # model, inputs and targets moved by .to(device)
    opt = w.optimizer_factory(w.model.parameters())
    sched = w.scheduler_factory(opt) if w.scheduler_factory else None
    loss = w.step(opt, sched)                 # forward, loss, backward, clip, step, zero_grad

or simply ``train(transformer_lm, "emu", steps=20)``, which returns the losses.

A step (:meth:`Workload.step`) is, in this order and announced to an optional ``phase`` callback:
``forward`` (``out = model(*example_inputs)``; ``loss = loss_fn(out, *targets)``), ``backward``
(``loss.backward()``), ``other`` (``clip_grad_norm_`` where the workload clips), ``optimizer``
(``optimizer.step()``, then the scheduler's ``step()``), ``other`` (``zero_grad()``, which sets
gradients to ``None`` and runs no op).

Everything is sized to run 20 steps in well under a second or two on two CPU cores.  Shapes never
depend on data (NMS keeps a fixed number of boxes; matching uses masks, not boolean indexing), and
nothing syncs to the host inside a step, so a step is deterministic on the CPU and is the same
sequence of ops on any device.  Random ops inside a step (dropout) draw from the device's generator;
:func:`train` seeds it with ``torch.manual_seed`` (which seeds the CPU and every device).  A device's
generator is not the CPU's (CUDA's and the emulator's are counter-based), so two architectures draw
other dropout masks there: :data:`WITHOUT_DROPOUT` holds them without dropout, to compare a device's
losses with the CPU's.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Workload", "ARCHITECTURES", "WITHOUT_DROPOUT", "train", "transformer_lm", "lstm_lm", "cnn_bn", "vit_sdpa",
           "llama_block", "gru_recommender", "unet", "detection_head", "nms", "roi_align", "box_iou"]


@dataclass
class Workload:
    """One architecture's training setup; see the module docstring for the step protocol."""
    name: str
    model: nn.Module
    example_inputs: tuple          # model(*example_inputs)
    targets: tuple                 # loss_fn(output, *targets) -> scalar tensor
    loss_fn: Callable
    optimizer_factory: Callable    # optimizer_factory(params) -> torch.optim.Optimizer
    scheduler_factory: Optional[Callable] = None   # scheduler_factory(optimizer) -> LRScheduler
    clip_grad_norm: Optional[float] = None

    def to(self, device) -> "Workload":
        """The same workload with model, inputs and targets on ``device`` (the model moves in place)."""
        mv = lambda ts: tuple(t.to(device) for t in ts)  # noqa: E731
        return replace(self, model=self.model.to(device), example_inputs=mv(self.example_inputs),
                       targets=mv(self.targets))

    def step(self, optimizer, scheduler=None, phase: Callable[[str], None] = lambda name: None):
        """One training step; returns the loss (a 0-dim tensor on the workload's device; backward has
        freed its graph).  The step runs no op of its own beyond the protocol's: nothing to record
        but the workload's."""
        self.model.train()
        phase("forward")
        out = self.model(*self.example_inputs)
        loss = self.loss_fn(out, *self.targets)
        phase("backward")
        loss.backward()
        if self.clip_grad_norm is not None:
            phase("other")
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        phase("optimizer")
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        phase("other")
        optimizer.zero_grad(set_to_none=True)
        return loss


def train(factory: Callable[..., Workload], device="cpu", steps: int = 20, seed: int = 0) -> list[float]:
    """Train ``factory(seed=seed)`` for ``steps`` steps on ``device``; the losses as Python floats."""
    torch.manual_seed(seed)
    w = factory(seed=seed).to(device)
    opt = w.optimizer_factory(w.model.parameters())
    sched = w.scheduler_factory(opt) if w.scheduler_factory else None
    torch.manual_seed(seed)  # the generators dropout draws from, CPU and devices alike
    losses = [w.step(opt, sched) for _ in range(steps)]
    return [float(x) for x in torch.stack(losses).detach().cpu()]


def _fused_or_foreach(params) -> dict:
    """``fused=True`` where torch has fused optimizer kernels for the parameters' device, else foreach."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    params = list(params)
    dev = params[0].device.type
    return ({"fused": True} if dev in _get_fused_kernels_supported_devices() else {"foreach": True}), params


def _lm_data(seed: int, batch: int, seq: int, vocab: int):
    """Token streams with a learnable rule (next = 3*prev + 1 mod vocab, with 10% noise)."""
    g = torch.Generator().manual_seed(seed + 1)
    toks = torch.empty(batch, seq + 1, dtype=torch.long)
    toks[:, 0] = torch.randint(vocab, (batch,), generator=g)
    for t in range(1, seq + 1):
        nxt = (3 * toks[:, t - 1] + 1) % vocab
        noise = torch.rand(batch, generator=g) < 0.1
        toks[:, t] = torch.where(noise, torch.randint(vocab, (batch,), generator=g), nxt)
    return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


def _lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --- 1. Transformer LM -------------------------------------------------------------------------
class TransformerLM(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, ff=64, max_len=32, dropout=0.1):
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        t = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        h = self.embed(tokens) * math.sqrt(self.d) + self.pos[:t]
        h = self.encoder(h, mask=mask, is_causal=True)
        return self.head(self.norm(h))


def transformer_lm(seed: int = 0, dropout: float = 0.1) -> Workload:
    torch.manual_seed(seed)
    x, y = _lm_data(seed, batch=8, seq=16, vocab=64)
    return Workload("transformer_lm", TransformerLM(dropout=dropout), (x,), (y,), _lm_loss,
                    lambda params: torch.optim.Adam(params, lr=3e-3))


# --- 2. LSTM LM (2 layers, dropout, tied weights, gradient clipping) ---------------------------
class LSTMLM(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2, dropout=0.5):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.embed.weight  # tied

    def _apply(self, fn, recurse=True):
        # Module.to() onto a PrivateUse1 device (emu, npu, mlu, musa, ...) gives each module a new
        # Parameter (torch's _has_compatible_shallow_copy_type knows no PrivateUse1), which unties
        # shared weights; tie them again after any conversion, as transformers' tie_weights() does
        super()._apply(fn, recurse)
        self.decoder.weight = self.embed.weight
        return self

    def forward(self, tokens):
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(out))


def lstm_lm(seed: int = 0, dropout: float = 0.5) -> Workload:
    torch.manual_seed(seed)
    x, y = _lm_data(seed, batch=8, seq=16, vocab=64)
    return Workload("lstm_lm", LSTMLM(dropout=dropout), (x,), (y,), _lm_loss,
                    lambda params: torch.optim.SGD(params, lr=2.0), clip_grad_norm=0.5)


# --- 3. CNN with BatchNorm and pooling, SGD momentum + StepLR ----------------------------------
class SmallCNN(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        def block(i, o):
            return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*block(3, 8), nn.MaxPool2d(2), *block(8, 16), nn.MaxPool2d(2),
                                      *block(16, 16), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def _image_classes(seed, n=16, classes=4, size=16):
    g = torch.Generator().manual_seed(seed + 1)
    y = torch.arange(n) % classes
    protos = torch.randn(classes, 3, size, size, generator=g)
    x = protos[y] + 0.5 * torch.randn(n, 3, size, size, generator=g)
    return x, y


def cnn_bn(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    x, y = _image_classes(seed)
    return Workload("cnn_bn", SmallCNN(), (x,), (y,), F.cross_entropy,
                    lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4),
                    scheduler_factory=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5))


# --- 4. ViT-like with scaled_dot_product_attention, AdamW -------------------------------------
class Attention(nn.Module):
    def __init__(self, d, heads, bias=True):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)

    def split(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return q, k, v

    def merge(self, o):
        b, h, t, hd = o.shape
        return self.proj(o.transpose(1, 2).reshape(b, t, h * hd))

    def forward(self, x):
        q, k, v = self.split(x)
        return self.merge(F.scaled_dot_product_attention(q, k, v))


class ViTBlock(nn.Module):
    def __init__(self, d, heads, mlp):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Linear(mlp, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyViT(nn.Module):
    def __init__(self, size=16, patch=4, d=32, heads=4, depth=2, classes=4):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(d, heads, 2 * d) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_sdpa(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    x, y = _image_classes(seed)
    return Workload("vit_sdpa", TinyViT(), (x,), (y,), F.cross_entropy,
                    lambda params: torch.optim.AdamW(params, lr=2e-3, weight_decay=0.05))


# --- 5. LLaMA-like: RMSNorm, rotary embedding, SwiGLU, causal SDPA, fused AdamW ---------------
class HandRMSNorm(nn.Module):
    """RMSNorm written out (as LLaMA's reference code has it)."""
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.ffn_norm = HandRMSNorm(d), HandRMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, depth=2, hidden=64, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(LlamaBlock(d, heads, hidden) for _ in range(depth))
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(max_len).float(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.head(self.norm(h))


def _llama_opt(params):
    kw, params = _fused_or_foreach(params)
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1, **kw)


def llama_block(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    x, y = _lm_data(seed, batch=8, seq=16, vocab=64)
    return Workload("llama_block", TinyLlama(), (x,), (y,), _lm_loss, _llama_opt)


# --- 6. GRU + EmbeddingBag recommender ---------------------------------------------------------
class Recommender(nn.Module):
    def __init__(self, items=100, d=16, hidden=32):
        super().__init__()
        self.bag = nn.EmbeddingBag(items, d, mode="sum")
        self.item = nn.Embedding(items, d)
        self.gru = nn.GRU(d, hidden, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d + hidden + d, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, history, offsets, recent, candidate):
        _, h = self.gru(self.item(recent))
        z = torch.cat([self.bag(history, offsets), h[-1], self.item(candidate)], dim=1)
        return self.mlp(z).squeeze(1)


def gru_recommender(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    b, items, t = 16, 100, 6
    lengths = torch.randint(2, 8, (b,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    taste = torch.randint(2, (b,), generator=g)           # a user likes even or odd items
    history = torch.randint(items // 2, (int(lengths.sum()),), generator=g) * 2 + taste.repeat_interleave(lengths)
    recent = torch.randint(items // 2, (b, t), generator=g) * 2 + taste[:, None]
    candidate = torch.randint(items, (b,), generator=g)
    label = ((candidate % 2) == taste).float()
    return Workload("gru_recommender", Recommender(items), (history, offsets, recent, candidate), (label,),
                    F.binary_cross_entropy_with_logits, lambda params: torch.optim.Adagrad(params, lr=0.05))


# --- 7. U-Net: GroupNorm, SiLU, ConvTranspose2d and interpolate, skip concatenation, MSE -------
class DoubleConv(nn.Sequential):
    def __init__(self, i, o, groups=4):
        super().__init__(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(groups, o), nn.SiLU(),
                         nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(groups, o), nn.SiLU())


class TinyUNet(nn.Module):
    def __init__(self, c=1, w=8):
        super().__init__()
        self.enc1, self.enc2, self.mid = DoubleConv(c, w), DoubleConv(w, 2 * w), DoubleConv(2 * w, 4 * w)
        self.up1 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec1 = DoubleConv(4 * w, 2 * w)
        self.up2 = nn.Conv2d(2 * w, w, 1)
        self.dec2 = DoubleConv(2 * w, w)
        self.out = nn.Conv2d(w, c, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.avg_pool2d(e2, 2))
        d1 = self.dec1(torch.cat([self.up1(m), e2], dim=1))
        u2 = self.up2(F.interpolate(d1, scale_factor=2, mode="bilinear", align_corners=False))
        return self.out(self.dec2(torch.cat([u2, e1], dim=1)))


def unet(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    f = torch.rand(4, 1, 1, 1, generator=g) * 3 + 1
    clean = torch.sin(f * xx) * torch.cos(f * yy)
    noisy = clean + 0.3 * torch.randn(clean.shape, generator=g)
    return Workload("unet", TinyUNet(), (noisy,), (clean,), F.mse_loss,
                    lambda params: torch.optim.RMSprop(params, lr=1e-3))


# --- 8. detection-style head: anchors, NMS, RoIAlign, box regression + classification ---------
def box_iou(a, b):
    """IoU of every box of ``a`` (..., N, 4) with every box of ``b`` (..., M, 4), xyxy: (..., N, M)."""
    area_a = (a[..., 2] - a[..., 0]).clamp(min=0) * (a[..., 3] - a[..., 1]).clamp(min=0)
    area_b = (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter).clamp(min=1e-6)


def nms(boxes, scores, iou_threshold: float):
    """Greedy non-maximum suppression over a batch, in tensor ops only (no host sync, fixed shapes).

    ``boxes`` (B, N, 4), ``scores`` (B, N).  Returns ``order`` (B, N), the indices by descending
    score (stable, so ties keep their index order), and ``keep`` (B, N) bool in that order: a box
    is kept unless a kept box of higher score overlaps it by more than ``iou_threshold``."""
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    sorted_boxes = boxes.gather(1, order.unsqueeze(-1).expand(-1, -1, 4))
    over = box_iou(sorted_boxes, sorted_boxes) > iou_threshold          # (B, N, N)
    n = boxes.shape[1]
    later = torch.ones(n, n, dtype=torch.bool, device=boxes.device).triu(1)  # j > i
    over = over & later
    keep = torch.ones(boxes.shape[:2], dtype=torch.bool, device=boxes.device)
    for i in range(n - 1):
        keep = keep & ~(over[:, i] & keep[:, i:i + 1])
    return order, keep


def roi_align(features, rois, batch_index, output_size: int, spatial_scale: float, sampling_ratio: int = 2):
    """RoIAlign (aligned=True) by bilinear sampling with ``grid_sample``, then averaging each bin.

    ``features`` (B, C, H, W); ``rois`` (R, 4) xyxy in image coordinates; ``batch_index`` (R,) long.
    Each of the ``output_size``² bins averages ``sampling_ratio``² bilinear samples.  Outside the map
    the border value is used (torchvision's kernel clamps the same way within a pixel of the edge)."""
    _, _, h, w = features.shape
    s = output_size * sampling_ratio
    steps = (torch.arange(s, device=rois.device, dtype=rois.dtype) + 0.5) / s   # (s,) in (0, 1)
    r = rois * spatial_scale - 0.5
    xs = r[:, 0:1] + (r[:, 2:3] - r[:, 0:1]) * steps                                 # (R, s) pixel coords
    ys = r[:, 1:2] + (r[:, 3:4] - r[:, 1:2]) * steps
    gx = (2 * xs + 1) / w - 1                                                        # align_corners=False
    gy = (2 * ys + 1) / h - 1
    grid = torch.stack([gx[:, None, :].expand(-1, s, -1), gy[:, :, None].expand(-1, -1, s)], dim=-1)
    sampled = F.grid_sample(features.index_select(0, batch_index), grid, mode="bilinear",
                            padding_mode="border", align_corners=False)                 # (R, C, s, s)
    return F.avg_pool2d(sampled, sampling_ratio)


def _encode(gt, ref, weights):
    wr, hr = ref[..., 2] - ref[..., 0], ref[..., 3] - ref[..., 1]
    wg, hg = gt[..., 2] - gt[..., 0], gt[..., 3] - gt[..., 1]
    dx = ((gt[..., 0] + gt[..., 2]) - (ref[..., 0] + ref[..., 2])) / 2 / wr
    dy = ((gt[..., 1] + gt[..., 3]) - (ref[..., 1] + ref[..., 3])) / 2 / hr
    return torch.stack([dx * weights[0], dy * weights[1], torch.log(wg / wr) * weights[2],
                        torch.log(hg / hr) * weights[3]], dim=-1)


def _decode(deltas, ref, weights, size):
    wr, hr = ref[..., 2] - ref[..., 0], ref[..., 3] - ref[..., 1]
    cx, cy = (ref[..., 0] + ref[..., 2]) / 2, (ref[..., 1] + ref[..., 3]) / 2
    dx, dy = deltas[..., 0] / weights[0], deltas[..., 1] / weights[1]
    dw = (deltas[..., 2] / weights[2]).clamp(max=math.log(1000 / 16))
    dh = (deltas[..., 3] / weights[3]).clamp(max=math.log(1000 / 16))
    cx, cy, w, h = cx + dx * wr, cy + dy * hr, wr * dw.exp(), hr * dh.exp()
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1).clamp(0, size)


class DetectionHead(nn.Module):
    """A two-stage detector in miniature (Faster R-CNN's shape): backbone, region proposals from
    anchors with NMS, RoIAlign, a box head with classification and box regression.  Like
    torchvision's detection models in training, ``forward(images, gt_boxes, gt_labels)`` returns
    the dict of losses (matching proposals to ground truth needs the targets)."""
    RPN_W, ROI_W = (1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)

    def __init__(self, classes=4, size=32, stride=4, sizes=(8.0, 12.0, 16.0), pre_nms=48, post_nms=12, pool=4):
        super().__init__()
        self.size, self.stride, self.pre_nms, self.post_nms, self.pool = size, stride, pre_nms, post_nms, pool
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        a = len(sizes)
        self.rpn_conv = nn.Conv2d(32, 32, 3, padding=1)
        self.rpn_obj = nn.Conv2d(32, a, 1)
        self.rpn_box = nn.Conv2d(32, 4 * a, 1)
        self.box_head = nn.Sequential(nn.Flatten(), nn.Linear(32 * pool * pool, 64), nn.ReLU())
        self.cls = nn.Linear(64, classes)
        self.reg = nn.Linear(64, 4)
        f = size // stride
        c = (torch.arange(f, dtype=torch.float32) + 0.5) * stride
        cy, cx = torch.meshgrid(c, c, indexing="ij")
        half = torch.tensor(sizes) / 2
        anchors = torch.stack([cx[..., None] - half, cy[..., None] - half, cx[..., None] + half,
                               cy[..., None] + half], dim=-1)                       # (f, f, A, 4)
        self.register_buffer("anchors", anchors.reshape(-1, 4), persistent=False)

    def forward(self, images, gt_boxes, gt_labels):
        b = images.shape[0]
        feat = self.backbone(images)
        r = F.relu(self.rpn_conv(feat))
        obj = self.rpn_obj(r).permute(0, 2, 3, 1).reshape(b, -1)                    # (B, N) N = f*f*A
        deltas = self.rpn_box(r).permute(0, 2, 3, 1).reshape(b, -1, 4)
        anchors = self.anchors.expand(b, -1, -1)

        # RPN losses: anchors with IoU >= 0.5 to a ground-truth box are positive, < 0.3 negative
        iou, idx = box_iou(anchors, gt_boxes).max(dim=2)
        pos, neg = iou >= 0.5, iou < 0.3
        matched = gt_boxes.gather(1, idx.unsqueeze(-1).expand(-1, -1, 4))
        weight = (pos | neg).float()
        rpn_obj = F.binary_cross_entropy_with_logits(obj, pos.float(), weight, reduction="sum") / weight.sum()
        rpn_box = (F.smooth_l1_loss(deltas, _encode(matched, anchors, self.RPN_W), reduction="none",
                                    beta=1 / 9).sum(-1) * pos).sum() / pos.sum().clamp(min=1)

        # proposals: decode, best pre_nms by objectness, NMS, best post_nms survivors, plus the gt boxes
        with torch.no_grad():
            boxes = _decode(deltas.detach(), anchors, self.RPN_W, self.size)
            top = obj.detach().topk(self.pre_nms, dim=1).indices
            boxes = boxes.gather(1, top.unsqueeze(-1).expand(-1, -1, 4))
            scores = obj.detach().gather(1, top)
            order, keep = nms(boxes, scores, 0.7)
            ranked = torch.where(keep, scores.gather(1, order), torch.full_like(scores, -float("inf")))
            best = order.gather(1, ranked.topk(self.post_nms, dim=1).indices)
            proposals = torch.cat([boxes.gather(1, best.unsqueeze(-1).expand(-1, -1, 4)), gt_boxes], dim=1)

        # box head on RoIAlign features; labels and regression targets by IoU with the ground truth
        k = proposals.shape[1]
        batch_index = torch.arange(b, device=images.device).repeat_interleave(k)
        pooled = roi_align(feat, proposals.reshape(-1, 4), batch_index, self.pool, 1.0 / self.stride)
        h = self.box_head(pooled)
        logits, reg = self.cls(h), self.reg(h).view(b, k, 4)
        iou, idx = box_iou(proposals, gt_boxes).max(dim=2)
        fg = iou >= 0.5
        labels = torch.where(fg, gt_labels.gather(1, idx), torch.zeros_like(idx))
        matched = gt_boxes.gather(1, idx.unsqueeze(-1).expand(-1, -1, 4))
        roi_cls = F.cross_entropy(logits, labels.reshape(-1))
        roi_box = (F.smooth_l1_loss(reg, _encode(matched, proposals, self.ROI_W), reduction="none",
                                    beta=1.0).sum(-1) * fg).sum() / labels.numel()
        return {"rpn_objectness": rpn_obj, "rpn_box": rpn_box, "roi_classifier": roi_cls, "roi_box": roi_box}


def _detection_data(seed, b=2, size=32, classes=4):
    """Images with one or two coloured rectangles each; the colour channel is the class (1..3)."""
    g = torch.Generator().manual_seed(seed + 1)
    images = 0.1 * torch.randn(b, 3, size, size, generator=g)
    boxes = torch.zeros(b, 2, 4)
    labels = torch.zeros(b, 2, dtype=torch.long)
    for i in range(b):
        for j in range(2):
            w, h = (int(v) for v in torch.randint(8, 17, (2,), generator=g))
            x0, y0 = (int(v) for v in torch.randint(0, size - 16, (2,), generator=g))
            cls = int(torch.randint(1, classes, (1,), generator=g))
            images[i, cls - 1, y0:y0 + h, x0:x0 + w] += 1.0
            boxes[i, j] = torch.tensor([x0, y0, x0 + w, y0 + h], dtype=torch.float32)
            labels[i, j] = cls
    return images, boxes, labels


def detection_head(seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    images, boxes, labels = _detection_data(seed)
    return Workload("detection_head", DetectionHead(), (images, boxes, labels), (),
                    lambda losses: sum(losses.values()),
                    lambda params: torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4))


#: name -> factory, in the order of issue 12's list
ARCHITECTURES: dict[str, Callable[..., Workload]] = {
    "transformer_lm": transformer_lm,
    "lstm_lm": lstm_lm,
    "cnn_bn": cnn_bn,
    "vit_sdpa": vit_sdpa,
    "llama_block": llama_block,
    "gru_recommender": gru_recommender,
    "unet": unet,
    "detection_head": detection_head,
}
#: the architectures with dropout, without it: the same step on any device as on the CPU
WITHOUT_DROPOUT: dict[str, Callable[..., Workload]] = {
    "transformer_lm": functools.partial(transformer_lm, dropout=0.0),
    "lstm_lm": functools.partial(lstm_lm, dropout=0.0),
}
