"""Embedding-dominated models for ``op_coverage quantize`` (random weights, nothing downloaded).

Vocabulary 8192, width 64: the token table is most of the weights, as in a small deployed
transformer.  :func:`llama_tied` ties the LM head to the token table; :func:`lstm_lm` is an
embedding + LSTM + head language model.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

VOCAB, WIDTH, SEQ = 8192, 64, 16


class _First(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model.eval()

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask, return_dict=False, **self.extra)[0]


def _cfg():
    return dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=VOCAB, max_position_embeddings=64)


def llama_tied():
    """A LLaMA-like causal LM (transformers ``LlamaForCausalLM``), input and output embeddings tied."""
    import transformers as t
    torch.manual_seed(0)
    m = _First(t.LlamaForCausalLM(t.LlamaConfig(**_cfg(), num_key_value_heads=2, tie_word_embeddings=True)))
    m.extra = {"use_cache": False}
    return m


def bert():
    """A BERT-like encoder (transformers ``BertModel``); output: the last hidden state."""
    import transformers as t
    torch.manual_seed(0)
    m = _First(t.BertModel(t.BertConfig(**_cfg())))
    m.extra = {}
    return m


class LstmLM(nn.Module):
    """Embedding, a two-layer LSTM and a head over the vocabulary."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.lstm = nn.LSTM(WIDTH, WIDTH, num_layers=2, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids, mask):
        h, _ = self.lstm(self.emb(ids) * mask.unsqueeze(-1).float())
        return self.head(h)


def lstm_lm():
    return LstmLM().eval()


BUILDERS = {"llama": llama_tied, "bert": bert, "lstm": lstm_lm}


def export(name: str, path: Path) -> Path:
    """Export model *name* of :data:`BUILDERS` to *path* (opset 17, dynamic batch and sequence)."""
    import warnings
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(BUILDERS[name](), (ids, mask), str(path), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["out"], dynamic_axes=axes)
    return path
