"""Small torch-written models for the op_coverage zoo: the shapes of real CNN and detection
architectures, random weights, nothing downloaded (torchvision's PyPI wheel does not import
with the CPU torch)."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # also run as a script: the repo root
from tests.torch_zoo.models import box_iou  # noqa: E402 - the zoo's IoU, shared with the training zoo


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        mid = max(8, c // r)
        self.fc1, self.fc2 = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin, exp, cout, k, stride, se, hswish):
        super().__init__()
        act = nn.Hardswish if hswish else nn.ReLU
        self.block = nn.Sequential(
            nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), act(),
            nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False), nn.BatchNorm2d(exp), act(),
            SqueezeExcite(exp) if se else nn.Identity(),
            nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


#: torchvision's mobilenet_v3_small table: in, expanded, out, kernel, stride, SE, hardswish
MNV3_SMALL = [(16, 16, 16, 3, 2, True, False), (16, 72, 24, 3, 2, False, False), (24, 88, 24, 3, 1, False, False),
              (24, 96, 40, 5, 2, True, True), (40, 240, 40, 5, 1, True, True), (40, 240, 40, 5, 1, True, True),
              (40, 120, 48, 5, 1, True, True), (48, 144, 48, 5, 1, True, True), (48, 288, 96, 5, 2, True, True),
              (96, 576, 96, 5, 1, True, True), (96, 576, 96, 5, 1, True, True)]


class MobileNetV3Small(nn.Module):
    """torchvision's MobileNetV3-small layer for layer (HardSwish, HardSigmoid in SE blocks)."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.Sequential(*[InvertedResidual(*c) for c in MNV3_SMALL])
        self.last = nn.Sequential(nn.Conv2d(96, 576, 1, bias=False), nn.BatchNorm2d(576), nn.Hardswish())
        self.head = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes))

    def forward(self, x):
        x = self.last(self.blocks(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def export(module, args, path, opset=18, input_names=None, dynamic_axes=None):
    """``torch.onnx.export`` with the TorchScript exporter (fast; the dynamo one is not needed
    for these models), eval mode, weights embedded."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), opset_version=opset, dynamo=False,
                          input_names=input_names, dynamic_axes=dynamic_axes)
    return path


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNetTiny(nn.Module):
    """ResNet-18's layout at a quarter of the width and one block per stage."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.stages = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2),
                                    BasicBlock(64, 128, 2))
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


class UNetTiny(nn.Module):
    """Encoder-decoder segmentation (U-Net / DeepLab head shape): strided convs, bilinear upsampling,
    a transposed convolution, skip concatenations, per-pixel argmax."""

    def __init__(self, classes=5):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.GroupNorm(2, 8), nn.SiLU())
        self.e2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.GroupNorm(4, 16), nn.SiLU())
        self.e3 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.GroupNorm(4, 32), nn.SiLU())
        self.up2 = nn.ConvTranspose2d(32, 16, 2, 2)
        self.d2 = nn.Conv2d(32, 16, 3, 1, 1)
        self.d1 = nn.Conv2d(24, 8, 3, 1, 1)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        c = self.e3(b)
        d = F.relu(self.d2(torch.cat([self.up2(c), b], 1)))
        d = F.interpolate(d, scale_factor=2.0, mode="bilinear", align_corners=False)
        logits = self.head(F.relu(self.d1(torch.cat([d, a], 1))))
        return logits, logits.argmax(1)


class DetectorTiny(nn.Module):
    """A one-stage detector at inference (RetinaNet / SSD shape): anchors, box decoding with Exp and
    clamping, TopK candidates, greedy NMS in static tensor ops, class argmax, score threshold with
    Where(-inf); ``with_nonzero`` adds torch's boolean indexing of the kept boxes (NonZero: a
    data-dependent output shape)."""

    def __init__(self, classes=4, size=64, anchors=3, pre_nms=32, post_nms=8, with_nonzero=False):
        super().__init__()
        self.size, self.pre, self.post, self.with_nonzero = size, pre_nms, post_nms, with_nonzero
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
        self.cls = nn.Conv2d(32, anchors * classes, 3, 1, 1)
        self.box = nn.Conv2d(32, anchors * 4, 3, 1, 1)
        self.classes = classes
        f, stride = size // 8, 8
        c = (torch.arange(f, dtype=torch.float32) + 0.5) * stride
        cy, cx = torch.meshgrid(c, c, indexing="ij")
        half = torch.tensor([6.0, 10.0, 14.0][:anchors]) / 2
        a = torch.stack([cx[..., None] - half, cy[..., None] - half, cx[..., None] + half, cy[..., None] + half], -1)
        self.register_buffer("anchors", a.reshape(-1, 4), persistent=False)

    def forward(self, images):
        b = images.shape[0]
        feat = self.backbone(images)
        logits = self.cls(feat).permute(0, 2, 3, 1).reshape(b, -1, self.classes)
        deltas = self.box(feat).permute(0, 2, 3, 1).reshape(b, -1, 4)
        probs = torch.sigmoid(logits)
        scores, labels = probs.max(-1)
        ref = self.anchors
        wr, hr = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
        cx, cy = (ref[:, 0] + ref[:, 2]) / 2 + deltas[..., 0] * wr, (ref[:, 1] + ref[:, 3]) / 2 + deltas[..., 1] * hr
        w, h = wr * deltas[..., 2].clamp(max=4.0).exp(), hr * deltas[..., 3].clamp(max=4.0).exp()
        boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1).clamp(0, self.size)
        top_s, top_i = scores.topk(self.pre, dim=1)
        top_b = boxes.gather(1, top_i.unsqueeze(-1).expand(-1, -1, 4))
        top_l = labels.gather(1, top_i)
        over = (box_iou(top_b, top_b) > 0.5) & torch.ones(self.pre, self.pre, dtype=torch.bool).triu(1)
        keep = torch.ones(b, self.pre, dtype=torch.bool)
        for i in range(self.pre - 1):
            keep = keep & ~(over[:, i] & keep[:, i:i + 1])
        ranked = torch.where(keep & (top_s > 0.05), top_s, torch.full_like(top_s, -float("inf")))
        best_s, best = ranked.topk(self.post, dim=1)
        out_b = top_b.gather(1, best.unsqueeze(-1).expand(-1, -1, 4))
        out_l = top_l.gather(1, best)
        if self.with_nonzero:
            return out_b[best_s > 0.5], out_l, best_s
        return out_b, out_l, best_s
