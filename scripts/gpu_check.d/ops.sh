#!/usr/bin/env bash
# hal.ops on a lent GPU (called by scripts/gpu_check.sh, output in its log; or alone).
# The op tests themselves (tests/backend/test_ops_*.py, test_optim_adamw.py) run on cuda in
# gpu_check.sh's backend pass.  This adds:
#  1. hal ops on cuda: the fused kernel each op is declared to use there;
#  2. the path each op took on cuda at realistic sizes (hal.ops.stats()), and fused kernel
#     against torch composition timings on the GPU;
#  3. torch.compile (inductor) of a block of hal ops on cuda, forward and backward;
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export HAL_BACKEND=${HAL_BACKEND:-cuda}
echo "### hal ops (cuda)"
"$PY" -m hal ops
echo "### paths taken on cuda, and fused vs composition timings"
"$PY" - <<'PYEOF'
import json, time, warnings
import torch, hal, hal.ops, hal.optim
warnings.simplefilter("ignore", hal.ops.FallbackWarning)
dev = hal.device()
x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
w = torch.ones(8192, device=dev, dtype=x.dtype)
ang = torch.outer(torch.arange(4096.0, device=dev), torch.ones(64, device=dev))
q = torch.randn(4, 4096, 32, 128, device=dev, dtype=torch.bfloat16)
s = torch.randn(32, 2048, 2048, device=dev, dtype=torch.bfloat16)
calls = {
    "rms_norm": lambda: hal.ops.rms_norm(x, w),
    "add_rms_norm": lambda: hal.ops.rms_norm(x, w, 1e-6, residual=x),
    "add_layer_norm": lambda: hal.ops.layer_norm(x, w, None, 1e-5, residual=x),
    "rotary_embedding": lambda: hal.ops.rotary_embedding(q, ang.cos(), ang.sin()),
    "swiglu": lambda: hal.ops.swiglu(x),
    "gelu": lambda: hal.ops.gelu(x, "tanh"),
    "softmax": lambda: hal.ops.softmax(s, causal=True, scale=0.088),
}
def best(fn, n=10):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    return min(ts) * 1e3
for name, fn in calls.items():
    t_auto = best(fn)
    with hal.ops.use_path("composition"):
        t_comp = best(fn)
    print(f"{name:18} hal {t_auto:8.3f} ms   torch composition {t_comp:8.3f} ms   ratio {t_comp / t_auto:5.2f}x")
m = torch.nn.Linear(4096, 4096).to(dev)
opt = hal.optim.AdamW(m.parameters())
m(torch.randn(8, 4096, device=dev)).sum().backward(); opt.step(); torch.cuda.synchronize()
hal.ops.reset_stats()
for fn in calls.values():
    fn()
opt.step(); torch.cuda.synchronize()
print(json.dumps(hal.ops.stats(), indent=1))
PYEOF
echo "### torch.compile (inductor) of hal ops on cuda, forward and backward"
"$PY" - <<'PYEOF'
import torch, hal, hal.ops
dev = hal.device()
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(256))
        self.proj = torch.nn.Linear(256, 512)
    def forward(self, x):
        return hal.ops.softmax(hal.ops.swiglu(self.proj(hal.ops.rms_norm(x, self.w))), scale=2.0)
m = Block().to(dev)
x = torch.randn(64, 256, device=dev, requires_grad=True)
eager = m(x); eager.sum().backward(); g = x.grad.clone(); x.grad = None
out = torch.compile(m, fullgraph=True)(x); out.sum().backward()
torch.testing.assert_close(out, eager); torch.testing.assert_close(x.grad, g)
print("torch.compile(fullgraph=True) on cuda: forward and backward match eager")
PYEOF
