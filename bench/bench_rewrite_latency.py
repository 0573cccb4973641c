"""onnxruntime CPU latency of rewritten vs original models (baseline: the original model, same session options).

Exports a BERT-like and a LLaMA-like block from torch, rewrites each for "ort-cpu without
LayerNormalization, Gelu, Softmax, Erf, Gemm" (op_coverage rewrite's library call), then times
both in onnxruntime side by side (alternating runs, median).  It also saves the graph
onnxruntime optimises each model into and counts the fused ops in it, which shows where
onnxruntime re-fuses the emitted patterns (and where it does not).

Usage: python bench/bench_rewrite_latency.py [--runs 50] [--d 256] [--seq 128] [--threads 2] [--lacking OPS]
"""
import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "op_coverage"))

LACKING = "LayerNormalization,Gelu,Softmax,Erf,Gemm"
FUSED = {"LayerNormalization", "SkipLayerNormalization", "Gelu", "FastGelu", "BiasGelu", "Softmax", "Gemm",
         "FusedMatMul", "Attention", "MultiHeadAttention", "SimplifiedLayerNormalization", "FusedGemm", "Erf"}


def session(path, threads, optimized_to=None, level=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if level is not None:
        so.graph_optimization_level = level
    if optimized_to:
        so.optimized_model_filepath = str(optimized_to)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def fused_ops(path):
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    c = Counter(n.op_type for n in m.graph.node)
    return {k: v for k, v in sorted(c.items()) if k in FUSED}


def bench_pair(orig, new, feeds, runs, threads):
    a, b = session(orig, threads), session(new, threads)
    for s in (a, b):
        for _ in range(5):
            s.run(None, feeds)
    ta, tb = [], []
    for _ in range(runs):
        for s, t in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            s.run(None, feeds)
            t.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--d", type=int, default=256, help="model width")
    ap.add_argument("--seq", type=int, default=128, help="sequence length")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lacking", default=LACKING, help=f"ops the target lacks (default {LACKING})")
    a = ap.parse_args()

    import torch

    from op_coverage.rewrite import rewrite
    from test_torch_export import BertLayer, LlamaBlock  # the blocks the op_coverage tests export
    from test_torch_export import _export as export

    torch.manual_seed(0)
    x = torch.randn(1, a.seq, a.d)
    mask = torch.zeros(1, a.seq, dtype=torch.bool)
    cases = {"bert": (BertLayer(a.d, 8), (x, mask)), "llama": (LlamaBlock(a.d, 8, 4 * a.d), (x,))}
    print(f"onnxruntime CPU, {a.threads} threads, batch 1, seq {a.seq}, width {a.d}; median of {a.runs} runs each")
    print(f"target: ort-cpu without {a.lacking}")
    print(f"{'model':8} {'original ms':>12} {'rewritten ms':>13} {'ratio':>7}   fused ops after onnxruntime "
          "optimisation (original | rewritten)")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tmp = Path(tmp)
        for name, (mod, args) in cases.items():
            src = export(mod, args, tmp / f"{name}.onnx")
            out = tmp / f"{name}.rewritten.onnx"
            rep = rewrite(src, "ort-cpu", out, without_ops=a.lacking)
            assert rep.verification.ok
            feeds = {i.name: v.numpy() for i, v in zip(session(src, 1).get_inputs(), args)}
            to, tn = bench_pair(src, out, feeds, a.runs, a.threads)
            session(src, 1, tmp / f"{name}.opt.onnx")
            session(out, 1, tmp / f"{name}.rewritten.opt.onnx")
            fo, fn = fused_ops(tmp / f"{name}.opt.onnx"), fused_ops(tmp / f"{name}.rewritten.opt.onnx")
            print(f"{name:8} {to * 1e3:12.3f} {tn * 1e3:13.3f} {tn / to:7.2f}   {fo} | {fn}")
            print(f"{'':8} replaced: {dict(rep.result.replaced)}; max abs error "
                  f"{max(o.max_abs for o in rep.verification.outputs):.2e}")


if __name__ == "__main__":
    main()
