"""hal.ops.rotary_embedding: half-split and interleaved pairs, every layout, every path."""
import pytest
import torch

import hal.ops
from ops_reference import DTYPES, PATHS, close, on_path, randn, rotary as ref_rotary

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


def tables(positions, half, device):
    inv = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float64) / half)
    ang = torch.outer(torch.arange(positions, dtype=torch.float64), inv)
    return ang.cos().float().to(device), ang.sin().float().to(device)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_bshd_matches_reference(hal_backend, path, interleaved, dtype):
    dev = hal_backend.device()
    x = randn(2, 5, 3, 16, dtype=dtype, device=dev)
    cos, sin = tables(9, 8, dev)  # a longer cache than the sequence
    with on_path(path):
        y = hal.ops.rotary_embedding(x, cos, sin, interleaved=interleaved)
    close(y, ref_rotary(x.cpu(), cos.cpu(), sin.cpu(), interleaved, 1))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seq_dim,shape", [(0, (5, 2, 3, 12)), (-2, (2, 3, 5, 12)), (0, (5, 12))],
                         ids=["sbhd", "bhsd", "sd"])
def test_rotary_other_layouts_and_partial_rotary(hal_backend, path, seq_dim, shape):
    dev = hal_backend.device()
    x = randn(*shape, device=dev)
    cos, sin = tables(5, 4, dev)  # rotary_dim 8 of head_dim 12: the last 4 features pass through
    with on_path(path):
        y = hal.ops.rotary_embedding(x, cos, sin, seq_dim=seq_dim)
    close(y, ref_rotary(x.cpu(), cos.cpu(), sin.cpu(), False, seq_dim))
    assert torch.equal(y[..., 8:].cpu(), x[..., 8:].cpu())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
def test_rotary_gradient_is_inverse_rotation(hal_backend, path, interleaved):
    dev = hal_backend.device()
    x = randn(1, 4, 2, 8, device=dev).requires_grad_()
    cos, sin = tables(4, 4, dev)
    g = randn(1, 4, 2, 8, device=dev, seed=3)
    with on_path(path):
        hal.ops.rotary_embedding(x, cos, sin, interleaved).backward(g)
    xr = x.detach().cpu().double().requires_grad_()
    ref_rotary(xr, cos.cpu(), sin.cpu(), interleaved, 1).backward(g.cpu().double())
    close(x.grad, xr.grad)


def test_rotary_gradcheck_float64_and_non_contiguous(hal_backend):
    dev = hal_backend.device()
    cos, sin = tables(3, 2, dev)
    x = randn(2, 3, 4, dtype=torch.float64, device=dev).transpose(0, 1).detach().requires_grad_()  # (3, 2, 4)
    assert not x.is_contiguous()
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda t: hal.ops.rotary_embedding(t, cos.double(), sin.double(),
                                                                           seq_dim=0), (x,))


def test_rotary_refuses_bad_tables(hal_backend):
    dev = hal_backend.device()
    x = randn(1, 4, 2, 8, device=dev)
    cos, sin = tables(4, 8, dev)
    with pytest.raises(ValueError, match="cover 16 rotary dims but x's head dim is 8"):
        hal.ops.rotary_embedding(x, cos, sin)
    cos, sin = tables(3, 4, dev)
    with pytest.raises(ValueError, match="hold 3 positions but x has 4"):
        hal.ops.rotary_embedding(x, cos, sin)
    with pytest.raises(ValueError, match="seq_dim=3 is not a sequence dim"):
        hal.ops.rotary_embedding(x, *tables(8, 4, dev), seq_dim=3)
    with pytest.raises(ValueError, match="cos requires grad"):
        c, s = tables(4, 4, dev)
        hal.ops.rotary_embedding(x, c.requires_grad_(), s)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rotary_tables_in_the_model_dtype_give_the_bytes_of_float32_tables(hal_backend, dtype):
    # models keep cos/sin in their own dtype; the host kernel reads such tables as float32 (no copy per call)
    dev = hal_backend.device()
    x = randn(2, 5, 3, 16, dtype=dtype, device=dev)
    cos, sin = (t.to(dtype) for t in tables(5, 8, dev))
    for path in PATHS:
        with on_path(path):
            y = hal.ops.rotary_embedding(x, cos, sin)
            y32 = hal.ops.rotary_embedding(x, cos.float(), sin.float())
        assert torch.equal(y, y32), path
