"""hal._C misuse raises clear Python errors (never a crash); bf16/fp16 buffers convert like torch."""
import numpy as np
import pytest
import torch

from hal.ops import host

pytestmark = pytest.mark.skipif(not host.available(), reason="hal._C (C++ host kernels) is not built here")


@pytest.fixture
def C():
    return host.native()


def test_wrong_dtype_is_a_type_error(C):
    x = np.ones((2, 4))  # float64
    with pytest.raises(TypeError, match="rms_norm: x has dtype float64; host kernels take float32, float16 or"):
        C.rms_norm_fwd(x, np.ones(4), np.empty((2, 4)), 1e-6)
    with pytest.raises(TypeError, match="weight is float16 but x is float32"):
        C.rms_norm_fwd(np.ones((2, 4), np.float32), np.ones(4, np.float16), np.empty((2, 4), np.float32), 1e-6)


def test_shapes_and_layout_are_checked(C):
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"weight has shape \(5,\), expected \(4,\)"):
        C.rms_norm_fwd(x, np.ones(5, np.float32), np.empty_like(x), 1e-6)
    with pytest.raises(ValueError, match="x is not C-contiguous; call .contiguous"):
        C.rms_norm_fwd(np.ones((4, 3), np.float32).T, np.ones(4, np.float32), np.empty_like(x), 1e-6)
    with pytest.raises(ValueError, match=r"out has shape \(2, 4\), expected \(3, 4\)"):
        C.layer_norm_fwd(x, None, np.ones(4, np.float32), None, np.empty((2, 4), np.float32), None, 1e-5)
    with pytest.raises(ValueError, match="must be even"):
        C.swiglu_fwd(np.ones((2, 5), np.float32), np.empty((2, 2), np.float32))
    with pytest.raises(ValueError, match="does not tile x"):
        C.softmax_fwd(np.ones((4, 3), np.float32), np.ones((3, 3), bool), np.empty((4, 3), np.float32), 1.0,
                      False, 1)
    with pytest.raises(ValueError, match="cover 6 rotary dims but the head dim is 4"):
        C.rotary_fwd(np.ones((2, 4), np.float32), np.ones((2, 3), np.float32), np.ones((2, 3), np.float32),
                     np.empty((2, 4), np.float32), 1, 2, False, 1)


def test_read_only_output_and_bad_roi_index_are_refused(C):
    out = np.empty((2, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="output out is read-only"):
        C.gelu_fwd(np.ones((2, 4), np.float32), out, False)
    with pytest.raises(ValueError, match=r"boxes\[0\] has batch index 2.0*, but the input holds 1 images"):
        C.roi_align_fwd(np.ones((1, 1, 4, 4), np.float32), np.array([[2, 0, 0, 2, 2]], np.float32),
                        np.empty((1, 1, 2, 2), np.float32), 1.0, 2, False)
    with pytest.raises(ValueError, match="same length"):
        C.adamw_step([np.ones(3, np.float32)], [], [], [], 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_rounding_matches_torch(dtype):
    # rotary with cos=1, sin=0 is the identity on the rotated pairs: a pure load/store round trip,
    # and gelu's output rounding must equal torch's rounding of the same float32 values
    x = (torch.randn(64, 8) * 100).to(dtype)
    ones, zeros = torch.ones(64, 4), torch.zeros(64, 4)
    assert torch.equal(host.rotary_embedding(x.view(1, 64, 1, 8), ones, zeros).view(64, 8), x)
    y = torch.linspace(-3, 3, 4097).to(dtype)
    ref = torch.nn.functional.gelu(y.float()).to(dtype)
    mismatch = (host.gelu(y) != ref).float().mean().item()
    assert mismatch < 0.01  # float32 math differs in the last bit only where rounding ties


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_special_values_survive_the_round_trip(dtype):
    # the residual sum x + 0 of layer_norm is a pure load / add zero / store
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), 3.0, -2.5, 1e-6, 65504.0, 0.0], dtype=dtype)
    _, h = host.layer_norm(x.view(1, -1), torch.ones(8), None, 1e-5, residual=torch.zeros(1, 8, dtype=dtype))
    h = h.view(-1)
    assert torch.isinf(h[0]) and h[0] > 0 and torch.isinf(h[1]) and h[1] < 0 and torch.isnan(h[2])
    assert torch.equal(h[3:], x[3:])


def test_kernels_release_the_gil():
    import threading
    import time

    x = torch.randn(2048, 4096)
    w = torch.ones(4096)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.perf_counter()
    for _ in range(5):
        host.rms_norm(x, w, 1e-6)
    end = time.perf_counter()
    stop.set()
    t.join()
    during = [k for k in ticks if start < k < end]
    assert len(during) >= 3, "the Python thread could not run while the kernel ran"
