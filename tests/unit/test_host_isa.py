"""The swiglu/gelu/softmax host kernels exist once per instruction set (csrc/isa/): the one
picked must be one this CPU runs, and every ISA must agree with the baseline build of the same
kernels (FMA and wider vectors only change rounding)."""
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

from hal.ops import host

pytestmark = pytest.mark.skipif(not host.available(), reason="hal._C (C++ host kernels) is not built here")

# the CPU features each ISA's compiler flags allow (setup.py ISA_FLAGS), as /proc/cpuinfo names them
NEEDS = {"baseline": set(), "avx2": {"avx2", "fma", "f16c"},
         "avx512": {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}}


@pytest.fixture
def C():
    C = host.native()
    before = C.isa()
    yield C
    C.set_isa(before)


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next(set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return None


def test_the_chosen_isa_is_the_widest_this_cpu_supports(C):
    isas = C.isas()
    assert isas[-1] == "baseline" and C.isa() in isas
    if not os.environ.get("HAL_HOST_ISA"):
        assert C.isa() == isas[0]
    flags = cpu_flags()
    if flags is None or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("no /proc/cpuinfo flags to check the ISAs against")
    for isa in isas:
        assert NEEDS[isa] <= flags, f"{isa} offered, but this CPU lacks {sorted(NEEDS[isa] - flags)}"


def test_an_unusable_isa_is_refused_naming_the_usable_ones(C):
    with pytest.raises(RuntimeError, match=r"set_isa asks for host ISA 'avx9', which is not one of baseline, "
                                           r"avx2, avx512; usable here: .*baseline\. Fix:"):
        C.set_isa("avx9")
    for isa in set(NEEDS) - set(C.isas()):
        with pytest.raises(RuntimeError, match=f"'{isa}', which this CPU or this build of hal._C cannot run"):
            C.set_isa(isa)


def test_hal_host_isa_forces_one_or_fails_clearly():
    code = "from hal import _C\ntry:\n print(_C.isa())\nexcept RuntimeError as e:\n print('ERR', e)"
    for want, expect in (("baseline", "baseline"), ("avx9", "ERR HAL_HOST_ISA asks for host ISA 'avx9'")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "HAL_HOST_ISA": want},
                             capture_output=True, text=True, timeout=120)
        assert out.stdout.startswith(expect), out.stdout + out.stderr


def _buffers(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g) * 4
    flat = t.view(-1)
    flat[:8] = torch.tensor([0.0, -0.0, 90.0, -90.0, 1e-30, float("inf"), float("-inf"), float("nan")])
    t = t.to(dtype)
    return t


def _np(t):
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _run_all(C, dtype):
    """Every entry of the kernel table, on shapes with vector tails (odd lengths)."""
    x = _buffers(dtype, (5, 2 * 67), 0)
    g_half = _buffers(dtype, (5, 67), 1)
    flat = _buffers(dtype, (1003,), 2)
    g_flat = _buffers(dtype, (1003,), 3)
    s = _buffers(dtype, (12, 37), 4)
    s[:, :8] = 0.5  # keep the special values out of the softmax rows (one NaN would fill a row)
    g_s = _buffers(dtype, (12, 37), 5)
    keep = torch.rand((4, 37), generator=torch.Generator().manual_seed(6)) > 0.3
    keep[1] = False  # a fully masked row comes out zeros
    add = torch.randn((4, 37), generator=torch.Generator().manual_seed(7))
    out = {}

    def call(name, fn, like):
        o = torch.empty_like(like)
        fn(_np(o))
        out[name] = o.float()

    call("swiglu", lambda o: C.swiglu_fwd(_np(x), o), g_half)
    call("swiglu_bwd", lambda o: C.swiglu_bwd(_np(g_half), _np(x), o), x)
    for tanh in (False, True):
        call(f"gelu{tanh}", lambda o: C.gelu_fwd(_np(flat), o, tanh), flat)
        call(f"gelu_bwd{tanh}", lambda o: C.gelu_bwd(_np(g_flat), _np(flat), o, tanh), flat)
    for name, mask, causal in (("plain", None, False), ("bool", keep.numpy(), False),
                               ("add", add.numpy(), False), ("causal", None, True), ("causal_bool", keep.numpy(), True)):
        call(f"softmax_{name}", lambda o: C.softmax_fwd(_np(s), mask, o, 0.3, causal, 6), s)
    y = torch.softmax(s.float(), -1).to(dtype)
    call("softmax_bwd", lambda o: C.softmax_bwd(_np(g_s), _np(y), o, 0.3), s)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_isa_matches_the_baseline_kernels(C, dtype):
    C.set_isa("baseline")
    ref = _run_all(C, dtype)
    # one unit in the last place of the output dtype, relative; float32 gets a few
    rtol = {torch.float32: 2e-6, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[dtype]
    for isa in C.isas()[:-1]:
        C.set_isa(isa)
        assert C.isa() == isa
        got = _run_all(C, dtype)
        for name, want in ref.items():
            torch.testing.assert_close(got[name], want, rtol=rtol, atol=1e-6, equal_nan=True,
                                       msg=lambda m: f"{isa} {name} {dtype}: {m}")
