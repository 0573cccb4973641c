"""C++ host kernels (hal._C through hal.ops on the CPU) against the torch eager composition.

Baselines measured in the same run, on the same tensors:
  * torch eager: the operator written with standard torch ops (what the model would run
    without a fused kernel);
  * torch.compile (inductor) of that same composition, where it compiles (it needs a C++
    compiler; ``--no-compile`` skips it);
  * memory bandwidth: ``dst.copy_(src)`` moving the same number of bytes as the kernel
    (read + write), timed in the same round robin: the physical limit a memory-bound
    kernel can approach.  ``src.clone()`` (a fresh output, so page faults included) is
    the same limit for a call that allocates its output.

Two hal figures per kernel: the op as a user calls it (``hal.ops.*``: dispatch, output
allocation, kernel) and the kernel alone (``hal._C`` writing into preallocated outputs).
Achieved bandwidth = the bytes a kernel must move at least (each input read once, each
output written once) / time; kernel alone against the copy, op against the clone, both
of the same bytes (so cache effects, where the machine's cache holds part of the data,
apply to the baseline too).

Usage: python bench/bench_host_kernels.py [--no-compile] [--repeat N] [--json FILE]
Prints, per kernel, the speed-up over eager (eager time / hal time), over torch.compile,
and the achieved bandwidth as a fraction of the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import hal
import hal.ops
from hal.ops import host

MiB = 1 << 20



def measure(fns, repeat):
    """Best time of each function, calling them in turn (round robin) so that load from
    other processes on a shared machine falls on every contender alike."""
    for fn in fns:
        fn()
        fn()  # warm caches, allocator, lazy init
    best = [math.inf] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


def copy_bandwidth(repeat):
    """(copy into an existing buffer, clone into a fresh one) in bytes/s, read + write."""
    src = torch.randn(64 * MiB)  # 256 MiB of float32
    dst = torch.empty_like(src)
    t_copy, t_clone = measure([lambda: dst.copy_(src), lambda: src.clone()], repeat)
    return 2 * src.numel() * 4 / t_copy, 2 * src.numel() * 4 / t_clone


def np_(t):
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


# -- the operators: (hal call, eager composition, bytes moved) -------------------------
def eager_rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def eager_rms_bwd(g, x, w):
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    gw = g * w
    dx = rstd * (gw - x * rstd.pow(2) * (gw * x).mean(-1, keepdim=True))
    return dx, (g * x * rstd).sum(0)


def eager_add_rms(x, r, w):
    h = x + r
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w, h


def eager_add_ln(x, r, w, b):
    h = x + r
    mu = h.mean(-1, keepdim=True)
    var = (h - mu).pow(2).mean(-1, keepdim=True)
    return (h - mu) * torch.rsqrt(var + 1e-5) * w + b, h


def eager_rotary(x, cos, sin):
    half = cos.shape[-1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def eager_swiglu(x):
    a, b = x.chunk(2, -1)
    return F.silu(a) * b


def eager_gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def eager_softmax(x, scale):
    q, k = x.shape[-2:]
    keep = torch.ones(q, k, dtype=torch.bool).tril()
    return torch.softmax((x * scale).masked_fill(~keep, float("-inf")), -1)


def cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    n = 4096
    x, w, b = r(n, n), r(n), r(n)
    xb = x.bfloat16()
    res = r(n, n)
    dy = r(n, n)
    B, S, H, D = 1, 4096, 32, 128  # LLaMA-7B-sized rotary on one 4k sequence
    q = r(B, S, H, D)
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D)
    ang = torch.outer(torch.arange(S).float(), inv)
    cos, sin = ang.cos(), ang.sin()
    gu = r(n, 2 * n)
    sc = r(16, 1024, 1024)
    f4 = 4
    C = host.native()
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    outb = torch.empty_like(xb)
    wb = w.bfloat16()
    dw = torch.empty(n)
    oq = torch.empty_like(q)
    osw = torch.empty(n, n)
    osc = torch.empty_like(sc)
    kern = {
        "rms_norm fwd 4096x4096 f32": lambda: C.rms_norm_fwd(x.numpy(), w.numpy(), out.numpy(), 1e-6),
        "rms_norm fwd 4096x4096 bf16": lambda: C.rms_norm_fwd(np_(xb), np_(wb), np_(outb), 1e-6),
        "rms_norm bwd 4096x4096 f32": lambda: C.rms_norm_bwd(dy.numpy(), x.numpy(), w.numpy(), out.numpy(),
                                                             dw.numpy(), 1e-6),
        "add+rms_norm fwd 4096x4096 f32": lambda: C.add_rms_norm_fwd(x.numpy(), res.numpy(), w.numpy(), out.numpy(),
                                                                     out2.numpy(), 1e-6),
        "add+layer_norm fwd 4096x4096 f32": lambda: C.layer_norm_fwd(x.numpy(), res.numpy(), w.numpy(), b.numpy(),
                                                                     out.numpy(), out2.numpy(), 1e-5),
        "rotary half-split 1x4096x32x128 f32": lambda: C.rotary_fwd(q.view(-1, D).numpy(), cos.numpy(), sin.numpy(),
                                                                    oq.view(-1, D).numpy(), H, S, False, 1),
        "swiglu 4096x(2x4096) f32": lambda: C.swiglu_fwd(gu.numpy(), osw.numpy()),
        "gelu tanh 4096x4096 f32": lambda: C.gelu_fwd(x.view(-1).numpy(), out.view(-1).numpy(), True),
        "causal softmax 16x1024x1024 f32": lambda: C.softmax_fwd(sc.view(-1, 1024).numpy(), None,
                                                                 osc.view(-1, 1024).numpy(), 0.125, True, 1024),
    }
    rows = [
        ("rms_norm fwd 4096x4096 f32", lambda: hal.ops.rms_norm(x, w), lambda: eager_rms(x, w),
         eager_rms, (x, w), 2 * x.numel() * f4),
        ("rms_norm fwd 4096x4096 bf16", lambda: hal.ops.rms_norm(xb, w.bfloat16()),
         lambda: eager_rms(xb, w.bfloat16()), eager_rms, (xb, w.bfloat16()), 2 * x.numel() * 2),
        ("rms_norm bwd 4096x4096 f32", lambda: host.rms_norm_backward(dy, x, w, 1e-6),
         lambda: eager_rms_bwd(dy, x, w), eager_rms_bwd, (dy, x, w), 3 * x.numel() * f4),
        ("add+rms_norm fwd 4096x4096 f32", lambda: hal.ops.rms_norm(x, w, 1e-6, residual=res),
         lambda: eager_add_rms(x, res, w), eager_add_rms, (x, res, w), 4 * x.numel() * f4),
        ("add+layer_norm fwd 4096x4096 f32", lambda: hal.ops.layer_norm(x, w, b, 1e-5, residual=res),
         lambda: eager_add_ln(x, res, w, b), eager_add_ln, (x, res, w, b), 4 * x.numel() * f4),
        ("rotary half-split 1x4096x32x128 f32", lambda: hal.ops.rotary_embedding(q, cos, sin),
         lambda: eager_rotary(q, cos, sin), eager_rotary, (q, cos, sin), 2 * q.numel() * f4),
        ("swiglu 4096x(2x4096) f32", lambda: hal.ops.swiglu(gu), lambda: eager_swiglu(gu), eager_swiglu, (gu,),
         (gu.numel() + gu.numel() // 2) * f4),
        ("gelu tanh 4096x4096 f32", lambda: hal.ops.gelu(x, "tanh"), lambda: eager_gelu_tanh(x), eager_gelu_tanh,
         (x,), 2 * x.numel() * f4),
        ("causal softmax 16x1024x1024 f32", lambda: hal.ops.softmax(sc, causal=True, scale=0.125),
         lambda: eager_softmax(sc, 0.125), eager_softmax, (sc, 0.125), 2 * sc.numel() * f4),
    ]
    return [(name, kern[name], *rest) for name, *rest in rows]


def adamw_case():
    """AdamW over 64 tensors of 256k params (16.8 M): hal host kernel vs torch's own paths."""
    g = torch.Generator().manual_seed(1)
    mk = lambda: [torch.randn(256 * 1024, generator=g) for _ in range(64)]  # noqa: E731
    ps, gs, ms, vs = mk(), mk(), mk(), [t.abs() for t in mk()]
    kw = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
    steps = [torch.tensor(3.0)] * len(ps)

    def hal_step():
        hal.ops.fused_adamw_(ps, gs, ms, vs, step=3, **kw)

    def single():  # torch.optim.AdamW(foreach=False): the CPU default
        from torch.optim.adamw import adamw
        adamw(ps, gs, ms, vs, [], [torch.tensor(3.0) for _ in ps], foreach=False, capturable=False,
              differentiable=False, fused=False, amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3,
              weight_decay=0.01, eps=1e-8, maximize=False)

    def fused():
        torch._fused_adamw_(ps, gs, ms, vs, [], steps, amsgrad=False, maximize=False, **kw)

    nbytes = 7 * sum(p.numel() for p in ps) * 4  # read p, g, m, v; write p, m, v
    return hal_step, single, fused, nbytes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per contender (the best is reported)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if not hal.native_available():
        sys.exit("bench_host_kernels: hal._C is not built; nothing to measure (reinstall with a C++ compiler)")
    warnings.simplefilter("ignore", hal.ops.FallbackWarning)
    env = {"machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "openmp_threads": host.native().openmp_threads(),
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    print(f"machine: {env}")
    bw, bw_clone = copy_bandwidth(args.repeat)
    print(f"copy bandwidth, 256 MiB read + write: dst.copy_(src) {bw / 1e9:.2f} GB/s; "
          f"src.clone() {bw_clone / 1e9:.2f} GB/s (fresh pages); per kernel below: a copy of its own bytes\n")
    rows = []
    hdr = (f"{'kernel':36} {'kernel ms':>9} {'GB/s':>6} {'copy':>6} {'%copy':>6} | {'op ms':>7} {'%clone':>6} "
           f"{'eager ms':>9} {'vs eager':>8} {'compile ms':>10} {'vs compile':>10}")
    print(hdr)
    print("-" * len(hdr))
    for name, kern_fn, hal_fn, eager_fn, comp_src, comp_args, nbytes in cases():
        src = torch.randn(nbytes // 8)  # copying it reads and writes nbytes in all
        dst = torch.empty_like(src)
        t_kern, t_hal, t_eager, t_copy, t_clone = measure(
            [kern_fn, hal_fn, eager_fn, lambda: dst.copy_(src), lambda: src.clone()], args.repeat)
        del src, dst
        t_comp, comp_note = None, "skipped (--no-compile)"
        if not args.no_compile:
            try:
                compiled = torch.compile(comp_src)
                compiled(*comp_args)  # compile outside the timing
                t_comp, t_hal2 = measure([lambda: compiled(*comp_args), hal_fn], args.repeat)
                t_hal = min(t_hal, t_hal2)
                comp_note = None
            except Exception as exc:  # inductor needs a working C++ toolchain
                comp_note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        row = dict(kernel=name, kernel_ms=t_kern * 1e3, kernel_gbps=nbytes / t_kern / 1e9,
                   copy_gbps=nbytes / t_copy / 1e9, clone_gbps=nbytes / t_clone / 1e9,
                   kernel_fraction_of_copy=t_copy / t_kern, op_fraction_of_clone=t_clone / t_hal,
                   hal_ms=t_hal * 1e3, eager_ms=t_eager * 1e3, speedup_vs_eager=t_eager / t_hal,
                   compile_ms=None if t_comp is None else t_comp * 1e3,
                   speedup_vs_compile=None if t_comp is None else t_comp / t_hal, compile_note=comp_note,
                   bytes=nbytes)
        rows.append(row)
        cm = "-" if t_comp is None else f"{t_comp * 1e3:.2f}"
        cr = "-" if t_comp is None else f"{t_comp / t_hal:.2f}x"
        print(f"{name:36} {t_kern * 1e3:9.2f} {row['kernel_gbps']:6.2f} {row['copy_gbps']:6.2f} "
              f"{100 * row['kernel_fraction_of_copy']:5.0f}% | "
              f"{t_hal * 1e3:7.2f} {100 * row['op_fraction_of_clone']:5.0f}% {t_eager * 1e3:9.2f} "
              f"{t_eager / t_hal:7.2f}x {cm:>10} {cr:>10}", flush=True)
        if comp_note and not args.no_compile:
            print(f"    torch.compile {comp_note}")
    hal_step, single, fused, nbytes = adamw_case()
    src = torch.randn(nbytes // 8)
    dst = torch.empty_like(src)
    t_hal, t_single, t_fused, t_copy = measure([hal_step, single, fused, lambda: dst.copy_(src)], args.repeat)
    del src, dst
    print(f"\nAdamW step, 64 x 256k float32 params (16.8 M): hal {t_hal * 1e3:.2f} ms | "
          f"torch single-tensor (CPU default) {t_single * 1e3:.2f} ms ({t_single / t_hal:.2f}x) | "
          f"torch._fused_adamw_ {t_fused * 1e3:.2f} ms ({t_fused / t_hal:.2f}x) | "
          f"hal {nbytes / t_hal / 1e9:.2f} GB/s = {100 * t_copy / t_hal:.0f}% of a copy of the same bytes "
          f"({nbytes / t_copy / 1e9:.2f} GB/s)")
    rows.append(dict(kernel="adamw 16.8M f32", hal_ms=t_hal * 1e3, torch_single_ms=t_single * 1e3,
                     torch_fused_ms=t_fused * 1e3, speedup_vs_single=t_single / t_hal,
                     speedup_vs_torch_fused=t_fused / t_hal, gbps=nbytes / t_hal / 1e9,
                     copy_gbps=nbytes / t_copy / 1e9, fraction_of_copy=t_copy / t_hal))
    if args.json:
        from hal.util.io import atomic_write
        atomic_write(args.json, json.dumps({"env": env, "copy_gbps": bw / 1e9, "clone_gbps": bw_clone / 1e9,
                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
