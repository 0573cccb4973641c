#!/usr/bin/env bash
# hal.ops on a lent GPU: the op tests on cuda through the hal_backend fixture, the kernel
# table hal would use there, and the host-kernel benchmark.  Writes its evidence under
# docs/validation/ops-gpu-<date>/ (commit that folder).  Run from the repository root:
#   scripts/gpu_check_ops.sh            # or: PYTHON=/path/to/python scripts/gpu_check_ops.sh
# Exit status: that of the pytest run.
set -u
PY=${PYTHON:-python}
OUT=${HAL_GPU_EVIDENCE:-docs/validation/ops-gpu-$(date +%Y-%m-%d)}
mkdir -p "$OUT"
"$PY" - <<'PYEOF' > "$OUT/environment.txt" 2>&1
import torch, platform
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
print("python", platform.python_version())
PYEOF
cat "$OUT/environment.txt"
# which fused kernel each op uses on the GPU, before and after running the tests
HAL_BACKEND=cuda "$PY" -m hal ops --json > "$OUT/hal-ops-cuda.json" 2>&1 || true
HAL_BACKEND=cuda "$PY" -m hal ops | tee "$OUT/hal-ops-cuda.txt"
# the op tests: the hal_backend fixture runs each on cpu and cuda; JUnit XML keeps the per-test record
"$PY" -m pytest tests/backend/test_ops_norms.py tests/backend/test_ops_rotary.py \
    tests/backend/test_ops_activations.py tests/backend/test_ops_softmax.py tests/backend/test_ops_vision.py \
    tests/backend/test_optim_adamw.py tests/unit/test_ops_compile.py -q -rs \
    --junitxml="$OUT/pytest-ops.xml" 2>&1 | tee "$OUT/pytest-ops.txt"
status=${PIPESTATUS[0]}
# paths taken on cuda at realistic size (fused kernel vs fallback), as hal.ops.stats() counts them
HAL_BACKEND=cuda "$PY" - <<'PYEOF' 2>&1 | tee "$OUT/cuda-paths.txt"
import json, warnings, torch, hal, hal.ops, hal.optim
warnings.simplefilter("ignore", hal.ops.FallbackWarning)
dev = hal.device()
x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); w = torch.ones(4096, device=dev, dtype=x.dtype)
hal.ops.rms_norm(x, w); hal.ops.layer_norm(x, w, None, 1e-5, residual=x); hal.ops.swiglu(x); hal.ops.gelu(x)
ang = torch.outer(torch.arange(2048.0, device=dev), torch.ones(64, device=dev))
hal.ops.rotary_embedding(torch.randn(1, 2048, 32, 128, device=dev), ang.cos(), ang.sin())
hal.ops.softmax(torch.randn(8, 1024, 1024, device=dev), causal=True, scale=0.125)
m = torch.nn.Linear(1024, 1024).to(dev); opt = hal.optim.AdamW(m.parameters()); m(torch.randn(8, 1024, device=dev)).sum().backward(); opt.step()
torch.cuda.synchronize()
print(json.dumps(hal.ops.stats(), indent=1))
PYEOF
"$PY" bench/bench_host_kernels.py --no-compile --json "$OUT/bench-host-kernels.json" 2>&1 | tee "$OUT/bench-host-kernels.txt"
echo "evidence in $OUT (pytest exit status $status)"
exit "$status"
