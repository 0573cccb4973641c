"""How hal.ops picks a path per call, counts fallbacks and warns once; plugin kernel tables."""
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import hal
import hal.ops
from hal.plugin.facts import builtin_fused_kernels, fused_kernel_facts
from hal.ops import host
from hal.ops._dispatch import resolve
from hal.plugin.kernels import SizedKernel

needs_native = pytest.mark.skipif(not host.available(), reason="hal._C (C++ host kernels) is not built here")


@pytest.fixture
def fresh(clean_registry):
    hal.ops.reset_stats()
    yield
    hal.ops.reset_stats()


@pytest.fixture
def cpu_kernels(fresh, monkeypatch):
    """Replace the CPU plugin's declared kernel table (through the real hook)."""
    import hal_backends.cpu

    def set_table(table):
        monkeypatch.setattr(hal_backends.cpu._plugin, "fused_kernels", table)
        hal.reset_registry()
    return set_table


@needs_native
def test_cpu_uses_its_host_kernels_without_fallback(fresh):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hal.ops.rms_norm(torch.randn(2, 8), torch.ones(8))
    assert hal.ops.stats()["rms_norm"] == {"fused": 1, "composition": 0, "host": 0, "fallbacks": 0,
                                           "last_fallback": None}


@needs_native
def test_unsupported_dtype_falls_back_counted_and_warned_once(fresh):
    x = torch.randn(2, 8, dtype=torch.float64)
    with pytest.warns(hal.ops.FallbackWarning, match=r"hal.ops.gelu: fused kernel refused the call: .*float64") as rec:
        hal.ops.gelu(x)
    assert rec[0].filename == __file__  # the warning points at the caller's line, not at hal or torch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second fallback is counted, not warned
        y = hal.ops.gelu(x)
    assert y.dtype == torch.float64
    s = hal.ops.stats()["gelu"]
    assert (s["composition"], s["fallbacks"]) == (2, 2) and "torch composition" in s["last_fallback"]


def test_forced_paths_are_counted_not_warned(fresh):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hal.ops.use_path("composition"):
            hal.ops.swiglu(torch.randn(3, 4))
    assert hal.ops.stats()["swiglu"]["composition"] == 1
    assert hal.ops.stats()["swiglu"]["fallbacks"] == 0
    with pytest.raises(ValueError, match="unknown path; choose one of fused, composition, host"):
        with hal.ops.use_path("gpu"):
            pass


def test_plugin_declared_kernel_is_called(cpu_kernels):
    calls = []

    def my_gelu(x, approximate):
        calls.append(approximate)
        return torch.full_like(x, 7.0)

    cpu_kernels({"gelu": my_gelu})
    out = hal.ops.gelu(torch.zeros(3), approximate="tanh")
    assert calls == ["tanh"] and torch.equal(out, torch.full((3,), 7.0))
    assert hal.ops.stats()["gelu"]["fused"] == 1


def test_refusing_or_unloadable_kernel_falls_back_with_its_reason(cpu_kernels):
    def refuse(x, weight, eps):
        raise hal.ops.KernelUnsupported("vendor kernel wants 2-D input")

    cpu_kernels({"rms_norm": refuse, "swiglu": "no_such_vendor_module:swiglu"})
    with pytest.warns(hal.ops.FallbackWarning, match="vendor kernel wants 2-D input"):
        y = hal.ops.rms_norm(torch.ones(2, 4), torch.ones(4))
    torch.testing.assert_close(y, torch.ones(2, 4), rtol=1e-5, atol=1e-5)
    with pytest.warns(hal.ops.FallbackWarning, match="no_such_vendor_module:swiglu cannot be loaded"):
        hal.ops.swiglu(torch.ones(2, 4))
    with pytest.raises(hal.ops.KernelUnsupported, match="use_path\\('fused'\\)"):
        with hal.ops.use_path("fused"):
            hal.ops.gelu(torch.ones(2))


@needs_native
def test_composition_not_implemented_on_device_goes_to_host(cpu_kernels, monkeypatch):
    import hal.ops.compositions as comp

    def not_here(*a):
        raise NotImplementedError("aten::rsqrt is not implemented for this device")

    cpu_kernels({})
    monkeypatch.setattr(comp, "rms_norm", not_here)
    x, w = torch.randn(3, 16), torch.randn(16)
    with pytest.warns(hal.ops.FallbackWarning, match="C\\+\\+ host kernel through host memory"):
        y = hal.ops.rms_norm(x, w)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (16,), w, 1e-6))
    assert hal.ops.stats()["rms_norm"]["host"] == 1


