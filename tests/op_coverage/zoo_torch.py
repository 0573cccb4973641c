"""Small torch-written models for the op_coverage zoo: the shapes of real CNN and detection
architectures, random weights, nothing downloaded (torchvision's PyPI wheel does not import
with the CPU torch)."""
import torch
import torch.nn.functional as F
from torch import nn


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
