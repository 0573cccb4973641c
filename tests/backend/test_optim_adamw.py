"""hal.optim.AdamW / hal.ops.fused_adamw_ against torch.optim.AdamW, step for step."""
import copy

import pytest
import torch

import hal.ops
import hal.optim
from ops_reference import PATHS, on_path

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


def model(device, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(13, 31), torch.nn.Tanh(), torch.nn.Linear(31, 3)).to(device, dtype)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("maximize", [False, True])
def test_adamw_matches_torch_over_100_steps(hal_backend, path, maximize):
    dev = hal_backend.device()
    m_ref = model(dev)
    m_hal = copy.deepcopy(m_ref)
    kw = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, maximize=maximize)
    opt_ref = torch.optim.AdamW(m_ref.parameters(), foreach=False, **kw)
    opt_hal = hal.optim.AdamW(m_hal.parameters(), **kw)
    gen = torch.Generator().manual_seed(1)
    with on_path(path):
        for _ in range(100):
            x = torch.randn(16, 13, generator=gen).to(dev)
            for m, opt in ((m_ref, opt_ref), (m_hal, opt_hal)):
                opt.zero_grad()
                m(x).pow(2).mean().backward()
                opt.step()
    for p_ref, p_hal in zip(m_ref.parameters(), m_hal.parameters()):
        torch.testing.assert_close(p_hal, p_ref, atol=2e-6, rtol=1e-5)
    s_ref, s_hal = opt_ref.state_dict()["state"], opt_hal.state_dict()["state"]
    for i in s_ref:
        assert float(s_hal[i]["step"]) == float(s_ref[i]["step"]) == 100
        torch.testing.assert_close(s_hal[i]["exp_avg_sq"], s_ref[i]["exp_avg_sq"], atol=1e-9, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adamw_low_precision_params_track_torch(hal_backend, dtype):
    dev = hal_backend.device()
    p_ref = torch.nn.Parameter(torch.linspace(-1, 1, 257, device=dev, dtype=dtype))
    p_hal = torch.nn.Parameter(p_ref.detach().clone())
    # eps=1e-4: torch's float16 update rounds eps=1e-8 to 0 and divides 0 by 0 where a grad is 0
    opt_ref = torch.optim.AdamW([p_ref], lr=1e-2, eps=1e-4, foreach=False)
    opt_hal = hal.optim.AdamW([p_hal], lr=1e-2, eps=1e-4)
    for step in range(10):
        g = torch.sin(torch.arange(257, device=dev, dtype=torch.float32) * (step + 1)).to(dtype)
        p_ref.grad, p_hal.grad = g.clone(), g.clone()
        opt_ref.step()
        opt_hal.step()
    # the kernel rounds once per state update where torch rounds after every op
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(p_hal.float(), p_ref.float(), atol=tol, rtol=tol)


def test_adamw_state_dict_loads_into_torch_adamw(hal_backend):
    dev = hal_backend.device()
    m = model(dev)
    opt = hal.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.randn(4, 13, device=dev)).sum().backward()
    opt.step()
    other = torch.optim.AdamW(m.parameters(), lr=1e-3)
    other.load_state_dict(opt.state_dict())
    assert float(other.state_dict()["state"][0]["step"]) == 1


def test_adamw_skips_params_without_grad_and_rejects_bad_args(hal_backend):
    dev = hal_backend.device()
    a = torch.nn.Parameter(torch.ones(3, device=dev))
    b = torch.nn.Parameter(torch.ones(3, device=dev))
    opt = hal.optim.AdamW([a, b], lr=0.1)
    a.grad = torch.ones(3, device=dev)
    opt.step()
    assert torch.equal(b.detach().cpu(), torch.ones(3)) and not torch.equal(a.detach().cpu(), torch.ones(3))
    assert b not in opt.state
    with pytest.raises(ValueError, match="amsgrad=True is not supported"):
        hal.optim.AdamW([a], amsgrad=True)
    with pytest.raises(ValueError, match="invalid beta at index 1"):
        hal.optim.AdamW([a], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="step=0"):
        hal.ops.fused_adamw_([a.detach()], [a.grad], [a.grad.clone()], [a.grad.clone()], lr=1.0, beta1=0.9,
                             beta2=0.9, eps=1e-8, weight_decay=0.0, step=0)


def test_host_kernel_updates_non_contiguous_and_device_tensors_in_place(hal_backend):
    """The host fallback stages device / strided tensors through host memory and writes back."""
    dev = hal_backend.device()
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(8, 6, generator=gen)
    p_ref = torch.nn.Parameter(base.t().contiguous().to(dev))
    p_hal = torch.nn.Parameter(base.to(dev).t())  # a transposed (non-contiguous) view
    assert not p_hal.is_contiguous()
    opt_ref = torch.optim.AdamW([p_ref], lr=1e-2, foreach=False)
    opt_hal = hal.optim.AdamW([p_hal], lr=1e-2)
    with on_path("host"):
        for _ in range(5):
            g = torch.randn(6, 8, generator=gen).to(dev)
            p_ref.grad, p_hal.grad = g.clone(), g.clone()
            opt_ref.step()
            opt_hal.step()
    assert p_hal.device == p_ref.device
    torch.testing.assert_close(p_hal.detach(), p_ref.detach(), atol=2e-6, rtol=1e-5)
