"""hal._C's host kernels open a parallel region only above the grain, and give the same bytes
either way: serial or parallel, for any team size, through the raw entries or the numpy ones."""
import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from hal.ops import host

pytestmark = pytest.mark.skipif(not host.available(), reason="hal._C (C++ host kernels) is not built here")

SERIAL = 2 ** 62  # a grain no call reaches
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def C():
    return host.native()


@contextlib.contextmanager
def grain(n):
    C = host.native()
    old = C.set_grain_size(n)
    try:
        yield
    finally:
        C.set_grain_size(old)


def needs_threads():
    if host.native().openmp_threads() < 2:
        pytest.skip("hal._C has one OpenMP thread here (OMP_NUM_THREADS=1 or one core): nothing runs in parallel")


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def as_bytes(out):
    """The bytes of a tensor or of every tensor in a (nested) tuple, to compare bit for bit."""
    if isinstance(out, torch.Tensor):
        return [out.detach().contiguous().view(torch.uint8).numpy().tobytes()]
    return [b for o in out for b in as_bytes(o)]


# Every host kernel, forward and backward, at a size above the grain and with rows spanning
# several of the fixed row chunks of the weight/bias gradient sums (1100 rows of 96).
ROWS, COLS = 1100, 96


def _adamw(dtype):
    ps = [rnd(ROWS, COLS, dtype=dtype, seed=s) for s in (1, 2)]
    gs = [rnd(ROWS, COLS, dtype=dtype, seed=s) for s in (3, 4)]
    ms = [rnd(ROWS, COLS, dtype=dtype, seed=s) for s in (5, 6)]
    vs = [rnd(ROWS, COLS, dtype=dtype, seed=s).abs() for s in (7, 8)]
    host.fused_adamw_(ps, gs, ms, vs, 1e-3, 0.9, 0.999, 1e-8, 0.01, 3.0)
    return tuple(ps + ms + vs)


def _boxes():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(300, 2, generator=g) * 40
    wh = torch.rand(300, 2, generator=g) * 20 + 1
    return torch.cat([torch.randint(0, 2, (300, 1), generator=g).float(), xy, xy + wh], dim=1)


