"""Probe logic of every built-in vendor against a fake root, PATH, env and torch build."""
import os
import stat

import pytest

from hal.plugin.cuda_family import identify
from hal.plugin.probe import ProbeContext, TorchFacts
from hal.plugin.registry import Registry
from hal.plugin.spec import Status

CPU_TORCH = TorchFacts(version="2.13.0+cpu")
CUDA_TORCH = TorchFacts(version="2.13.0+cu128", cuda="12.8")


CANN = "/usr/local/Ascend/ascend-toolkit/latest"


def make_ctx(tmp_path, nodes=(), tools=(), env=None, torch=CPU_TORCH, modules=()):
    root = tmp_path / "root"
    bindir = tmp_path / "bin"
    root.mkdir(exist_ok=True)
    bindir.mkdir(exist_ok=True)
    for n in nodes:
        p = root / n.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()
    for t in tools:
        p = bindir / t
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    e = {"PATH": str(bindir)}
    if "torch_npu" in modules:  # an Ascend machine has CANN set up (its set_env.sh sets ASCEND_HOME_PATH)
        (root / CANN.lstrip("/")).mkdir(parents=True, exist_ok=True)
        e["ASCEND_HOME_PATH"] = CANN
    e.update(env or {})
    mods = set(modules)
    return ProbeContext(root=root, env=e, torch=torch,
                        find_spec=lambda name: object() if name in mods else None,
                        platform="Linux", machine="x86_64")


def probe(ctx, name):
    reg = Registry(env={"HAL_DISABLE_PLUGIN_AUTOLOAD": "1"}, context=ctx)
    found = {c.name: c for c in reg.candidates()}
    return found[name].result


PRIVATEUSE1 = [
    # backend, module, a device node, management tool, visible-devices var
    ("ascend", "torch_npu", "/dev/davinci0", "npu-smi", "ASCEND_RT_VISIBLE_DEVICES"),
    ("cambricon", "torch_mlu", "/dev/cambricon_dev0", "cnmon", "MLU_VISIBLE_DEVICES"),
    ("musa", "torch_musa", "/dev/mtgpu.0", "mthreads-gmi", "MUSA_VISIBLE_DEVICES"),
    ("enflame", "torch_gcu", "/dev/gcu0", "efsmi", "TOPS_VISIBLE_DEVICES"),
    ("biren", "torch_supa", "/dev/biren/card_0", None, "SUPA_VISIBLE_DEVICES"),
    ("tecorigin", "torch_sdaa", "/dev/tcaicard0", "teco-smi", "SDAA_VISIBLE_DEVICES"),
]


@pytest.mark.parametrize("name,module,node,tool,var", PRIVATEUSE1, ids=[p[0] for p in PRIVATEUSE1])
class TestVendorExtensionProbe:
    def test_not_installed_without_module(self, tmp_path, name, module, node, tool, var):
        res = probe(make_ctx(tmp_path, nodes=[node]), name)
        assert res.status is Status.NOT_INSTALLED
        assert module in res.reason

    def test_no_device_without_nodes(self, tmp_path, name, module, node, tool, var):
        res = probe(make_ctx(tmp_path, modules=[module]), name)
        assert res.status is Status.NO_DEVICE
        assert node.rstrip("0").rstrip("_.") in res.reason or "no /dev" in res.reason

    def test_available_with_module_and_nodes(self, tmp_path, name, module, node, tool, var):
        res = probe(make_ctx(tmp_path, nodes=[node], tools=[tool] if tool else [], modules=[module]), name)
        assert res.status is Status.AVAILABLE, res
        assert any(node in e for e in res.evidence)

    def test_hidden_by_visible_devices_env(self, tmp_path, name, module, node, tool, var):
        res = probe(make_ctx(tmp_path, nodes=[node], modules=[module], env={var: ""}), name)
        assert res.status is Status.NO_DEVICE
        assert var in res.reason


def test_nvidia_available_with_cuda_build_and_nodes(tmp_path):
    ctx = make_ctx(tmp_path, nodes=["/dev/nvidia0", "/dev/nvidiactl"], tools=["nvidia-smi"], torch=CUDA_TORCH)
    res = probe(ctx, "cuda")
    assert res.status is Status.AVAILABLE
    assert "torch.version.cuda='12.8'" in res.evidence


