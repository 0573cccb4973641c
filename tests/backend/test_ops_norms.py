"""hal.ops.rms_norm and hal.ops.layer_norm (with fused residual add) on every backend and path."""
import pytest
import torch

import hal.ops
from ops_reference import DTYPES, PATHS, close, on_path, randn, rms_norm as ref_rms, layer_norm as ref_ln

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_float64_reference(hal_backend, path, dtype):
    dev = hal_backend.device()
    x = randn(3, 5, 67, dtype=dtype, device=dev)
    w = randn(67, dtype=dtype, device=dev, seed=1)
    with on_path(path):
        y = hal.ops.rms_norm(x, w, eps=1e-5)
    assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
    close(y, ref_rms(x.cpu(), w.cpu(), 1e-5))


@pytest.mark.parametrize("path", PATHS)
def test_rms_norm_gradients_match_reference(hal_backend, path):
    dev = hal_backend.device()
    x = randn(4, 33, device=dev).requires_grad_()
    w = randn(33, device=dev, seed=1).requires_grad_()
    g = randn(4, 33, device=dev, seed=2)
    with on_path(path):
        hal.ops.rms_norm(x, w, 1e-6).backward(g)
    xr = x.detach().cpu().double().requires_grad_()
    wr = w.detach().cpu().double().requires_grad_()
    ref_rms(xr, wr, 1e-6).backward(g.cpu().double())
    close(x.grad, xr.grad)
    close(w.grad, wr.grad)


def test_rms_norm_gradcheck_float64(hal_backend):
    dev = hal_backend.device()
    x = randn(3, 7, dtype=torch.float64, device=dev).requires_grad_()
    w = randn(7, dtype=torch.float64, device=dev, seed=1).requires_grad_()
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda a, b: hal.ops.rms_norm(a, b, 1e-6), (x, w))


@pytest.mark.parametrize("path", PATHS)
def test_rms_norm_non_contiguous_and_empty(hal_backend, path):
    dev = hal_backend.device()
    x = randn(40, 6, dtype=torch.float32, device=dev).t()  # (6, 40), non-contiguous
    w = randn(40, device=dev, seed=1)
    with on_path(path):
        close(hal.ops.rms_norm(x, w), ref_rms(x.cpu(), w.cpu(), 1e-6))
        empty = hal.ops.rms_norm(torch.empty(0, 40, device=dev), w)
    assert empty.shape == (0, 40)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_residual_returns_normalised_sum_and_sum(hal_backend, path, dtype):
    dev = hal_backend.device()
    x = randn(4, 3, 29, dtype=dtype, device=dev)
    r = randn(4, 3, 29, dtype=dtype, device=dev, seed=3)
    w = randn(29, dtype=dtype, device=dev, seed=1)
    with on_path(path):
        y, s = hal.ops.rms_norm(x, w, 1e-5, residual=r)
    summed = x + r
    assert torch.equal(s.cpu(), summed.cpu())
    close(y, ref_rms(summed.cpu(), w.cpu(), 1e-5))


@pytest.mark.parametrize("path", PATHS)
def test_rms_norm_with_residual_gradients(hal_backend, path):
    dev = hal_backend.device()
    leaves = [randn(*s, device=dev, seed=i).requires_grad_() for i, s in enumerate([(5, 17), (5, 17), (17,)])]
    x, r, w = leaves
    gy, gs = randn(5, 17, device=dev, seed=7), randn(5, 17, device=dev, seed=8)
    with on_path(path):
        y, s = hal.ops.rms_norm(x, w, 1e-6, residual=r)
        (y * gy + s * gs).sum().backward()
    refs = [t.detach().cpu().double().requires_grad_() for t in leaves]
    xr, rr, wr = refs
    sr = xr + rr
    (ref_rms(sr, wr, 1e-6) * gy.cpu().double() + sr * gs.cpu().double()).sum().backward()
    for got, want in zip(leaves, refs):
        close(got.grad, want.grad)
    x64, r64, w64 = (t.detach().cpu().double().requires_grad_() for t in leaves)
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda a, b, c: hal.ops.rms_norm(a, c, 1e-6, residual=b), (x64, r64, w64))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_float64_reference(hal_backend, path, dtype, with_bias):
    dev = hal_backend.device()
    x = randn(2, 7, 45, dtype=dtype, device=dev)
    w = randn(45, dtype=dtype, device=dev, seed=1)
    b = randn(45, dtype=dtype, device=dev, seed=2) if with_bias else None
    with on_path(path):
        y = hal.ops.layer_norm(x, w, b, eps=1e-5)
    close(y, ref_ln(x.cpu(), w.cpu(), None if b is None else b.cpu(), 1e-5))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_with_residual_returns_normalised_sum_and_sum(hal_backend, path, dtype):
    dev = hal_backend.device()
    x = randn(5, 38, dtype=dtype, device=dev)
    r = randn(5, 38, dtype=dtype, device=dev, seed=3)
    w = randn(38, dtype=dtype, device=dev, seed=1)
    b = randn(38, dtype=dtype, device=dev, seed=2)
    with on_path(path):
        y, s = hal.ops.layer_norm(x, w, b, 1e-5, residual=r)
    summed = x + r  # rounded to dtype, like the kernel's residual stream
    assert torch.equal(s.cpu(), summed.cpu())
    close(y, ref_ln(summed.cpu(), w.cpu(), b.cpu(), 1e-5))


@pytest.mark.parametrize("path", PATHS)
def test_layer_norm_with_residual_gradients(hal_backend, path):
    dev = hal_backend.device()
    leaves = [randn(*s, device=dev, seed=i).requires_grad_() for i, s in
              enumerate([(3, 21), (3, 21), (21,), (21,)])]
    x, r, w, b = leaves
    gy, gs = randn(3, 21, device=dev, seed=7), randn(3, 21, device=dev, seed=8)
    with on_path(path):
        y, s = hal.ops.layer_norm(x, w, b, 1e-5, residual=r)
        (y * gy + s * gs).sum().backward()
    refs = [t.detach().cpu().double().requires_grad_() for t in leaves]
    xr, rr, wr, br = refs
    sr = xr + rr
    (ref_ln(sr, wr, br, 1e-5) * gy.cpu().double() + sr * gs.cpu().double()).sum().backward()
    for got, want in zip(leaves, refs):
        close(got.grad, want.grad)


def test_layer_norm_gradcheck_float64(hal_backend):
    dev = hal_backend.device()
    x, r = (randn(2, 6, dtype=torch.float64, device=dev, seed=i).requires_grad_() for i in (0, 1))
    w, b = (randn(6, dtype=torch.float64, device=dev, seed=i).requires_grad_() for i in (2, 3))
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda *a: hal.ops.layer_norm(a[0], a[2], a[3], 1e-5, residual=a[1]),
                                        (x, r, w, b))
        assert torch.autograd.gradcheck(lambda a, c, d: hal.ops.layer_norm(a, c, d, 1e-5), (x, w, b))


def test_norm_errors_name_the_argument(hal_backend):
    dev = hal_backend.device()
    x = randn(4, 8, device=dev)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\), expected \(8,\)"):
        hal.ops.rms_norm(x, torch.ones(7, device=dev))
    with pytest.raises(TypeError, match="x has dtype torch.int64"):
        hal.ops.layer_norm(torch.ones(2, 8, dtype=torch.long, device=dev), torch.ones(8, device=dev))
    with pytest.raises(ValueError, match="residual is"):
        hal.ops.layer_norm(x, torch.ones(8, device=dev), residual=x.half())
