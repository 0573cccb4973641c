"""Greedy generation with a KV cache, timed per batch size: the script ``hal accept --model`` runs through
``hal run`` on the reference and on each target.  Written as a CUDA user writes it (``.cuda()``,
``torch.cuda.synchronize()``); ``hal run`` takes it to the backend.

    python inference_worker.py --model MODEL --batches 1,2,4 --prompt-len 16 --new-tokens 16 --out result.json

``MODEL``: a Hugging Face causal-LM folder (``config.json`` and weights) or a ``config.json`` alone (the
weights are then initialised from seed 0, the same on every backend).  Per batch size: time to first
token (the prefill and the first token: TTFT), time per output token after it (TPOT, the mean of the
decode steps), output tokens per second, and the generated token ids.
"""
import argparse
import json
import os
import time

import torch


def load(model: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = model if os.path.isdir(model) else os.path.dirname(os.path.abspath(model))
    weights = [f for f in os.listdir(folder) if f.endswith((".safetensors", ".bin"))] if os.path.isdir(folder) else []
    if os.path.isdir(model) and weights:
        return AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32)
    config = AutoConfig.from_pretrained(model if os.path.isdir(model) else folder)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)


@torch.inference_mode()
def generate(model, ids: torch.Tensor, new_tokens: int):
    """Greedy decoding with the model's KV cache: (tokens [batch, new_tokens], ttft_s, [decode step s])."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
    tokens = [token]
    torch.cuda.synchronize()
    ttft = time.perf_counter() - start
    past, steps = out.past_key_values, []
    for _ in range(new_tokens - 1):
        t0 = time.perf_counter()
        out = model(input_ids=token, past_key_values=past, use_cache=True)
        past = out.past_key_values
        token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        tokens.append(token)
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    return torch.cat(tokens, dim=1), ttft, steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batches", default="1,2,4,8,16,32")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    model = load(args.model).eval().cuda()
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (max(int(b) for b in args.batches.split(",")), args.prompt_len),
                            generator=torch.Generator().manual_seed(1))
    generate(model, prompts[:1].cuda(), 2)  # warm-up: the first call's one-off costs are no batch size's
    rows = []
    for b in (int(x) for x in args.batches.split(",")):
        tokens, ttft, steps = generate(model, prompts[:b].cuda(), args.new_tokens)
        total = ttft + sum(steps)
        rows.append({"batch": b, "ttft_s": ttft, "tpot_s": sum(steps) / len(steps) if steps else None,
                     "tokens_per_s": b * args.new_tokens / total, "tokens": tokens.cpu().tolist()})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"model": args.model, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
                   "rows": rows}, f)
    print(f"inference: {len(rows)} batch sizes, {args.new_tokens} new tokens each -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
