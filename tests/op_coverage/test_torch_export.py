"""Real architectures: BERT-like and LLaMA-like blocks exported from torch, scanned side by side."""
import importlib.util
import warnings

import pytest
import torch
from torch import nn

from op_coverage import render, scan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("onnxscript") is None,
                       reason="torch.onnx.export (dynamo) needs onnxscript; pip install onnxscript"),
]
TARGETS = ["ort-cpu", "ort-cuda", "tensorrt", "ascend", "openvino", "musa", "ort-live"]


class BertLayer(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        a, _ = self.attn(x, x, x, key_padding_mask=mask, need_weights=False)
        x = self.ln1(x + a)
        return self.ln2(x + self.ff(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaBlock(nn.Module):
    def __init__(self, d=32, heads=4, hidden=64):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)

    def rope(self, x):
        t = x.shape[-2]
        inv = 1.0 / (10000 ** (torch.arange(0, self.dh, 2, dtype=torch.float32) / self.dh))
        f = torch.outer(torch.arange(t, dtype=torch.float32), inv)
        cos, sin = f.cos(), f.sin()
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def _export(module, args, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=True, external_data=False)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch")
    torch.manual_seed(0)
    bert = _export(BertLayer(), (torch.randn(2, 8, 32), torch.zeros(2, 8, dtype=torch.bool)), d / "bert.onnx")
    llama = _export(LlamaBlock(), (torch.randn(2, 8, 32),), d / "llama.onnx")
    return {"bert": bert, "llama": llama}


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_exported_block_scans_against_several_targets(exported, arch):
    report = scan(exported[arch], TARGETS, progress=False)
    m = report.models[0]
    assert [t.name for t in m.targets] == TARGETS
    assert m.model["nodes"] > 10
    matmul = next(r for r in m.rows if r.op_type in ("MatMul", "Gemm"))
    assert matmul.support["ort-cpu"]["status"] == "native"
    # the installed onnxruntime runs the exported model, so the live probe must agree
    live = next(t for t in m.targets if t.name == "ort-live")
    assert live.nodes_by_status["unsupported"] == 0, render(report, "md")
    text = render(report, "table")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_exported_weights_are_counted_per_op_type(exported):
    m = scan(exported["llama"], ["ort-cpu"], progress=False).models[0]
    params = sum(p.numel() for p in LlamaBlock().parameters()) * 4
    # every parameter lands on some op (MatMul weights, the RMSNorm Mul); constants fold in too
    assert m.model["weight_bytes"] >= params * 0.9
