"""The eight zoo architectures train on the CPU and, on the emulator, give the CPU's losses;
NMS and RoIAlign (written in torch ops) agree with plain references; the op recorder records at
the level a device kernel receives."""
import functools
import math

import pytest
import torch
import torch.nn.functional as F

from models import ARCHITECTURES, WITHOUT_DROPOUT, box_iou, lstm_lm, nms, roi_align, train
from recorder import OpRecorder, op_name, record_step

STEPS = 20
NAMES = list(ARCHITECTURES)
#: the two architectures with dropout, without it (the emulator's generator is not the CPU's, as CUDA's)
DROPOUT = WITHOUT_DROPOUT


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two cores shared by several processes: torch's intra-op threads would spin for most of the time."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@functools.lru_cache(maxsize=None)
def cpu_losses(name, dropout_free=False):
    factory = DROPOUT[name] if dropout_free else ARCHITECTURES[name]
    return train(factory, "cpu", STEPS)


@pytest.fixture
def emu():
    import hal.emu
    hal.emu.install()
    return "emu"


@pytest.mark.parametrize("name", NAMES)
def test_trains_on_the_cpu_deterministically(name):
    losses = cpu_losses(name)
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-5:]) / 5 < 0.9 * losses[0], losses  # it learns
    assert train(ARCHITECTURES[name], "cpu", 3) == losses[:3]  # same seed, same numbers


@pytest.mark.emu
@pytest.mark.parametrize("name", [n for n in NAMES if n not in DROPOUT])
def test_emu_losses_equal_the_cpu_losses(emu, name):
    assert train(ARCHITECTURES[name], emu, STEPS) == pytest.approx(cpu_losses(name), rel=1e-5, abs=0)


@pytest.mark.emu
@pytest.mark.parametrize("name", list(DROPOUT))
def test_emu_losses_equal_the_cpu_losses_without_dropout(emu, name):
    assert train(DROPOUT[name], emu, STEPS) == pytest.approx(cpu_losses(name, dropout_free=True), rel=1e-5, abs=0)


@pytest.mark.emu
@pytest.mark.parametrize("name", list(DROPOUT))
def test_emu_trains_with_dropout_and_a_seed_repeats_it(emu, name):
    """Dropout draws from the emulator's generator, counter-based as CUDA's, so its masks are not the
    CPU's (as on CUDA); a seed repeats them."""
    losses = train(ARCHITECTURES[name], emu, STEPS)
    assert all(math.isfinite(x) for x in losses) and sum(losses[-5:]) / 5 < 0.9 * losses[0]  # trains
    assert train(ARCHITECTURES[name], emu, 3) == losses[:3]  # same seed, same masks
    assert losses != pytest.approx(cpu_losses(name, dropout_free=True), rel=1e-5, abs=0)  # it drops


@pytest.mark.emu
def test_dropout_draws_its_mask_in_the_inputs_memory_order_on_emu(emu):
    """As the CPU's dropout: a transposed input (nn.MultiheadAttention(batch_first) and a batch_first
    LSTM hand dropout transposed tensors) gets the mask of its memory order, so the same draw on the
    same bytes drops the same elements whatever the view."""
    base = torch.randn(6, 4)
    for device, seed in (("cpu", torch.manual_seed), (emu, torch.emu.manual_seed)):
        seed(0)
        dropped = F.dropout(base.to(device), 0.5, True).cpu() == 0
        seed(0)
        dropped_t = F.dropout(base.to(device).t(), 0.5, True).cpu() == 0
        assert torch.equal(dropped_t, dropped.t()) and dropped.any() and not dropped.all(), device


@pytest.mark.emu
def test_module_to_the_emulator_keeps_parameter_objects_and_ties_as_on_cuda(emu):
    """torch's Module._apply keeps a Parameter object (``param.data = ...``) only where
    ``_has_compatible_shallow_copy_type`` holds; torch lists only its in-tree dense backends, and a vendor
    declares its device (torch_npu registers the op for PrivateUse1), as the emulator now does: ``.to()``
    keeps tied weights tied, and an optimizer built before ``.to()`` holds the moved parameters, as on CUDA.
    Without it each module got a new Parameter (DeepSpeed's name maps, keyed by the old ones, then failed)."""
    def tied():
        m = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5))
        m[1].weight = m[0].weight
        return m
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1), torch.zeros(1, device=emu))
    m = tied()
    before = m[0].weight
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    m.to(emu)
    assert m[1].weight is m[0].weight is before and before.device.type == "emu"
    m(torch.tensor([1], device=emu)).sum().backward()
    opt.step()  # the optimizer built before .to() trains the moved parameter
    assert before.grad is not None and before.device.type == "emu"
    lm = lstm_lm().model.to(emu)
    assert lm.decoder.weight is lm.embed.weight


# --- NMS and RoIAlign against plain references ---------------------------------------------------
def _greedy_nms_reference(boxes, scores, thr):
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    kept = []
    for i in order:
        if all(float(box_iou(boxes[i][None], boxes[j][None])[0, 0]) <= thr for j in kept):
            kept.append(i)
    return kept


