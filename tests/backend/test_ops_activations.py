"""hal.ops.swiglu and hal.ops.gelu (exact and tanh) on every backend and path."""
import pytest
import torch

import hal.ops
from ops_reference import DTYPES, PATHS, close, on_path, randn, gelu as ref_gelu, swiglu as ref_swiglu

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_matches_reference(hal_backend, path, dtype):
    dev = hal_backend.device()
    x = randn(3, 7, 2 * 37, dtype=dtype, device=dev) * 3
    with on_path(path):
        y = hal.ops.swiglu(x)
    assert y.shape == (3, 7, 37) and y.dtype == dtype
    close(y, ref_swiglu(x.cpu()))


@pytest.mark.parametrize("path", PATHS)
def test_swiglu_gradient(hal_backend, path):
    dev = hal_backend.device()
    x = (randn(5, 22, device=dev) * 3).requires_grad_()
    g = randn(5, 11, device=dev, seed=1)
    with on_path(path):
        hal.ops.swiglu(x).backward(g)
    xr = x.detach().cpu().double().requires_grad_()
    ref_swiglu(xr).backward(g.cpu().double())
    close(x.grad, xr.grad)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_matches_reference(hal_backend, path, approximate, dtype):
    dev = hal_backend.device()
    x = randn(4, 9, 31, dtype=dtype, device=dev) * 4
    with on_path(path):
        y = hal.ops.gelu(x, approximate=approximate)
    close(y, ref_gelu(x.cpu(), approximate))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradient_on_non_contiguous_input(hal_backend, path, approximate):
    dev = hal_backend.device()
    base = (randn(13, 6, device=dev) * 4).requires_grad_()
    x = base.t()
    g = randn(6, 13, device=dev, seed=1)
    with on_path(path):
        hal.ops.gelu(x, approximate).backward(g)
    xr = base.detach().cpu().double().requires_grad_()
    ref_gelu(xr.t(), approximate).backward(g.cpu().double())
    close(base.grad, xr.grad)


def test_activation_gradcheck_float64_and_empty(hal_backend):
    dev = hal_backend.device()
    x = randn(3, 8, dtype=torch.float64, device=dev).requires_grad_()
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(hal.ops.swiglu, (x,))
        assert torch.autograd.gradcheck(lambda t: hal.ops.gelu(t, "tanh"), (x,))
        assert torch.autograd.gradcheck(lambda t: hal.ops.gelu(t, "none"), (x,))
    assert hal.ops.swiglu(torch.empty(0, 4, device=dev)).shape == (0, 2)
    assert hal.ops.gelu(torch.empty(0, device=dev)).shape == (0,)


def test_activation_errors(hal_backend):
    dev = hal_backend.device()
    with pytest.raises(ValueError, match="last dim must be even"):
        hal.ops.swiglu(torch.ones(2, 5, device=dev))
    with pytest.raises(ValueError, match="approximate='fast' is not known"):
        hal.ops.gelu(torch.ones(2, device=dev), approximate="fast")