def test_nvidia_not_installed_on_cpu_torch(tmp_path):
    res = probe(make_ctx(tmp_path, nodes=["/dev/nvidia0"]), "cuda")
    assert res.status is Status.NOT_INSTALLED
    assert "CUDA" in res.reason


# CUDA-compatible vendor builds: each must be recognised as its vendor, never as NVIDIA
COMPAT = [
    ("iluvatar", dict(torch=TorchFacts(version="2.1.1", cuda="10.2", attrs=("corex",)),
                      nodes=["/dev/iluvatar0"], tools=["ixsmi"])),
    ("metax", dict(torch=TorchFacts(version="2.6.0+metax3.0.0", cuda="12.6"),
                   nodes=["/dev/mxcd", "/dev/dri/card0"], tools=["mx-smi"])),
    ("kunlunxin", dict(torch=TorchFacts(version="2.5.1", cuda="11.8"),
                       nodes=["/dev/xpu0", "/dev/xpuctrl"], tools=["xpu-smi"])),
    ("hygon", dict(torch=TorchFacts(version="2.11.0+das.opt1.dtk2604", hip="6.3.2", attrs=("__hcu_version__",)),
                   nodes=["/dev/kfd", "/dev/mkfd"], tools=["hy-smi"])),
    ("rocm", dict(torch=TorchFacts(version="2.8.0+rocm6.4", hip="6.4.1"), nodes=["/dev/kfd"], tools=["rocm-smi"])),
]


@pytest.mark.parametrize("vendor,kw", COMPAT, ids=[c[0] for c in COMPAT])
def test_cuda_compatible_build_is_not_nvidia(tmp_path, vendor, kw):
    ctx = make_ctx(tmp_path, **kw)
    owner, evidence = identify(ctx)
    assert owner == vendor
    assert probe(ctx, vendor).status is Status.AVAILABLE
    nvidia = probe(ctx, "cuda")
    assert nvidia.status is not Status.AVAILABLE
    assert vendor in nvidia.reason


def test_metax_found_by_tool_alone(tmp_path):
    # a MetaX container without the +metax tag (secondhand fact) is still told apart by mx-smi
    ctx = make_ctx(tmp_path, torch=TorchFacts(version="2.6.0", cuda="12.6"), tools=["mx-smi"], nodes=["/dev/mxcd"])
    assert identify(ctx)[0] == "metax"


def test_intel_xpu_needs_xpu_build_and_is_not_kunlun(tmp_path):
    xpu_torch = TorchFacts(version="2.8.0+xpu", xpu="20250101")
    ctx = make_ctx(tmp_path, torch=xpu_torch, nodes=["/dev/dri/renderD128"], tools=["xpu-smi"])
    assert probe(ctx, "xpu").status is Status.AVAILABLE
    assert probe(ctx, "kunlunxin").status is not Status.AVAILABLE
    ctx_cpu = make_ctx(tmp_path, nodes=["/dev/dri/renderD128"], tools=["xpu-smi"])
    assert probe(ctx_cpu, "xpu").status is Status.NOT_INSTALLED


def test_mps_only_on_apple_silicon(tmp_path):
    ctx = make_ctx(tmp_path, torch=TorchFacts(version="2.8.0", mps_built=True))
    assert probe(ctx, "mps").status is Status.NOT_INSTALLED  # Linux
    ctx.platform, ctx.machine = "Darwin", "arm64"
    assert probe(ctx, "mps").status is Status.AVAILABLE


def test_probe_root_env_var(tmp_path, monkeypatch):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci3").touch()
    monkeypatch.setenv("HAL_PROBE_ROOT", str(tmp_path))
    (tmp_path / CANN.lstrip("/")).mkdir(parents=True)
    monkeypatch.setenv("ASCEND_HOME_PATH", CANN)
    ctx = ProbeContext(find_spec=lambda n: object() if n == "torch_npu" else None)
    res = probe(ctx, "ascend")
    assert res.status is Status.AVAILABLE
    assert any("/dev/davinci3" in e for e in res.evidence)


def test_probe_never_imports_vendor_module(tmp_path):
    # find_spec is the only thing probes may ask; a module that raises on import is harmless
    ctx = make_ctx(tmp_path, nodes=["/dev/davinci0"], modules=["torch_npu"])
    res = probe(ctx, "ascend")
    assert res.status is Status.AVAILABLE
    import sys
    assert "torch_npu" not in sys.modules