def test_every_declared_kernel_resolves_without_importing_vendor_stacks():
    vendor_modules = ("torch_npu", "torch_mlu", "torch_mlu_ops", "torch_musa", "tecoops", "kunlun_ops",
                      "flash_attn", "torchvision")
    before = {m for m in vendor_modules if m in sys.modules}
    facts = fused_kernel_facts()
    known = {"rms_norm", "add_rms_norm", "rms_norm_backward", "layer_norm", "add_layer_norm", "layer_norm_backward",
             "rotary_embedding", "swiglu", "swiglu_backward", "gelu", "gelu_backward", "softmax",
             "softmax_backward", "fused_adamw_", "nms", "roi_align", "roi_align_backward"}
    for backend, table in facts["backends"].items():
        assert set(table) <= known, f"{backend} declares unknown ops {set(table) - known}"
        for op, kernel in builtin_fused_kernels(backend).items():
            assert callable(resolve(kernel)), f"{backend}.{op}: {kernel}"
            entry = table[op]
            assert entry["source"] and entry["confidence"], f"{backend}.{op} lacks its source"
    assert {m for m in vendor_modules if m in sys.modules} == before


def test_builtin_plugins_declare_their_tables_through_the_hook(clean_registry):
    reg = hal.get_registry()
    for cand in reg.candidates():
        plugin = reg.pm.get_plugin(cand.plugin)
        tables = [t for t in reg.plugin_call(plugin, "hal_fused_kernels", spec=cand.spec) if t]
        declared = tables[0] if tables else {}
        assert declared == builtin_fused_kernels(cand.name), cand.name
    assert "npu_rotary_mul" in json.dumps(fused_kernel_facts()["backends"]["ascend"]["rotary_embedding"])


