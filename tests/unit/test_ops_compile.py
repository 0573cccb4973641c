"""hal.ops operators are single torch.library ops: opcheck, torch.export and torch.compile see them."""
import pytest
import torch

import hal.ops

F32 = dict(dtype=torch.float32)


def _cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    ang = torch.outer(torch.arange(4.0), torch.tensor([1.0, 0.1]))
    boxes = torch.tensor([[0, 0.5, 0.5, 4.0, 3.0], [0, 1.0, 0.0, 5.0, 5.0]])
    return {
        "rms_norm": (torch.ops.hal.rms_norm, (r(3, 8).requires_grad_(), r(8).requires_grad_(), 1e-6)),
        "add_rms_norm": (torch.ops.hal.add_rms_norm, (r(3, 8).requires_grad_(), r(3, 8).requires_grad_(),
                                                      r(8).requires_grad_(), 1e-6)),
        "layer_norm": (torch.ops.hal.layer_norm, (r(3, 8).requires_grad_(), r(8).requires_grad_(),
                                                  r(8).requires_grad_(), 1e-5)),
        "add_layer_norm": (torch.ops.hal.add_layer_norm, (r(3, 8).requires_grad_(), r(3, 8).requires_grad_(),
                                                          r(8).requires_grad_(), None, 1e-5)),
        "rotary_embedding": (torch.ops.hal.rotary_embedding, (r(2, 4, 3, 4).requires_grad_(), ang.cos(), ang.sin(),
                                                              False, 1)),
        "swiglu": (torch.ops.hal.swiglu, (r(3, 8).requires_grad_(),)),
        "gelu": (torch.ops.hal.gelu, (r(3, 8).requires_grad_(), "tanh")),
        "softmax": (torch.ops.hal.softmax, (r(2, 5, 5).requires_grad_(), r(5, 5) > 0, True, 0.5)),
        "roi_align": (torch.ops.hal.roi_align, (r(1, 2, 6, 6).requires_grad_(), boxes, 1.0, 2, 2, 2, True)),
        "fused_adamw_": (torch.ops.hal.fused_adamw_, ([r(5), r(3)], [r(5), r(3)], [r(5).abs(), r(3).abs()],
                                                      [r(5).abs(), r(3).abs()], 1e-3, 0.9, 0.99, 1e-8, 0.01, 3.0,
                                                      False)),
    }


OLD_TORCH = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 6)


@pytest.mark.parametrize("name", sorted(_cases()))
def test_opcheck(name):
    op, args = _cases()[name]
    if name == "fused_adamw_" and OLD_TORCH:
        pytest.skip(f"torch {torch.__version__}'s opcheck cannot functionalize a custom op that mutates a list of "
                    f"tensors (test_aot_dispatch_dynamic: 'outputs have alias annotations'); 2.6 can")
    torch.library.opcheck(op, args)


def test_nms_fake_output_has_a_dynamic_length():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        boxes = mode.from_tensor(torch.rand(7, 4))
        keep = torch.ops.hal.nms(boxes, mode.from_tensor(torch.rand(7)), 0.5)
    assert keep.dtype == torch.long and keep.dim() == 1
    assert isinstance(keep.shape[0], torch.SymInt)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(16))
        self.proj = torch.nn.Linear(16, 32)

    def forward(self, x):
        h = hal.ops.rms_norm(x, self.w)
        return hal.ops.softmax(hal.ops.swiglu(self.proj(h)), causal=False, scale=2.0)


@pytest.mark.skipif(OLD_TORCH, reason=f"torch {torch.__version__}'s torch.export warns that it keeps composite "
                                       f"custom ops at pre-dispatch (warnings are errors here); 2.6 does not")
def test_torch_export_keeps_one_node_per_op():
    ep = torch.export.export(Block(), (torch.randn(4, 16),))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "hal.rms_norm.default" in targets
    assert "hal.swiglu.default" in targets
    assert "hal.softmax.default" in targets


def test_torch_compile_fullgraph_forward_and_backward():
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(4, 16, requires_grad=True)
    eager = m(x)
    eager.sum().backward()
    g_eager = x.grad.clone()
    x.grad = None
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    out = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(x.grad, g_eager)
