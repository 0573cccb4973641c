"""autocast("cuda", float16) under the shim on the cpu backend gives every op CUDA's output dtype:
checked op by op against the emulator, whose autocast (PrivateUse1) registers CUDA's lists.
(The whole AMP step through hal run: tests/dist/test_hal_run_amp_policy.py.)"""
import pytest
import torch
import torch.nn.functional as F

import hal.redirect
from hal.plugin.registry import Registry
from hal.redirect._autocast_policy import cuda_policy

pytestmark = pytest.mark.emu

#: ops of a training step, in and out of CUDA's lists
OPS = {
 "exp": lambda x: x.exp(), "log": lambda x: x.abs().add(1).log(), "rsqrt": lambda x: x.abs().add(1).rsqrt(), "pow": lambda x: x ** 2,
 "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: F.log_softmax(x, -1), "sum": lambda x: x.sum(), "cumsum": lambda x: x.cumsum(0),
 "prod": lambda x: x.prod(), "layer_norm": lambda x: F.layer_norm(x, (8,)), "group_norm": lambda x: F.group_norm(x, 2),
 "mse_loss": lambda x: F.mse_loss(x, x), "cross_entropy": lambda x: F.cross_entropy(x, torch.zeros(8, dtype=torch.long, device=x.device)),
 "nll_loss": lambda x: F.nll_loss(x, torch.zeros(8, dtype=torch.long, device=x.device)), "logsumexp": lambda x: x.logsumexp(-1),
 "norm": lambda x: x.norm(), "vector_norm": lambda x: torch.linalg.vector_norm(x), "mm": lambda x: x @ x, "linear": lambda x: F.linear(x, x),
 "bmm": lambda x: torch.bmm(x[None], x[None]), "mv": lambda x: torch.mv(x, x[0]), "addmm": lambda x: torch.addmm(x, x, x),
 "relu": lambda x: F.relu(x), "gelu": lambda x: F.gelu(x), "silu": lambda x: F.silu(x), "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(),
 "add": lambda x: x + 1, "mean": lambda x: x.mean(), "max_pool2d": lambda x: F.max_pool2d(x[None, None], 2), "avg_pool2d": lambda x: F.avg_pool2d(x[None, None], 2),
 "interpolate": lambda x: F.interpolate(x[None, None], scale_factor=2, mode="bilinear"), "dropout": lambda x: F.dropout(x, 0.0),
 "addcmul": lambda x: torch.addcmul(x, x, x.float()), "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
 "conv2d": lambda x: F.conv2d(x[None, None], x[None, None, :3, :3]), "sdpa": lambda x: F.scaled_dot_product_attention(x[None], x[None], x[None]),
 "embedding": lambda x: F.embedding(torch.zeros(2, dtype=torch.long, device=x.device), x), "softplus": lambda x: F.softplus(x),
 "topk": lambda x: x.topk(2)[0], "sort": lambda x: x.sort()[0], "binary_cross_entropy_with_logits": lambda x: F.binary_cross_entropy_with_logits(x, x.float().sigmoid()),
 "cosine_similarity": lambda x: F.cosine_similarity(x, x), "normalize": lambda x: F.normalize(x), "var": lambda x: x.var(), "std": lambda x: x.std(),
 "max_pool3d": lambda x: F.max_pool3d(x[None, None, None].expand(1,1,2,8,8), 2), "pad_reflect": lambda x: F.pad(x[None,None], (1,1,1,1), mode="reflect"),
 "grid_sample": lambda x: F.grid_sample(x[None,None], torch.zeros(1,2,2,2, device=x.device, dtype=x.dtype)), "mean_dim": lambda x: x.mean(0), "amax": lambda x: x.amax(),
 "div": lambda x: x / 3, "sqrt": lambda x: x.abs().sqrt(), "cumprod": lambda x: x.cumprod(0), "erfinv": lambda x: (x*0.1).erfinv(),
}


def dtypes(device, autocast_type):
    out = {}
    for name, f in OPS.items():
        for src in (torch.float32, torch.float16):
            x = torch.randn(8, 8, device=device, dtype=src)
            try:
                with torch.autocast(autocast_type, torch.float16):
                    out[name, str(src)] = f(x).dtype
            except Exception as exc:  # an op one side refuses must be refused by the other too
                out[name, str(src)] = type(exc).__name__
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_op_has_cudas_dtype_under_autocast_cuda_on_the_cpu_backend(clean_registry):
    emu = Registry(env={"HAL_BACKEND": "emu"}).selected().backend
    with hal.redirect.enable(emu):
        want = dtypes("emu:0", "emu")
    cpu = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend
    with hal.redirect.enable(cpu):
        got = dtypes("cpu", "cuda")
        assert torch.overrides._get_current_function_mode_stack() == []  # nothing left outside autocast
    assert {k: (got[k], want[k]) for k in want if got[k] != want[k]} == {}
    assert want["log_softmax", "torch.float16"] == torch.float32 and want["mm", "torch.float32"] == torch.float16


def test_the_policy_names_torch_ops():
    policy = cuda_policy()
    assert policy["layer_norm"] == policy["sum"] == policy["__pow__"] == "fp32" and policy["linear"] == "lower_precision"
    ops = {s.name.partition("::")[2] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    unknown = [n for n in policy if n not in ops and not hasattr(torch.Tensor, n) and not hasattr(F, n)
               and not hasattr(torch.linalg, n)]
    assert unknown == []


@pytest.mark.parametrize("name", ["cpu", "emu"])
def test_autocast_cuda_float32_leaves_a_float32_model_as_it_is_without_a_warning(clean_registry, name):
    """torchtitan's one-device "AMP" with float32 parameters enters torch.autocast("cuda", dtype=torch.float32):
    CUDA takes it silently; the backend's autocast has no float32, so the shim does not enter it and says so
    (torch would warn "the target dtype is not supported" on every step; warnings are errors here)."""
    backend = Registry(env={"HAL_BACKEND": name}).selected().backend
    with hal.redirect.enable(backend) as t:
        x = torch.randn(4, 8, device="cuda")
        w = torch.randn(8, 8, device="cuda")
        with torch.autocast("cuda", dtype=torch.float32):
            y = F.linear(x, w).softmax(-1)
        rows = t.log.rows("redirected")
    assert y.dtype == torch.float32
    assert torch.equal(y, F.linear(x, w).softmax(-1))
    assert any(r["call"] == "torch.autocast('cuda')" and "not entered" in r["detail"] for r in rows), rows
