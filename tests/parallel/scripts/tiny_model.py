"""The model, data and record of tests/parallel: a two-block decoder (RMSNorm, causal attention,
MLP) with torchtitan's module names, written as a model file for a CUDA machine.

Every case builds it, trains ``STEPS`` steps on the same global batches and calls
:func:`record`: the per-step losses and the parameters gathered at the end (``full_tensor()``),
which check_parallel.py compares with a single-process run (``--reference``).  The weights come
from :func:`init_weights`, which draws each parameter whole from a CPU generator seeded by its
name and keeps this rank's part of it, so a sharded, a meta-initialised and a single-process
model start from the same numbers on every device.
"""
import argparse
import contextlib
import os
import zlib

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ = 64, 32, 4, 2, 16
GLOBAL_BATCH, STEPS, LR = 8, 4, 0.5
#: wrappers that add a name part: activation checkpointing, torch.compile, FSDP1
WRAPPER_PARTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallel this rank holds HEADS / tp of them
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 4 * DIM, bias=False)
        self.w2 = nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """Embedding, blocks, norm, output; a pipeline stage sets the parts it does not hold to None."""

    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): TransformerBlock() for i in range(LAYERS)})
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def clean(name: str) -> str:
    """A parameter's name without the parts wrappers add."""
    for part in WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def full_init(name: str, shape) -> torch.Tensor:
    """The initial value of parameter ``name``: norms at one, the rest normal / sqrt(fan-in)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    fan_in = shape[-1] if len(shape) > 1 and not name.startswith("tok_embeddings") else 1
    return torch.randn(shape, generator=g) / fan_in ** 0.5


@torch.no_grad()
def init_weights(model: nn.Module) -> None:
    """Give every parameter its :func:`full_init` value; a DTensor keeps its own shard of it."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    for name, p in model.named_parameters():
        full = full_init(clean(name), tuple(p.shape))
        if isinstance(p, DTensor):
            # src_data_rank=None: every rank holds the full value, each keeps its part (no collective)
            local = distribute_tensor(full.to(p.device_mesh.device_type), p.device_mesh, p.placements,
                                      src_data_rank=None).to_local()
            p.to_local().copy_(local)
        else:
            p.copy_(full)


def batch(step: int):
    """Global batch ``step``: random tokens, each labelled by a fixed map the model can learn."""
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
    return tokens, (tokens * 7 + 3) % VOCAB


def loss_fn(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def optimizer(model: nn.Module):
    """SGD with momentum: linear in the gradients, so a reduction-order difference stays as small as
    the float error it comes from (Adam's first steps follow the gradients' signs)."""
    from torch.distributed.tensor import DTensor
    kinds = {isinstance(p, DTensor) for p in model.parameters()}
    # torch's foreach kernels refuse a list that mixes DTensors and tensors (tensor parallel
    # without sequence parallel leaves the norms plain tensors): one tensor at a time then
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, foreach=None if len(kinds) == 1 else False)


def arguments(description: str) -> argparse.ArgumentParser:
    """The options every case takes: the output folder and the single-process reference mode."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="folder for rank<N>.pt (losses and gathered parameters)")
    parser.add_argument("--reference", action="store_true",
                        help="one process, no parallelism, the whole global batch: the numbers to compare with")
    return parser


def train(model: nn.Module, device, part=lambda t: t, group=None, loss_context=contextlib.nullcontext) -> list:
    """``STEPS`` steps on this rank's ``part`` of each global batch; the losses, averaged over
    ``group`` (the data-parallel ranks; None: this process alone)."""
    opt = optimizer(model)
    losses = []
    for step in range(STEPS):
        tokens, labels = (part(t).to(device) for t in batch(step))
        with loss_context():
            loss = loss_fn(model(tokens), labels)
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(mean_over(loss, group))
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    return losses


def mean_over(loss, group=None) -> float:
    """The mean of a loss over a process group's ranks (a DTensor loss is first made whole)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    loss = loss.detach()
    if isinstance(loss, DTensor):
        loss = loss.full_tensor()
    if group is None:
        return loss.item()
    dist.all_reduce(loss, group=group)
    return loss.item() / dist.get_world_size(group)


def train_reference(device):
    """What every case is compared with: the model in one process on the whole global batch."""
    model = Transformer().to(device)
    init_weights(model)
    return model, train(model, device)


def record(out: str, losses, model: nn.Module, rank: int = 0, world_size: int = 1) -> None:
    """Write ``out/rank<rank>.pt``: the losses and this rank's parameters, gathered whole.

    Every rank must call it (``full_tensor()`` is a collective)."""
    from torch.distributed.tensor import DTensor
    params = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        params[clean(name)] = full.detach().float().cpu()
    os.makedirs(out, exist_ok=True)
    torch.save({"losses": [float(x) for x in losses], "params": params, "world_size": world_size},
               os.path.join(out, f"rank{rank}.pt"))
