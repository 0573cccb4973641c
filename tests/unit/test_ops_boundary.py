"""hal.ops' two routes into an operator: the direct eager call and the torch.library custom op.

Eager calls skip the custom op's Python layers; anything that must see the op (a dispatch
mode such as FlopCounterMode or selective activation checkpointing, FakeTensor, a tensor
subclass) still gets ``torch.ops.hal.*``.  Both routes must give the same bytes.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hal
import hal.ops
from hal.ops import host

needs_native = pytest.mark.skipif(not host.available(), reason="hal._C (C++ host kernels) is not built here")


class Recorder(TorchDispatchMode):
    """Records every op that reaches the dispatcher (what a profiler-like mode sees)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _cases(dtype):
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    ang = torch.outer(torch.arange(64.0), torch.rand(32, generator=g))
    # gelu, swiglu and rotary at sizes where the CPU declares its kernel faster than the torch
    # composition with a gradient too (backends/cpu/backend.json "sizes"): the kernel runs on both routes
    return {
        "rms_norm": (lambda x, w: hal.ops.rms_norm(x, w, 1e-6), (r(6, 16), r(16))),
        "add_rms_norm": (lambda x, res, w: hal.ops.rms_norm(x, w, 1e-6, residual=res), (r(6, 16), r(6, 16), r(16))),
        "layer_norm": (lambda x, w, b: hal.ops.layer_norm(x, w, b, 1e-5), (r(6, 16), r(16), r(16))),
        "add_layer_norm": (lambda x, res, w, b: hal.ops.layer_norm(x, w, b, 1e-5, residual=res),
                           (r(6, 16), r(6, 16), r(16), r(16))),
        "swiglu": (hal.ops.swiglu, (r(16, 8192),)),
        "gelu": (lambda x: hal.ops.gelu(x, "tanh"), (r(16, 4096),)),
        "softmax": (lambda x: hal.ops.softmax(x, causal=True, scale=0.5), (r(2, 5, 5),)),
        "rotary_embedding": (lambda x: hal.ops.rotary_embedding(x, ang.cos().to(dtype), ang.sin().to(dtype)),
                             (r(2, 64, 8, 64),)),
    }


def _run(fn, args):
    """Forward outputs and the gradients of every input, from a fixed upstream gradient."""
    leaves = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum() for o in outs)
    loss.backward()
    return [o.detach() for o in outs] + [leaf.grad for leaf in leaves]


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_eager_route_and_custom_op_route_give_the_same_bytes(dtype):
    for name, (fn, args) in _cases(dtype).items():
        eager = _run(fn, args)
        with Recorder() as rec:  # a dispatch mode is active: the custom op is taken
            traced = _run(fn, args)
        assert f"hal.{name}" in rec.ops, name
        for a, b in zip(eager, traced):
            assert torch.equal(a, b), name


def test_dispatch_modes_still_see_the_hal_op_and_its_backward():
    x = torch.randn(4, 8, requires_grad=True)
    with Recorder() as rec:
        hal.ops.rms_norm(x, torch.ones(8)).sum().backward()
    assert "hal.rms_norm" in rec.ops and "hal.rms_norm_backward" in rec.ops


def test_fake_tensors_take_the_custom_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = hal.ops.swiglu(torch.empty(3, 8))
    assert type(y).__name__ == "FakeTensor" and y.shape == (3, 4)


def test_eager_gradient_passes_gradcheck():
    x = torch.randn(5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    with hal.ops.use_path("composition"):  # float64: no fused kernel takes it
        assert torch.autograd.gradcheck(lambda a, b: hal.ops.rms_norm(a, b, 1e-6), (x, w))


def test_no_grad_and_inference_mode_run_without_building_a_graph():
    x = torch.randn(3, 8, requires_grad=True)
    with torch.no_grad():
        assert hal.ops.rms_norm(x, torch.ones(8)).grad_fn is None
    with torch.inference_mode():
        y = hal.ops.gelu(torch.randn(3, 8))
    assert y.is_inference()


def test_parameters_take_the_eager_route_and_get_gradients():
    norm = torch.nn.Parameter(torch.ones(8))
    x = torch.randn(3, 8)
    hal.ops.rms_norm(x, norm).sum().backward()
    assert norm.grad is not None and norm.grad.shape == (8,)


def test_without_a_fused_kernel_a_gradient_call_runs_the_torch_ops_under_autograd(monkeypatch, clean_registry):
    import hal_backends.cpu

    monkeypatch.setattr(hal_backends.cpu._plugin, "fused_kernels", {})  # a device that declares none
    hal.reset_registry()
    hal.ops.reset_stats()
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    with pytest.warns(hal.ops.FallbackWarning, match="no fused kernel declared"):
        y = hal.ops.rms_norm(x, w, 1e-6)
    assert "function" not in type(y.grad_fn).__name__  # torch's own backward node, not hal's formula
    y.sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x2, (16,), w2, 1e-6).sum().backward()
    assert torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)
    assert hal.ops.stats()["rms_norm"]["composition"] == 1
    hal.ops.reset_stats()


def test_a_fused_kernel_made_of_torch_ops_keeps_torch_autograd():
    # the CPU's layer_norm kernel is ATen's (backends/cpu/backend.json): its backward is torch's own
    x = torch.randn(4, 16, requires_grad=True)
    w, b = torch.randn(16, requires_grad=True), torch.randn(16, requires_grad=True)
    y = hal.ops.layer_norm(x, w, b, 1e-5)
    assert "LayerNorm" in type(y.grad_fn).__name__
    y.sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(x2, (16,), w2, b2, 1e-5).sum().backward()
    assert torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad) and torch.equal(b.grad, b2.grad)


def test_jit_trace_records_the_hal_op():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # the argument checks read shapes
        traced = torch.jit.trace(lambda x, w: hal.ops.rms_norm(x, w, 1e-6), (torch.randn(2, 8), torch.ones(8)))
    assert "hal::rms_norm" in str(traced.graph)
    x, w = torch.randn(3, 8), torch.randn(8)
    assert torch.equal(traced(x, w), hal.ops.rms_norm(x, w, 1e-6))
