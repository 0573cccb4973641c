"""Tiny random-weight transformer models from ``transformers`` configs (nothing downloaded):
the layouts of GPT-2, BERT, DistilBERT, T5, LLaMA, Mistral, Qwen2, Mixtral, Qwen2-MoE, CLIP's
text tower and ViT, a few layers wide enough to keep their operators."""
from __future__ import annotations

import torch
from torch import nn

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
             max_position_embeddings=64)
DECODER = dict(SMALL, num_key_value_heads=2)
SEQ = 12


class Logits(nn.Module):
    """The model's first output only (logits or last hidden state), no cache."""

    def __init__(self, model, kind: str):
        super().__init__()
        self.model, self.kind = model.eval(), kind

    def forward(self, *args):
        if self.kind == "seq2seq":
            out = self.model(input_ids=args[0], decoder_input_ids=args[1], use_cache=False, return_dict=False)
        elif self.kind == "vision":
            out = self.model(pixel_values=args[0], return_dict=False)
        elif self.kind == "encoder":
            out = self.model(input_ids=args[0], attention_mask=args[1], return_dict=False)
        else:
            out = self.model(input_ids=args[0], attention_mask=args[1], use_cache=False, return_dict=False)
        return out[0]


def _ids(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (1, SEQ), generator=g)
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[0, -3:] = 0  # padding: the mask path is exported too
    return ids, mask


def build(name: str):
    """``(module, example args, input names)`` for the zoo model *name*."""
    import transformers as t
    torch.manual_seed(0)
    ids, mask = _ids()
    if name == "gpt2":
        m = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=128, n_positions=64))
        return Logits(m, "decoder"), (ids, mask), ["input_ids", "attention_mask"]
    if name == "bert":
        m = t.BertModel(t.BertConfig(**SMALL))
        return Logits(m, "encoder"), (ids, mask), ["input_ids", "attention_mask"]
    if name == "distilbert":
        m = t.DistilBertModel(t.DistilBertConfig(dim=32, hidden_dim=64, n_layers=2, n_heads=4, vocab_size=128,
                                                 max_position_embeddings=64))
        return Logits(m, "encoder"), (ids, mask), ["input_ids", "attention_mask"]
    if name == "t5":
        m = t.T5ForConditionalGeneration(t.T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2,
                                                    num_heads=4, vocab_size=128, decoder_start_token_id=0))
        return Logits(m, "seq2seq"), (ids, ids[:, :5]), ["input_ids", "decoder_input_ids"]
    if name == "clip-text":
        m = t.CLIPTextModel(t.CLIPTextConfig(**SMALL))
        return Logits(m, "encoder"), (ids, mask), ["input_ids", "attention_mask"]
    if name == "vit":
        m = t.ViTModel(t.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   image_size=32, patch_size=8))
        return Logits(m, "vision"), (torch.randn(1, 3, 32, 32),), ["pixel_values"]
    configs = {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**DECODER)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**DECODER, sliding_window=8)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**DECODER)),
        # experts_implementation="eager": the grouped kernels use torch.histc, which the TorchScript
        # exporter does not know; the eager loop routes with torch.where (NonZero), as real exports do
        "mixtral": lambda: t.MixtralForCausalLM(t.MixtralConfig(**DECODER, num_local_experts=4, num_experts_per_tok=2,
                                                                  experts_implementation="eager")),
        "qwen2-moe": lambda: t.Qwen2MoeForCausalLM(t.Qwen2MoeConfig(**DECODER, num_experts=4, num_experts_per_tok=2,
                                                                     experts_implementation="eager",
                                                                     moe_intermediate_size=32,
                                                                     shared_expert_intermediate_size=32)),
    }
    return Logits(configs[name](), "decoder"), (ids, mask), ["input_ids", "attention_mask"]


NAMES = ("gpt2", "bert", "distilbert", "t5", "clip-text", "vit", "llama", "mistral", "qwen2", "mixtral", "qwen2-moe")
