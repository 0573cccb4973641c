"""hal.ops.nms and hal.ops.roi_align (torchvision semantics) on every backend and path."""
import itertools

import pytest
import torch

import hal.ops
from ops_reference import PATHS, close, on_path, randn

pytestmark = pytest.mark.filterwarnings("ignore::hal.ops.FallbackWarning")


def greedy_nms(boxes, scores, thr):
    """Textbook greedy NMS with plain Python floats."""
    b = boxes.double().tolist()
    order = sorted(range(len(b)), key=lambda i: -float(scores[i]))
    keep = []
    for i in order:
        ok = True
        for j in keep:
            w = max(0.0, min(b[i][2], b[j][2]) - max(b[i][0], b[j][0]))
            h = max(0.0, min(b[i][3], b[j][3]) - max(b[i][1], b[j][1]))
            inter = w * h
            area = lambda k: (b[k][2] - b[k][0]) * (b[k][3] - b[k][1])  # noqa: E731
            if inter / (area(i) + area(j) - inter) > thr:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


def random_boxes(n, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 50
    wh = torch.rand(n, 2, generator=g) * 20 + 1
    return torch.cat((xy, xy + wh), 1).to(device), torch.randperm(n, generator=g).float().to(device)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("thr", [0.2, 0.5, 0.8])
def test_nms_matches_greedy_reference(hal_backend, path, thr):
    dev = hal_backend.device()
    boxes, scores = random_boxes(60, dev)
    with on_path(path):
        keep = hal.ops.nms(boxes, scores, thr)
    assert keep.dtype == torch.long and keep.device == boxes.device
    assert keep.cpu().tolist() == greedy_nms(boxes.cpu(), scores.cpu(), thr)


@pytest.mark.parametrize("path", PATHS)
def test_nms_empty_and_identical_boxes(hal_backend, path):
    dev = hal_backend.device()
    with on_path(path):
        assert hal.ops.nms(torch.empty(0, 4, device=dev), torch.empty(0, device=dev), 0.5).numel() == 0
        same = torch.tensor([[0.0, 0, 10, 10]] * 3, device=dev)
        keep = hal.ops.nms(same, torch.tensor([0.1, 0.9, 0.5], device=dev), 0.5)
    assert keep.cpu().tolist() == [1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [2, -1])
def test_roi_align_is_exact_on_a_linear_image(hal_backend, path, aligned, sampling_ratio):
    """Bilinear sampling reproduces a linear function exactly, so each bin's average is the
    function at the bin's sample centroid (boxes kept inside the image, away from the clamp)."""
    dev = hal_backend.device()
    H, W = 16, 20
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64),
                            indexing="ij")
    img = torch.stack((2 * xs + 3 * ys + 1, -xs + 0.5 * ys)).unsqueeze(0)  # (1, 2, H, W)
    boxes = torch.tensor([[0, 2.0, 3.0, 11.0, 9.0], [0, 1.5, 1.0, 15.0, 12.5]], dtype=torch.float64)
    scale, ph, pw = 1.0, 3, 4
    with on_path(path):
        out = hal.ops.roi_align(img.float().to(dev), boxes.float().to(dev), (ph, pw), scale, sampling_ratio, aligned)
    off = 0.5 if aligned else 0.0
    want = torch.empty(2, 2, ph, pw, dtype=torch.float64)
    for k, (_, x1, y1, x2, y2) in enumerate(boxes.tolist()):
        sx, sy = x1 * scale - off, y1 * scale - off
        bw, bh = (x2 * scale - off - sx) / pw, (y2 * scale - off - sy) / ph
        for i, j in itertools.product(range(ph), range(pw)):
            cy, cx = sy + (i + 0.5) * bh, sx + (j + 0.5) * bw  # centroid of the symmetric sample grid
            want[k, 0, i, j] = 2 * cx + 3 * cy + 1
            want[k, 1, i, j] = -cx + 0.5 * cy
    close(out, want, torch.float32)


@pytest.mark.parametrize("path", PATHS)
def test_roi_align_paths_agree_and_gradients_are_adjoint(hal_backend, path):
    """<roi_align(x), g> == <x, grad>: the backward is the forward's adjoint."""
    dev = hal_backend.device()
    x = randn(2, 3, 9, 11, device=dev).requires_grad_()
    boxes = [torch.tensor([[0.5, 1.0, 7.0, 6.5], [-2.0, -1.0, 4.0, 3.0]], device=dev),
             torch.tensor([[3.0, 2.0, 10.5, 8.0]], device=dev)]
    with on_path(path):
        y = hal.ops.roi_align(x, boxes, 3, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    with hal.ops.use_path("composition"):
        y_ref = hal.ops.roi_align(x.detach(), boxes, 3, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    close(y, y_ref)
    g = randn(*y.shape, device=dev, seed=4)
    y.backward(g)
    close((x.grad * x.detach()).sum(), (y.detach() * g).sum())


def test_roi_align_gradcheck_float64_and_errors(hal_backend):
    dev = hal_backend.device()
    x = randn(1, 2, 6, 7, dtype=torch.float64, device=dev).requires_grad_()
    boxes = torch.tensor([[0, 0.7, 1.2, 5.1, 4.4]], dtype=torch.float64, device=dev)
    with hal.ops.use_path("composition"):
        assert torch.autograd.gradcheck(lambda t: hal.ops.roi_align(t, boxes, 2, 1.0, 2, False), (x,))
    with pytest.raises(ValueError, match=r"boxes\[:, 0\] must be image indices in \[0, 1\)"):
        hal.ops.roi_align(x.detach(), torch.tensor([[3, 0, 0, 2, 2.0]], dtype=torch.float64, device=dev), 2)
    with pytest.raises(ValueError, match=r"expected \(K, 5\)"):
        hal.ops.roi_align(x.detach(), torch.zeros(2, 4, dtype=torch.float64, device=dev), 2)
