"""hal.ops.softmax: scale, bool/float masks, causal, fully masked rows, gradients."""
import pytest
import torch

import hal.ops
from ops_reference import DTYPES, PATHS, close, on_path, randn, softmax as ref_softmax

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


def bool_mask(shape, device, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) > 0.3).to(device)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "bool", "bool-per-batch", "float", "causal", "causal+bool"])
def test_softmax_matches_reference(hal_backend, path, dtype, kind):
    dev = hal_backend.device()
    x = randn(2, 3, 6, 11, dtype=dtype, device=dev) * 3
    mask = None
    if kind in ("bool", "causal+bool"):
        mask = bool_mask((6, 11), dev)
    elif kind == "bool-per-batch":
        mask = bool_mask((2, 1, 6, 11), dev)  # broadcasts over heads: not a plain tiling
    elif kind == "float":
        mask = randn(1, 6, 11, device=dev, seed=9)
    causal = kind.startswith("causal")
    with on_path(path):
        y = hal.ops.softmax(x, mask, causal=causal, scale=0.37)
    assert y.dtype == dtype
    close(y, ref_softmax(x.cpu(), None if mask is None else mask.cpu(), causal, 0.37))


@pytest.mark.parametrize("path", PATHS)
def test_softmax_fully_masked_row_is_zero_not_nan(hal_backend, path):
    dev = hal_backend.device()
    x = randn(3, 5, device=dev)
    mask = torch.ones(3, 5, dtype=torch.bool, device=dev)
    mask[1] = False
    with on_path(path):
        y = hal.ops.softmax(x, mask)
    assert not torch.isnan(y).any()
    assert torch.equal(y[1].cpu(), torch.zeros(5))
    close(y[0].sum(), torch.tensor(1.0))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_gradient(hal_backend, path, causal):
    dev = hal_backend.device()
    x = randn(2, 7, 7, device=dev).requires_grad_()
    mask = bool_mask((7, 7), dev) | torch.eye(7, dtype=torch.bool, device=dev)
    g = randn(2, 7, 7, device=dev, seed=2)
    with on_path(path):
        hal.ops.softmax(x, mask, causal=causal, scale=0.5).backward(g)
    xr = x.detach().cpu().double().requires_grad_()
    ref_softmax(xr, mask.cpu(), causal, 0.5).backward(g.cpu().double())
    close(x.grad, xr.grad)


def test_softmax_gradcheck_float64_non_contiguous_empty(hal_backend):
    dev = hal_backend.device()
    x = randn(5, 4, dtype=torch.float64, device=dev).t().detach().requires_grad_()  # (4, 5) non-contiguous
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda t: hal.ops.softmax(t, causal=True, scale=0.7), (x,))
    assert hal.ops.softmax(torch.empty(2, 0, 3, device=dev)).shape == (2, 0, 3)


def test_softmax_errors(hal_backend):
    dev = hal_backend.device()
    x = torch.ones(2, 4, 4, device=dev)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast"):
        hal.ops.softmax(x, torch.ones(3, 4, dtype=torch.bool, device=dev))
    with pytest.raises(TypeError, match="mask has dtype torch.int64"):
        hal.ops.softmax(x, torch.ones(4, 4, dtype=torch.long, device=dev))
    with pytest.raises(ValueError, match="causal=True needs"):
        hal.ops.softmax(torch.ones(4, device=dev), causal=True)