def test_hal_works_without_native_kernels():
    code = """
import sys, warnings
sys.modules["hal._C"] = None          # as if the C++ build had failed
import torch, hal, hal.ops
assert hal.native_available() is False
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    y = hal.ops.rms_norm(torch.ones(2, 4), torch.ones(4))
assert torch.allclose(y, torch.ones(2, 4), atol=1e-5)
assert any("hal._C" in str(x.message) for x in w), [str(x.message) for x in w]
try:
    with hal.ops.use_path("host"):
        hal.ops.gelu(torch.ones(2))
except hal.ops.KernelUnsupported as exc:
    print("refused:", exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: the C++ host kernels (hal._C) are not built" in out.stdout


def test_the_path_follows_a_changed_kernel_table(cpu_kernels):
    calls = []

    def first(x, approximate):
        calls.append("first")
        return torch.zeros_like(x)

    def second(x, approximate):
        calls.append("second")
        return torch.ones_like(x)

    cpu_kernels({"gelu": first})
    for _ in range(3):
        hal.ops.gelu(torch.zeros(3))
    cpu_kernels({"gelu": second})  # a plugin's kernel set changed (a new registry)
    assert torch.equal(hal.ops.gelu(torch.zeros(3)), torch.ones(3))
    cpu_kernels({})
    with pytest.warns(hal.ops.FallbackWarning, match="no fused kernel declared"):
        hal.ops.gelu(torch.zeros(3))
    assert calls == ["first"] * 3 + ["second"]


def test_a_dtype_refusal_is_remembered_per_dtype_and_a_call_refusal_is_not(cpu_kernels):
    asked = []

    def fp16_only(x, weight, eps):
        asked.append(x.dtype)
        if x.dtype != torch.float16:
            raise hal.ops.KernelUnsupported("this kernel takes float16 only", per_dtype=True)
        return torch.zeros_like(x)

    def two_d_only(x):
        asked.append(x.dim())
        if x.dim() != 2:
            raise hal.ops.KernelUnsupported("this kernel takes 2-D input")
        return torch.zeros(*x.shape[:-1], x.shape[-1] // 2)

    cpu_kernels({"rms_norm": fp16_only, "swiglu": two_d_only})
    with pytest.warns(hal.ops.FallbackWarning):
        for _ in range(3):
            hal.ops.rms_norm(torch.ones(2, 4), torch.ones(4))
            hal.ops.rms_norm(torch.ones(2, 4, dtype=torch.float16), torch.ones(4, dtype=torch.float16))
    # asked once for float32 (then remembered), every time for float16
    assert asked == [torch.float32, torch.float16, torch.float16, torch.float16]
    assert hal.ops.stats()["rms_norm"]["fallbacks"] == 3
    asked.clear()
    with pytest.warns(hal.ops.FallbackWarning, match="takes 2-D input"):
        for _ in range(2):
            hal.ops.swiglu(torch.ones(2, 2, 4))
    assert asked == [3, 3]  # a refusal that depends on the call is asked again


# -- kernels declared with the sizes they win at (hal.plugin.kernels.SizedKernel) ------------
def _counting_gelu(calls):
    def kernel(x, approximate):
        calls.append(x.numel())
        return torch.nn.functional.gelu(x, approximate=approximate)
    return kernel


def test_a_sized_kernel_runs_inside_its_range_and_the_composition_outside_without_warning(cpu_kernels):
    calls = []
    cpu_kernels({"gelu": SizedKernel(_counting_gelu(calls), forward={"float32": (100, 1000)},
                                     with_grad={"float32": (100, 1000)}, measured="test")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the composition chosen by size is not a fallback
        for n in (10, 100, 999, 1000, 5000):
            hal.ops.gelu(torch.randn(n))
    assert calls == [100, 999]
    assert hal.ops.stats()["gelu"] == {"fused": 2, "composition": 3, "host": 0, "fallbacks": 0, "last_fallback": None}
    x = torch.randn(8, dtype=torch.float64)  # a dtype the rule does not name: every size
    hal.ops.gelu(x)
    assert calls[-1] == 8


def test_a_call_with_a_gradient_outside_the_range_is_the_torch_composition_under_torch_autograd(cpu_kernels):
    calls = []
    cpu_kernels({"gelu": SizedKernel(_counting_gelu(calls), forward={"float32": (0, None)},
                                     with_grad={"float32": (1000, None)}, measured="test")})
    small = torch.randn(64, requires_grad=True)
    y = hal.ops.gelu(small)
    assert calls == [] and type(y.grad_fn).__name__ == "GeluBackward0"
    y.sum().backward()
    ref = small.detach().clone().requires_grad_()
    torch.nn.functional.gelu(ref).sum().backward()
    assert torch.equal(small.grad, ref.grad)  # bitwise what the model computes without hal
    big = torch.randn(4096, requires_grad=True)
    y = hal.ops.gelu(big)
    assert calls == [4096] and "gelu" in type(y.grad_fn).__name__ and type(y.grad_fn).__name__ != "GeluBackward0"
    with torch.no_grad():
        hal.ops.gelu(small)
    assert calls == [4096, 64]  # without a gradient the forward rule holds: every size
    s = hal.ops.stats()["gelu"]
    assert (s["composition"], s["fallbacks"]) == (1, 0)


def test_never_keeps_a_dtype_on_the_composition_and_use_path_still_forces_the_kernel(cpu_kernels):
    calls = []
    cpu_kernels({"gelu": SizedKernel(_counting_gelu(calls), forward={"float16": "never"})})
    x = torch.randn(4096).half()
    assert torch.equal(hal.ops.gelu(x), torch.nn.functional.gelu(x))
    assert calls == []
    hal.ops.gelu(x.float())
    assert calls == [4096]
    with hal.ops.use_path("fused"):
        hal.ops.gelu(x)
    assert calls == [4096, 4096]


@pytest.mark.parametrize("rules, message", [
    ({"float8": (0, None)}, "names dtype 'float8'"),
    ({"float32": (10, 5)}, "needs 0 <= low <= high"),
    ({"float32": "sometimes"}, "give \\(low, high\\) element counts"),
])
def test_a_bad_size_rule_is_refused_with_what_to_write(rules, message):
    with pytest.raises(ValueError, match=message):
        SizedKernel("m:f", forward=rules)


@needs_native
def test_the_cpu_declares_where_its_kernels_win_and_hal_ops_reports_it(fresh):
    declared = builtin_fused_kernels("cpu")
    assert isinstance(declared["gelu"], SizedKernel) and declared["gelu"].measured
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = torch.randn(1, 64)
        assert torch.equal(hal.ops.gelu(tiny), torch.nn.functional.gelu(tiny))  # ATen's kernel at a decode size
        hal.ops.gelu(torch.randn(16, 4096))
    assert hal.ops.stats()["gelu"]["composition"] == 1 and hal.ops.stats()["gelu"]["fused"] == 1
    out = subprocess.run([sys.executable, "-m", "hal", "ops", "--json"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HAL_BACKEND": "cpu"})
    ops = {o["op"]: o for o in json.loads(out.stdout)["ops"]}
    assert ops["gelu"]["fused_kernel"] == "hal.ops.host:gelu"
    assert ops["gelu"]["sizes"]["forward"]["float32"] == "numel >= 4096" and ops["rms_norm"]["sizes"] is None


def test_a_rule_measured_without_a_mask_leaves_masked_calls_on_the_kernel(cpu_kernels):
    calls = []

    def kernel(x, mask, causal, scale):
        calls.append((mask is not None, causal))
        return torch.softmax(x * scale, -1)

    cpu_kernels({"softmax": SizedKernel(kernel, forward={"float32": "never"}, when_unset={"mask": 1, "causal": 2})})
    x = torch.randn(2, 4, 4)
    hal.ops.softmax(x)
    hal.ops.softmax(x, causal=True)
    hal.ops.softmax(x, mask=torch.ones(4, 4, dtype=torch.bool))
    assert calls == [(False, True), (True, False)]
    with pytest.raises(ValueError, match="when_unset\\['mask'\\] is 0"):
        SizedKernel(kernel, when_unset={"mask": 0})
