"""``hal::nms`` and ``hal::roi_align`` (torchvision's definitions, without needing torchvision)."""
from typing import List, Sequence, Union

import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run


def _nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    return run("nms", device_type(boxes), (boxes, scores, iou_threshold), comp.nms, host.nms)


def _nms_fake(boxes, scores, iou_threshold):
    n = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((n,), dtype=torch.long)


NMS = define("nms", _nms, fake=_nms_fake)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression, as ``torchvision.ops.nms``.

    :param boxes: (N, 4) as (x1, y1, x2, y2) with x1 <= x2, y1 <= y2.
    :param scores: (N,).
    :param iou_threshold: a box is dropped when its IoU with a kept, higher-scoring box
        is greater than this.
    :return: int64 indices of the kept boxes, by decreasing score.

    Example::

        keep = hal.ops.nms(boxes, scores, 0.5)
    """
    _checks.tensor("nms", "boxes", boxes)
    _checks.tensor("nms", "scores", scores)
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"hal.ops.nms: boxes has shape {tuple(boxes.shape)}, expected (N, 4) as (x1, y1, x2, y2)")
    if scores.shape != (boxes.shape[0],):
        raise ValueError(f"hal.ops.nms: scores has shape {tuple(scores.shape)}, expected ({boxes.shape[0]},)")
    _checks.same_device("nms", boxes, scores=scores)
    return NMS(boxes, scores, float(iou_threshold))


def _roi_align(input: Tensor, boxes: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
               sampling_ratio: int, aligned: bool) -> Tensor:
    return run("roi_align", device_type(input),
               (input, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned),
               comp.roi_align, host.roi_align)


def _roi_align_backward(grad: Tensor, boxes: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                        sampling_ratio: int, aligned: bool, input_shape: List[int]) -> Tensor:
    return run("roi_align_backward", device_type(grad),
               (grad, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, input_shape),
               comp.roi_align_backward, host.roi_align_backward)


ROI_ALIGN_BACKWARD = define(
    "roi_align_backward", _roi_align_backward,
    fake=lambda grad, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, input_shape:
    grad.new_empty(input_shape))


def _setup(ctx, inputs, output):
    input, boxes, *rest = inputs
    ctx.save_for_backward(boxes)
    ctx.rest, ctx.input_shape = rest, list(input.shape)


def _backward(ctx, grad):
    (boxes,) = ctx.saved_tensors
    gi = ROI_ALIGN_BACKWARD(grad.contiguous(), boxes, *ctx.rest, ctx.input_shape)
    return gi, None, None, None, None, None, None


ROI_ALIGN = define(
    "roi_align", _roi_align,
    fake=lambda input, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned:
    input.new_empty(boxes.shape[0], input.shape[1], pooled_height, pooled_width),
    setup_context=_setup, backward=_backward)


def roi_align(input: Tensor, boxes: Union[Tensor, Sequence[Tensor]], output_size, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """RoIAlign, as ``torchvision.ops.roi_align`` (Mask R-CNN), differentiable in ``input``.

    :param input: feature map (N, C, H, W).
    :param boxes: (K, 5) rows of (batch_index, x1, y1, x2, y2), or a list of N (L_i, 4)
        tensors, one per image.
    :param output_size: int or (height, width) of each pooled region.
    :param spatial_scale: maps box coordinates onto the feature map (e.g. 1/16).
    :param sampling_ratio: samples per bin along each axis; <= 0 picks
        ``ceil(roi_size / output_size)`` adaptively.
    :param aligned: shift boxes by -0.5 pixel (Detectron2's ``ROIAlignV2``).
    :return: (K, C, height, width).

    Example::

        feats = hal.ops.roi_align(fmap, [boxes_img0, boxes_img1], 7, spatial_scale=1 / 16, sampling_ratio=2)
    """
    _checks.tensor("roi_align", "input", input)
    _checks.floating("roi_align", "input", input)
    if input.dim() != 4:
        raise ValueError(f"hal.ops.roi_align: input has shape {tuple(input.shape)}, expected (N, C, H, W)")
    if not isinstance(boxes, Tensor):
        parts = list(boxes)
        if len(parts) != input.shape[0]:
            raise ValueError(f"hal.ops.roi_align: boxes is a list of {len(parts)} tensors but input holds "
                             f"{input.shape[0]} images; pass one (L, 4) tensor per image")
        boxes = torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(parts)], 0) \
            if parts else input.new_zeros(0, 5)
    if boxes.dim() != 2 or boxes.shape[1] != 5:
        raise ValueError(f"hal.ops.roi_align: boxes has shape {tuple(boxes.shape)}, expected (K, 5) as "
                         "(batch_index, x1, y1, x2, y2)")
    if boxes.numel():
        idx = boxes[:, 0]
        if bool(((idx < 0) | (idx >= input.shape[0]) | (idx != idx.floor())).any()):
            raise ValueError(f"hal.ops.roi_align: boxes[:, 0] must be image indices in [0, {input.shape[0]}); "
                             f"got values from {idx.min().item()} to {idx.max().item()}")
    _checks.same_device("roi_align", input, boxes=boxes)
    _checks.no_grad_needed("roi_align", "boxes", boxes)
    ph, pw = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if ph < 1 or pw < 1:
        raise ValueError(f"hal.ops.roi_align: output_size={output_size!r} must be positive")
    return ROI_ALIGN(input, boxes.to(input.dtype), float(spatial_scale), int(ph), int(pw), int(sampling_ratio),
                     bool(aligned))
