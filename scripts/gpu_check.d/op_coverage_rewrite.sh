#!/usr/bin/env bash
# op_coverage rewrite on a GPU machine: rewrite an exported BERT-like block for the ort-cuda table
# minus LayerNormalization/Gelu/Softmax/Erf/Gemm, then run the rewrite on onnxruntime's
# CUDAExecutionProvider (when installed) and compare with the original on the CPU.
# Called by scripts/gpu_check.sh; prints its evidence, exits non-zero on a mismatch.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
"$PY" - <<'PYEOF'
import sys, tempfile, warnings
from pathlib import Path
sys.path.insert(0, "tests/op_coverage")
import numpy as np, onnxruntime as ort, torch
from test_torch_export import BertLayer, _export
from op_coverage.rewrite import rewrite
from op_coverage.rewrite.verify import compare

with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    x, mask = torch.randn(2, 64, 256), torch.zeros(2, 64, dtype=torch.bool)
    src = _export(BertLayer(256, 8), (x, mask), Path(d) / "bert.onnx")
    rep = rewrite(str(src), "ort-cuda", Path(d) / "bert.cuda.onnx", without_ops="LayerNormalization,Gelu,Softmax,Erf,Gemm")
    print("rewrite for ort-cuda: replaced", dict(rep.result.replaced), "rescan", rep.rescan["not_native"] or "all native")
    providers = ort.get_available_providers()
    print("onnxruntime", ort.__version__, "providers", providers)
    if "CUDAExecutionProvider" not in providers:
        print("SKIP: CUDAExecutionProvider not installed (pip install onnxruntime-gpu to run this check)")
        sys.exit(0)
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    names = [i.name for i in ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_inputs()]
    feeds = dict(zip(names, feeds.values()))
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = ort.InferenceSession(str(Path(d) / "bert.cuda.onnx"), providers=["CUDAExecutionProvider"])
    print("rewritten model runs on", sess.get_providers())
    got = sess.run(None, feeds)
    checks = [compare(str(i), w, g) for i, (w, g) in enumerate(zip(want, got))]
    for c in checks:
        print(("ok  " if c.ok else "FAIL"), c.name, "max abs", c.max_abs, "max rel", c.max_rel)
    sys.exit(0 if all(c.ok for c in checks) else 1)
PYEOF