def test_nms_keeps_what_greedy_nms_keeps():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(2, 40, 2, generator=g) * 24
    boxes = torch.cat([xy, xy + 4 + torch.rand(2, 40, 2, generator=g) * 8], dim=-1)
    scores = torch.rand(2, 40, generator=g)
    scores[0, 5] = scores[0, 7]  # a tie: the lower index wins
    order, keep = nms(boxes, scores, 0.5)
    for b in range(2):
        got = order[b][keep[b]].tolist()
        assert got == _greedy_nms_reference(boxes[b], scores[b], 0.5)
        assert 3 < len(got) < 40


def _bilinear(fmap, y, x):
    h, w = fmap.shape[-2:]
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    val = 0
    for yy, wy in ((y0, 1 - ly), (y0 + 1, ly)):
        for xx, wx in ((x0, 1 - lx), (x0 + 1, lx)):
            val = val + wy * wx * fmap[:, min(max(yy, 0), h - 1), min(max(xx, 0), w - 1)]
    return val


def test_roi_align_averages_bilinear_samples_per_bin():
    g = torch.Generator().manual_seed(1)
    feat = torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64)
    rois = torch.tensor([[4.0, 6.0, 20.0, 18.0], [0.0, 0.0, 31.0, 31.0], [9.5, 3.25, 13.0, 30.0]], dtype=torch.float64)
    bidx = torch.tensor([0, 1, 1])
    out = roi_align(feat, rois, bidx, output_size=2, spatial_scale=0.25, sampling_ratio=2)
    assert out.shape == (3, 3, 2, 2)
    for r in range(3):
        x1, y1, x2, y2 = (float(v) * 0.25 - 0.5 for v in rois[r])  # aligned=True
        bw, bh = (x2 - x1) / 2, (y2 - y1) / 2
        for i in range(2):
            for j in range(2):
                samples = [_bilinear(feat[bidx[r]], y1 + (i + (sy + 0.5) / 2) * bh, x1 + (j + (sx + 0.5) / 2) * bw)
                           for sy in range(2) for sx in range(2)]
                torch.testing.assert_close(out[r, :, i, j], sum(samples) / 4)


# --- the recorder ---------------------------------------------------------------------------------
def test_op_names_follow_the_plans_rule():
    assert op_name(torch.ops.aten.addmm.default) == "addmm"
    assert op_name(torch.ops.aten.add.Tensor) == "add.Tensor"
    assert op_name(torch.ops.aten._foreach_add_.List) == "_foreach_add_.List"


def test_recorder_sees_ops_after_autograd_and_composite_decomposition():
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with OpRecorder() as rec:
        rec.set_phase("forward")
        loss = F.gelu(lin(x)).sum()
        rec.set_phase("backward")
        loss.backward()
    fwd, bwd = rec.by_phase["forward"], rec.by_phase["backward"]
    assert "linear" not in rec.counts and fwd["addmm"] == 1 and fwd["t"] == 1  # linear is CompositeImplicit
    assert fwd["gelu"] == 1 and bwd["gelu_backward"] == 1 and bwd["mm"] >= 1


def test_recorder_does_not_see_inside_a_kernel():
    ts = [torch.zeros(3), torch.zeros(2)]
    with OpRecorder() as rec:
        torch._foreach_add_(ts, 1.0)  # the CPU runs it as a loop of add_ calls, below the mode
    assert rec.counts == {"_foreach_add_.Scalar": 1}


@pytest.mark.emu
def test_recorder_on_emu_sees_the_op_not_hal_s_fallback_and_sees_device_backward(emu):
    x = torch.randn(5, device=emu, requires_grad=True)
    with OpRecorder() as rec:
        rec.set_phase("forward")
        y = torch.special.bessel_j0(x)  # outside the emulator's native set: hal runs it on the host
        rec.set_phase("backward")
        F.gelu(x).sum().backward()
    assert rec.by_phase["forward"] == {"special_bessel_j0": 1}
    assert rec.by_phase["backward"]["gelu_backward"] == 1  # ran on the emu device's autograd thread
    assert y.device.type == "emu"


def test_recording_a_step_is_repeatable_and_covers_every_phase():
    for name in NAMES:
        rec = record_step(ARCHITECTURES[name], "cpu")
        assert all(rec.by_phase[p] for p in ("forward", "backward", "optimizer")), name
        if name == "cnn_bn":
            assert record_step(ARCHITECTURES[name], "cpu").by_phase == rec.by_phase


@pytest.mark.parametrize("device", ["cpu", pytest.param("emu", marks=pytest.mark.emu)])
def test_llama_block_steps_with_fused_adamw(request, device):
    """torch 2.13 has fused AdamW for the CPU and for PrivateUse1 devices (emu runs it on the host)."""
    if device == "emu":
        request.getfixturevalue("emu")
    rec = record_step(ARCHITECTURES["llama_block"], device)
    assert rec.by_phase["optimizer"]["_fused_adamw_"] == 1
