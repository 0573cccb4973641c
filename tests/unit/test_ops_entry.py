"""hal.ops' entry decides per call between the custom op, the direct call and the autograd route.

Where hal._C is built the decision is made in C (``OpEntry``); elsewhere (and with
``HAL_OPS_NATIVE=0``) by the Python ``Op``.  Both must route every call the same way: a call a
dispatch mode, a tensor subclass, ``torch.jit.trace`` or a functorch transform must see goes to
the custom op, a plain eager call to the implementation, one that needs a gradient to the
autograd route.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hal.ops
from hal.ops import host
from hal.ops._boundary import Op, entry

NATIVE = hal.ops.native_entry()
needs_native = pytest.mark.skipif(not NATIVE, reason="hal._C has no OpEntry here (not built, Python < 3.11, "
                                                     "or HAL_OPS_NATIVE=0)")


class Sub(torch.Tensor):
    """A tensor subclass, as DTensor or a quantized tensor would be."""


class Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Probe(Op):
    """An Op whose three routes say which one was taken."""

    def grad_call(self, *args, **kwargs):
        return "grad"


def _probe():
    probe = Probe(lambda *a, **k: "custom", lambda *a, **k: "impl", name="probe")
    return probe, entry(probe)


def _calls():
    x = torch.randn(3)
    g = torch.randn(3, requires_grad=True)
    sub = torch.randn(3).as_subclass(Sub)
    param = torch.nn.Parameter(torch.randn(3))
    return {
        "plain": ((x, 1.0), "impl"),
        "no tensor": ((None, 2), "impl"),
        "requires grad": ((x, g), "grad"),
        "parameter": ((param,), "grad"),
        "parameter without grad": ((torch.nn.Parameter(torch.randn(3), requires_grad=False),), "impl"),
        "subclass": ((x, sub), "custom"),
        "list of plain": (([x, x], 0.5), "impl"),
        "list with grad": (([x, g],), "grad"),
        "tuple with subclass": (((x, sub),), "custom"),
    }


@needs_native
@pytest.mark.parametrize("case", list(_calls()))
def test_c_and_python_entries_route_a_call_the_same_way(case):
    python, native = _probe()
    assert type(native).__name__ == "OpEntry"
    args, expected = _calls()[case]
    assert python(*args) == expected
    assert native(*args) == expected


@needs_native
def test_the_entries_send_calls_under_a_dispatch_mode_or_a_transform_to_the_custom_op():
    python, native = _probe()
    x = torch.randn(3)
    with Passthrough():
        assert python(x) == native(x) == "custom"
    seen = {}

    def f(v):
        seen["python"], seen["native"] = python(v), native(v)
        return v

    torch.func.vmap(f)(torch.randn(2, 3))
    assert seen == {"python": "custom", "native": "custom"}


@needs_native
def test_keyword_arguments_reach_the_route_unchanged():
    got = {}
    probe = Probe(lambda *a, **k: "custom", lambda *a, **k: got.update(args=a, kwargs=k) or "impl", name="kw")
    native = entry(probe)
    x = torch.randn(2)
    assert native(x, scale=0.5) == "impl"
    assert got["args"][0] is x and got["kwargs"] == {"scale": 0.5}
    sub = torch.randn(2).as_subclass(Sub)
    assert native(x, other=sub) == "custom"  # a keyword tensor is looked at too


@needs_native
def test_the_c_entry_names_its_op_and_does_not_bind_as_a_method():
    op = hal.ops.softmax.__globals__["SOFTMAX"]
    assert op.name == "softmax" and op.__name__ == "softmax" and "softmax" in repr(op)
    assert op.custom is torch.ops.hal.softmax

    class Holder:
        entry = op

    x = torch.randn(2, 4)
    assert torch.allclose(Holder().entry(x, None, False, 1.0), torch.softmax(x, -1), atol=1e-6)  # no self, as Op


@pytest.mark.skipif(not host.available(), reason="hal._C (the C++ host kernels) is not built here")
def test_the_raw_kernel_entries_refuse_bad_arguments_with_python_errors():
    import hal._C as _C_probe

    x = torch.randn(4)
    y = torch.empty_like(x)
    with pytest.raises(TypeError, match="takes 5 positional arguments"):
        _C_probe.gelu_fwd_raw(x.data_ptr(), y.data_ptr(), 4, 0)
    with pytest.raises(TypeError, match="expected a bool"):
        _C_probe.gelu_fwd_raw(x.data_ptr(), y.data_ptr(), 4, 0, 1)
    with pytest.raises(ValueError, match="negative"):
        _C_probe.gelu_fwd_raw(x.data_ptr(), y.data_ptr(), -4, 0, False)
    with pytest.raises(ValueError, match="dtype code 7"):
        _C_probe.gelu_fwd_raw(x.data_ptr(), y.data_ptr(), 4, 7, False)
    _C_probe.gelu_fwd_raw(x.data_ptr(), y.data_ptr(), 4, 0, False)
    assert torch.allclose(y, torch.nn.functional.gelu(x), atol=1e-6)


def test_hal_ops_native_0_keeps_the_python_entry_and_the_report_names_the_entry(monkeypatch):
    monkeypatch.setenv("HAL_OPS_NATIVE", "0")
    python, chosen = _probe()
    assert chosen is python  # the switch, as read when an operator is defined
    assert hal.ops.native_entry() == NATIVE  # the loaded operators keep the entry they were given
    from hal.ops.report import report

    assert report("cpu")["native_entry"] == NATIVE