KERNELS = {
    "rms_norm": lambda dt: host.rms_norm(rnd(ROWS, COLS, dtype=dt), rnd(COLS, dtype=dt), 1e-6),
    "add_rms_norm": lambda dt: host.add_rms_norm(rnd(ROWS, COLS, dtype=dt), rnd(COLS, dtype=dt), 1e-6,
                                                 rnd(ROWS, COLS, dtype=dt, seed=1)),
    "rms_norm_backward": lambda dt: host.rms_norm_backward(rnd(ROWS, COLS, dtype=dt, seed=1), rnd(ROWS, COLS, dtype=dt),
                                                           rnd(COLS, dtype=dt), 1e-6),
    "layer_norm": lambda dt: host.layer_norm(rnd(ROWS, COLS, dtype=dt), rnd(COLS, dtype=dt), rnd(COLS, dtype=dt, seed=1),
                                             1e-5, residual=rnd(ROWS, COLS, dtype=dt, seed=2)),
    "layer_norm_backward": lambda dt: host.layer_norm_backward(
        rnd(ROWS, COLS, dtype=dt, seed=1), rnd(ROWS, COLS, dtype=dt, seed=2), rnd(ROWS, COLS, dtype=dt),
        rnd(COLS, dtype=dt), 1e-5),
    "rotary_embedding": lambda dt: host.rotary_embedding(rnd(2, 275, 2, COLS, dtype=dt), rnd(275, 40),
                                                         rnd(275, 40, seed=1)),
    "swiglu": lambda dt: host.swiglu(rnd(ROWS, COLS, dtype=dt)),
    "swiglu_backward": lambda dt: host.swiglu_backward(rnd(ROWS, COLS // 2, dtype=dt, seed=1),
                                                       rnd(ROWS, COLS, dtype=dt)),
    "gelu": lambda dt: (host.gelu(rnd(ROWS, COLS, dtype=dt)), host.gelu(rnd(ROWS, COLS, dtype=dt), "tanh")),
    "gelu_backward": lambda dt: (host.gelu_backward(rnd(ROWS, COLS, dtype=dt, seed=1), rnd(ROWS, COLS, dtype=dt)),
                                 host.gelu_backward(rnd(ROWS, COLS, dtype=dt, seed=1), rnd(ROWS, COLS, dtype=dt),
                                                    "tanh")),
    "softmax": lambda dt: (host.softmax(rnd(4, 275, COLS, dtype=dt), rnd(275, COLS, seed=1) > 0, scale=0.3),
                           host.softmax(rnd(4, 275, COLS, dtype=dt), rnd(275, COLS, seed=1), causal=True)),
    "softmax_backward": lambda dt: host.softmax_backward(rnd(ROWS, COLS, dtype=dt, seed=1),
                                                         torch.softmax(rnd(ROWS, COLS), -1).to(dt), 0.3),
    "fused_adamw_": _adamw,
    "roi_align": lambda dt: host.roi_align(rnd(2, 8, 48, 48, dtype=dt), _boxes(), 1.0, 7, 7, 2, True),
    "roi_align_backward": lambda dt: host.roi_align_backward(rnd(300, 8, 7, 7, dtype=dt), _boxes(), 1.0, 7, 7, 0,
                                                             False, (2, 8, 48, 48)),
}


def test_the_grain_is_atens_and_settable_for_tests(C):
    assert C.grain_size() == 32768  # at::internal::GRAIN_SIZE
    with grain(5):
        assert C.grain_size() == 5
        assert C.set_grain_size(7) == 5
    assert C.grain_size() == 32768
    with pytest.raises(ValueError, match="grain is a number of elements, >= 0"):
        C.set_grain_size(-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_decode_sized_call_opens_no_parallel_region(C, dtype):
    x, w = rnd(1, 64, dtype=dtype), rnd(64, dtype=dtype)
    before = C.parallel_regions()
    host.rms_norm(x, w, 1e-6)
    host.rms_norm_backward(x, x, w, 1e-6)
    host.layer_norm(x, w, w, 1e-5)
    host.layer_norm_backward(x, None, x, w, 1e-5)
    host.swiglu(x)
    host.gelu(x)
    host.softmax(x, causal=True)
    host.softmax_backward(x, x)
    host.rotary_embedding(x.view(1, 1, 1, 64), rnd(1, 32), rnd(1, 32))
    assert C.parallel_regions() == before


def test_a_large_call_opens_one_parallel_region(C):
    needs_threads()
    x = rnd(64, 1024)  # 65536 elements > the grain
    before = C.parallel_regions()
    host.rms_norm(x, rnd(1024), 1e-6)
    assert C.parallel_regions() == before + 1
    with grain(SERIAL):
        host.rms_norm(x, rnd(1024), 1e-6)
    assert C.parallel_regions() == before + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_serial_and_parallel_give_the_same_bytes(C, name, dtype):
    with grain(SERIAL):
        before = C.parallel_regions()
        serial = as_bytes(KERNELS[name](dtype))
        assert C.parallel_regions() == before
    with grain(1):
        parallel = as_bytes(KERNELS[name](dtype))
        if C.openmp_threads() >= 2:
            assert C.parallel_regions() > before
    assert serial == parallel


_TEAM_SCRIPT = """
import hashlib, sys
sys.path.insert(0, {root!r})
import torch
from hal.ops import host
from tests.unit.test_host_parallel import KERNELS, as_bytes
host.native().set_grain_size(1)
for name in ("rms_norm_backward", "layer_norm_backward", "fused_adamw_", "roi_align_backward"):
    for dt in (torch.float32, torch.bfloat16):
        print(name, dt, hashlib.sha256(b"".join(as_bytes(KERNELS[name](dt)))).hexdigest())
"""


def test_the_reductions_do_not_depend_on_the_team_size():
    # the weight/bias gradient sums (and adamw, roi_align's scatter) with teams of 1 and 3 threads
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outs = []
    for threads in ("1", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        run = subprocess.run([sys.executable, "-c", _TEAM_SCRIPT.format(root=root)], env=env, cwd=root,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        outs.append(run.stdout)
    assert outs[0] == outs[1] and outs[0].count("\n") == 8


def _np(t):
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_raw_entries_give_the_bytes_of_the_numpy_entries(C, dtype):
    code = C.DTYPE_CODES[str(dtype).split(".")[1]]
    x, r, g = rnd(40, 64, dtype=dtype), rnd(40, 64, dtype=dtype, seed=1), rnd(40, 64, dtype=dtype, seed=2)
    w, b = rnd(64, dtype=dtype), rnd(64, dtype=dtype, seed=1)
    cos, sin = rnd(40, 24), rnd(40, 24, seed=1)
    mask = rnd(8, 64) > 0
    p = lambda t: t.data_ptr()  # noqa: E731

    def both(numpy_call, raw_call, *like):
        a, z = [torch.empty_like(t) for t in like], [torch.empty_like(t) for t in like]
        numpy_call(*[_np(t) for t in a])
        raw_call(*[p(t) for t in z])
        assert as_bytes(tuple(a)) == as_bytes(tuple(z))

    f32 = torch.empty(64)
    both(lambda y: C.rms_norm_fwd(_np(x), _np(w), y, 1e-6),
         lambda y: C.rms_norm_fwd_raw(p(x), p(w), y, 40, 64, code, 1e-6), x)
    both(lambda y, h: C.add_rms_norm_fwd(_np(x), _np(r), _np(w), y, h, 1e-6),
         lambda y, h: C.add_rms_norm_fwd_raw(p(x), p(r), p(w), y, h, 40, 64, code, 1e-6), x, x)
    both(lambda dx, dw: C.rms_norm_bwd(_np(g), _np(x), _np(w), dx, dw, 1e-6),
         lambda dx, dw: C.rms_norm_bwd_raw(p(g), p(x), p(w), dx, dw, 40, 64, code, 1e-6), x, f32)
    both(lambda y, h: C.layer_norm_fwd(_np(x), _np(r), _np(w), _np(b), y, h, 1e-5),
         lambda y, h: C.layer_norm_fwd_raw(p(x), p(r), p(w), p(b), y, h, 40, 64, code, 1e-5), x, x)
    both(lambda y: C.layer_norm_fwd(_np(x), None, _np(w), None, y, None, 1e-5),
         lambda y: C.layer_norm_fwd_raw(p(x), 0, p(w), 0, y, 0, 40, 64, code, 1e-5), x)
    both(lambda dx, dw, db: C.layer_norm_bwd(_np(g), _np(r), _np(x), _np(w), dx, dw, db, 1e-5),
         lambda dx, dw, db: C.layer_norm_bwd_raw(p(g), p(r), p(x), p(w), dx, dw, db, 40, 64, code, 1e-5),
         x, f32, f32)
    both(lambda y: C.rotary_fwd(_np(x), cos.numpy(), sin.numpy(), y, 1, 40, True, -1),
         lambda y: C.rotary_fwd_raw(p(x), p(cos), p(sin), y, 40, 64, 24, 1, 40, True, -1, code, 0), x)
    half = x[:, :32].contiguous()
    both(lambda y: C.swiglu_fwd(_np(x), y), lambda y: C.swiglu_fwd_raw(p(x), y, 40, 32, code), half)
    both(lambda dx: C.swiglu_bwd(_np(half), _np(x), dx), lambda dx: C.swiglu_bwd_raw(p(half), p(x), dx, 40, 32, code),
         x)
    for tanh in (False, True):
        both(lambda y: C.gelu_fwd(_np(x), y, tanh), lambda y: C.gelu_fwd_raw(p(x), y, x.numel(), code, tanh), x)
        both(lambda dx: C.gelu_bwd(_np(g), _np(x), dx, tanh),
             lambda dx: C.gelu_bwd_raw(p(g), p(x), dx, x.numel(), code, tanh), x)
    both(lambda y: C.softmax_fwd(_np(x), mask.numpy(), y, 0.5, True, 8),
         lambda y: C.softmax_fwd_raw(p(x), p(mask), 1, 8, y, 40, 64, code, 0.5, True, 8), x)
    fmask = rnd(8, 64, seed=3)
    both(lambda y: C.softmax_fwd(_np(x), fmask.numpy(), y, 0.5, False, 1),
         lambda y: C.softmax_fwd_raw(p(x), p(fmask), 2, 8, y, 40, 64, code, 0.5, False, 1), x)
    both(lambda dx: C.softmax_bwd(_np(g), _np(x), dx, 0.5),
         lambda dx: C.softmax_bwd_raw(p(g), p(x), dx, 40, 64, code, 0.5), x)


def test_raw_entries_refuse_what_they_can_check(C):
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="dtype code 7 is none of 0"):
        C.rms_norm_fwd_raw(x.data_ptr(), x.data_ptr(), x.data_ptr(), 2, 4, 7, 1e-6)
    with pytest.raises(ValueError, match="weight is a null address"):
        C.rms_norm_fwd_raw(x.data_ptr(), 0, x.data_ptr(), 2, 4, 0, 1e-6)
    with pytest.raises(ValueError, match="a dimension is negative"):
        C.gelu_fwd_raw(x.data_ptr(), x.data_ptr(), -1, 0, False)
    with pytest.raises(ValueError, match="mask rows do not tile"):
        C.softmax_fwd_raw(x.data_ptr(), x.data_ptr(), 2, 3, x.data_ptr(), 2, 4, 0, 1.0, False, 1)


def test_host_keeps_refusing_bad_shapes():
    with pytest.raises(ValueError, match=r"weight has shape \(5,\), expected \(4,\)"):
        host.rms_norm(torch.ones(3, 4), torch.ones(5), 1e-6)
    with pytest.raises(ValueError, match="must be even"):
        host.swiglu(torch.ones(2, 5))
    with pytest.raises(ValueError, match="cover 6 rotary dims but the head dim is 4"):
        host.rotary_embedding(torch.ones(1, 2, 1, 4), torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"grads\[0\] is torch.bfloat16 but params\[0\] is torch.float32"):
        host.fused_adamw_([torch.ones(3)], [torch.ones(3, dtype=torch.bfloat16)], [torch.ones(3)], [torch.ones(3)],
                          1e-3, 0.9, 0.999, 1e-8, 0.0, 1)


def test_a_cpu_input_in_the_kernels_dtype_is_used_in_place():
    # no copy of x: the kernel reads it where it is (a view with an offset included)
    base = rnd(3, 64)
    x = base[1:]
    y = host.rms_norm(x, torch.ones(64), 1e-6)
    ref = host.rms_norm(x.clone(), torch.ones(64), 1e-6)
    assert torch.equal(y, ref)
    noncontig = rnd(64, 4).t()
    assert torch.equal(host.gelu(noncontig), host.gelu(noncontig.contiguous()))
    w = torch.ones(64, requires_grad=True)
    assert torch.equal(host.rms_norm(x, w, 1e-6), ref)


@pytest.mark.parametrize("numel", [64, host.HALF_DIRECT_BELOW * 4], ids=["float16 kernel", "float32 route"])
def test_float16_calls_give_the_bytes_of_the_float32_kernel_on_upcast_copies(numel):
    # small float16 calls run the float16 kernel itself (the copies cost more), larger ones the float32
    # kernel on float32 copies; the bytes are those of the float32 kernel rounded once, either way
    x, g = rnd(1, numel, dtype=torch.float16), rnd(1, numel, dtype=torch.float16, seed=1)
    w = rnd(numel, dtype=torch.float16, seed=2)
    half = torch.softmax(x.float(), -1).half()
    ang = torch.outer(torch.arange(1.0), torch.rand(32))
    cos, sin = ang.cos().half(), ang.sin().half()
    calls = {"rms_norm": (host.rms_norm, (x, w, 1e-6)), "swiglu": (host.swiglu, (x,)),
             "gelu": (host.gelu, (x, "tanh")), "gelu_backward": (host.gelu_backward, (g, x, "tanh")),
             "softmax": (host.softmax, (x, None, True, 0.5)), "softmax_backward": (host.softmax_backward, (g, half, 0.5)),
             "rotary_embedding": (host.rotary_embedding, (x.view(1, 1, -1, 64), cos, sin, False, 1))}
    for name, (fn, args) in calls.items():
        got = fn(*args)
        up = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        want = fn(*up)
        want = tuple(o.half() for o in want) if isinstance(want, tuple) else want.half()
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert a.dtype == torch.float16 and torch.equal(a, b), name
