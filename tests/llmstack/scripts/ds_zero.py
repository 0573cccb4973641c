"""A small causal LM trained with DeepSpeed ZeRO, written for an NVIDIA GPU as DeepSpeed's examples are.

    deepspeed --num_gpus 2 ds_zero.py --deepspeed_config ../configs/zero3.json --zero-init
    torchrun --nproc-per-node 2 ds_zero.py --deepspeed_config ../configs/zero2.json --save-at 3 --ckpt ckpt

CUDA idioms by default: ``torch.cuda.set_device(local_rank)``, ``device = torch.device("cuda", local_rank)``,
``deepspeed.init_distributed("nccl")``.  ``--device accelerator`` writes the same script in DeepSpeed's
accelerator-neutral idiom (``get_accelerator()``), which runs plainly on a CPU with ``DS_ACCELERATOR=cpu``.

The weights come from a "pretrained" state dict made on the CPU (seed 0) and are loaded the way
transformers loads into a ZeRO-3 model: ``GatheredParameters(p, modifier_rank=0)``, rank 0 writes.  The
data is a fixed global batch per step split over the ranks, so a run at any world size trains the same
model on the same tokens.  Prints ``step N loss X`` (the global mean loss) on rank 0.

--save-at K: after step K, ``save_checkpoint``, then a fresh model and engine ``load_checkpoint`` it
and training goes on (prints ``reloaded at step K``).  --load DIR: start from a checkpoint
(``--universal``: a universal checkpoint, ``ds_to_universal``'s output, at another world size).
"""
import argparse
import json
import math
import os

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.accelerator import get_accelerator

VOCAB, DIM, HEADS, LAYERS, SEQ, GLOBAL_BATCH = 64, 32, 4, 2, 16, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def pretrained():
    torch.manual_seed(0)
    return {k: v.clone() for k, v in TinyGPT().state_dict().items()}


def batch(step, rank, world, device):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ + 1), generator=g)
    mine = tokens[rank::world]
    return mine[:, :-1].to(device), mine[:, 1:].to(device)


def build(args, config, rank):
    if args.zero_init:
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = TinyGPT()
        weights = pretrained()
        for name, p in model.named_parameters():
            with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                if rank == 0:
                    p.data.copy_(weights[name])
    else:
        model = TinyGPT()
        model.load_state_dict(pretrained())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return engine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--zero-init", action="store_true", help="build the model under deepspeed.zero.Init (ZeRO-3)")
    ap.add_argument("--save-at", type=int, default=0)
    ap.add_argument("--ckpt", default="ckpt")
    ap.add_argument("--load", default=None)
    ap.add_argument("--universal", action="store_true")
    ap.add_argument("--device", choices=["cuda", "accelerator"], default="cuda")
    ap.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    ap = deepspeed.add_config_arguments(ap)
    args = ap.parse_args()

    if args.device == "cuda":
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
        deepspeed.init_distributed("nccl")
    else:
        get_accelerator().set_device(args.local_rank)
        device = torch.device(get_accelerator().device_name(args.local_rank))
        deepspeed.init_distributed()
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    if args.universal:
        config.setdefault("checkpoint", {})["load_universal"] = True

    engine = build(args, config, rank)
    start = 0
    if args.load:
        _, client = engine.load_checkpoint(args.load)
        start = client["step"]
        if rank == 0:
            print(f"resumed at step {start} from {args.load}", flush=True)
    for step in range(start, args.steps):
        x, y = batch(step, rank, world, device)
        loss = F.cross_entropy(engine(x).flatten(0, 1), y.flatten())
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        mean = mean.item() / world
        if not math.isfinite(mean):
            raise SystemExit(f"step {step}: loss is {mean}")
        if rank == 0:
            print(f"step {step} loss {mean:.8f}", flush=True)
        if args.save_at and step + 1 == args.save_at:
            engine.save_checkpoint(args.ckpt, tag=f"global_step{step + 1}", client_state={"step": step + 1})
            engine.destroy()
            engine = build(args, config, rank)
            _, client = engine.load_checkpoint(args.ckpt, tag=f"global_step{step + 1}")
            if rank == 0:
                print(f"reloaded at step {client['step']}", flush=True)
    if rank == 0:
        print(f"on {device.type}: params on {next(engine.module.parameters()).device.type}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
