"""onnxruntime CPU latency of rewritten vs original models (baseline: the original model, same session options).

Cases:
  * bert, llama: a BERT-like and a LLaMA-like block exported from torch, rewritten for
    "ort-cpu without LayerNormalization, Gelu, Softmax, Erf, Gemm" (Erf by its series
    approximation: 40 nodes per GELU); bert-erf: the same target with Erf;
  * mobilenetv3: torchvision's MobileNetV3-small layout (tests/op_coverage/zoo_torch.py),
    opset 18, rewritten for musa (HardSwish and HardSigmoid through their ONNX bodies).
Each case is rewritten twice, with op_coverage.plan.fold (the default) and without it.

Both sessions use one intra-op and one inter-op thread. Runs alternate between the
original and the rewritten session (original first on even runs, rewritten first on odd
ones), so machine noise hits both alike. A repeat is --runs such pairs. Its ratio is
median(rewritten) / median(original). The bench prints the median ratio over --repeats
with its min and max. It also saves the graph onnxruntime optimises each model into and
counts the fused ops and Casts in it, which shows where onnxruntime re-fuses the emitted
patterns and where it does not.

Usage: python bench/bench_rewrite_latency.py [--runs 30] [--repeats 5] [--d 256] [--seq 128]
                                              [--cases bert,llama,mobilenetv3]
Goal (issue 13, item 8): ratio <= 1.10.
"""
import argparse
import statistics
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "op_coverage"))

LACKING = "LayerNormalization,Gelu,Softmax,Erf,Gemm"
FUSED = {"LayerNormalization", "SkipLayerNormalization", "Gelu", "FastGelu", "BiasGelu", "Softmax", "Gemm",
         "FusedMatMul", "Attention", "MultiHeadAttention", "SimplifiedLayerNormalization", "FusedGemm", "Erf",
         "FusedConv", "HardSwish", "HardSigmoid", "Cast"}


def session(path, optimized_to=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if optimized_to:
        so.optimized_model_filepath = str(optimized_to)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def optimized_ops(path, tmp: Path) -> tuple[int, dict]:
    import onnx
    to = tmp / (Path(path).stem + ".ort-optimized.onnx")
    session(path, to)
    m = onnx.load(str(to), load_external_data=False)
    c = Counter(n.op_type for n in m.graph.node)
    return len(m.graph.node), {k: v for k, v in sorted(c.items()) if k in FUSED}


def ratios(orig, new, feeds, runs, repeats) -> list[tuple]:
    from op_coverage.quantize.metrics import interleaved

    return interleaved(session(orig), session(new), feeds, runs, repeats, warmup=5)


def cases(a, tmp: Path):
    import torch

    from test_torch_export import BertLayer, LlamaBlock  # the blocks the op_coverage tests export
    from test_torch_export import _export
    from zoo_torch import MobileNetV3Small, export

    torch.manual_seed(0)
    x = torch.randn(1, a.seq, a.d)
    mask = torch.zeros(1, a.seq, dtype=torch.bool)
    if "bert" in a.cases:
        bert = _export(BertLayer(a.d, 8), (x, mask), tmp / "bert.onnx")
        yield "bert", bert, (x, mask), "ort-cpu", a.lacking
        # with Erf on the target, GELU is exact and onnxruntime re-fuses it
        kept = ",".join(op for op in a.lacking.split(",") if op != "Erf")
        if kept != a.lacking:
            yield "bert-erf", bert, (x, mask), "ort-cpu", kept
    if "llama" in a.cases:
        yield "llama", _export(LlamaBlock(a.d, 8, 4 * a.d), (x,), tmp / "llama.onnx"), (x,), "ort-cpu", a.lacking
    if "mobilenetv3" in a.cases:
        img = torch.randn(1, 3, 224, 224)
        yield "mobilenetv3", export(MobileNetV3Small(), (img,), tmp / "mobilenetv3.onnx"), (img,), "musa", None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="alternating run pairs per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--d", type=int, default=256, help="width of bert and llama")
    ap.add_argument("--seq", type=int, default=128, help="sequence length of bert and llama")
    ap.add_argument("--lacking", default=LACKING, help=f"ops ort-cpu lacks for bert and llama (default {LACKING})")
    ap.add_argument("--cases", default="bert,llama,mobilenetv3")
    a = ap.parse_args()

    from op_coverage.rewrite import rewrite

    print(f"onnxruntime CPU, 1 intra-op thread; bert/llama batch 1, seq {a.seq}, width {a.d}; mobilenetv3 "
          f"1x3x224x224; {a.repeats} repeats of {a.runs} alternating run pairs; ratio = rewritten / original, "
          "median (min, max) over repeats")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tmp = Path(tmp)
        for name, src, args, target, lacking in cases(a, tmp):
            feeds = {i.name: v.numpy() for i, v in zip(session(src).get_inputs(), args)}
            n0, f0 = optimized_ops(src, tmp)
            print(f"\n{name}: target {target}" + (f" without {lacking}" if lacking else "") +
                  f"; original: {len(__import__('onnx').load(str(src)).graph.node)} nodes, onnxruntime runs "
                  f"{n0} ({f0})")
            for fold in (True, False):
                out = tmp / f"{name}.{'folded' if fold else 'unfolded'}.onnx"
                rep = rewrite(src, target, out, without_ops=lacking, fold=fold)
                assert rep.verification.ok
                n1, f1 = optimized_ops(out, tmp)
                r = ratios(src, out, feeds, a.runs, a.repeats)
                rs = [x[0] for x in r]
                print(f"  rewritten, fold {'on ' if fold else 'off'}: {rep.rescan['nodes']} nodes, onnxruntime runs "
                      f"{n1} ({f1})")
                print(f"    original {statistics.median(x[1] for x in r) * 1e3:.3f} ms, rewritten "
                      f"{statistics.median(x[2] for x in r) * 1e3:.3f} ms; ratio {statistics.median(rs):.3f} "
                      f"(min {min(rs):.3f}, max {max(rs):.3f})")
                if fold:
                    print(f"    replaced {dict(rep.result.replaced)}; folded {dict(rep.result.folded)}; max abs "
                          f"error {max(o.max_abs for o in rep.verification.outputs):.2e}")


if __name__ == "__main__":
    main()
