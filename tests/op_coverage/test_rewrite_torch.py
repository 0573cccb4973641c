"""BERT-like and LLaMA-like blocks exported from torch, rewritten for a target lacking
LayerNormalization, Gelu, Softmax, Erf and Gemm: none remain and outputs match."""
import importlib.util
import json

import numpy as np
import onnx
import pytest

from rw_helpers import ops_in
from op_coverage.rewrite import rewrite

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("onnxscript") is None,
                       reason="torch.onnx.export (dynamo) needs onnxscript; pip install onnxscript"),
]
LACKING = "LayerNormalization,Gelu,Softmax,Erf,Gemm"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import torch

    from test_torch_export import BertLayer, LlamaBlock  # the scan tests' blocks
    from test_torch_export import _export as export
    d = tmp_path_factory.mktemp("torch")
    torch.manual_seed(0)
    return {"bert": export(BertLayer(), (torch.randn(2, 8, 32), torch.zeros(2, 8, dtype=torch.bool)), d / "bert.onnx"),
            "llama": export(LlamaBlock(), (torch.randn(2, 8, 32),), d / "llama.onnx")}


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_exported_block_rewritten_for_a_target_lacking_the_usual_suspects(exported, arch, tmp_path):
    src = str(exported[arch])
    before = ops_in(onnx.load(src))
    assert before & set(LACKING.split(",")), before  # the export really uses some of them
    out = tmp_path / f"{arch}.rewritten.onnx"
    rep = rewrite(src, "ort-cpu", out, without_ops=LACKING)
    after = ops_in(onnx.load(str(out)))
    assert not after & set(LACKING.split(",")), after
    assert rep.verification.ok, json.dumps(rep.verification.to_dict(), indent=1)
    assert rep.rescan["not_native"] == {}
    assert max(o.max_abs for o in rep.verification.outputs) < 1e-4
    if arch == "bert":  # the planner prefers the LayerNorm pattern onnxruntime re-fuses over ONNX's body
        assert rep.result.plans["LayerNormalization"]["via"] == ["layernorm.reducemean"]


def test_bert_padding_mask_is_respected_after_rewrite(exported, tmp_path):
    """A user-given mask (last two tokens padded) goes through --inputs, not random values."""
    out = tmp_path / "bert.onnx"
    mask = np.zeros((2, 8), bool)
    mask[:, -2:] = True
    np.savez(tmp_path / "in.npz", **{n: v for n, v in zip(
        [i.name for i in onnx.load(str(exported["bert"])).graph.input],
        [np.random.default_rng(3).standard_normal((2, 8, 32)).astype(np.float32), mask])})
    rep = rewrite(str(exported["bert"]), "ort-cpu", out, without_ops=LACKING, inputs=[str(tmp_path / "in.npz")])
    assert rep.verification.ok and rep.verification.inputs.endswith("in.npz")
