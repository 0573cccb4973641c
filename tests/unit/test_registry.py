"""Registry behaviour a user notices: broken plugins are contained, selection is explained."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import hal
from hal.plugin.registry import Registry
from hal.plugin.spec import Status

BROKEN_PLUGINS = {
    # raises when imported
    "halplug_import_boom": "raise RuntimeError('vendor SDK missing libfoo.so')\n",
    # declares a spec whose probe raises
    "halplug_probe_boom": textwrap.dedent("""
        from hal import hookimpl, BackendSpec
        SPEC = BackendSpec(name="probeboom", vendor="Acme", device_type="acme", priority=200)
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        @hookimpl
        def hal_backend_probe(spec, context):
            raise OSError("driver ioctl failed")
        """),
    # probes available, but load raises
    "halplug_load_boom": textwrap.dedent("""
        from hal import hookimpl, BackendSpec, ProbeResult, Status
        SPEC = BackendSpec(name="loadboom", vendor="Acme", device_type="acme2", priority=300)
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        @hookimpl
        def hal_backend_probe(spec, context):
            return ProbeResult(Status.AVAILABLE, "fake device", ("test",))
        @hookimpl
        def hal_backend_load(spec):
            raise ImportError("libacme_runtime.so: cannot open shared object file")
        """),
}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    for name, src in BROKEN_PLUGINS.items():
        (tmp_path / f"{name}.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _env(**kw):
    e = {"HAL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    e.update(kw)
    return e


def test_broken_plugins_are_recorded_and_contained(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS=",".join(BROKEN_PLUGINS)))
    fails = {f.plugin: f for f in reg.failures}
    assert fails["halplug_import_boom"].stage == "import"
    assert "libfoo.so" in fails["halplug_import_boom"].error
    cands = {c.name: c for c in reg.candidates()}
    assert cands["probeboom"].status is Status.BROKEN
    assert "driver ioctl failed" in cands["probeboom"].result.reason
    # loadboom has the highest priority: selection tries it, records why, falls back to cpu
    sel = reg.selected()
    assert sel.name == "cpu"
    assert cands["loadboom"].status is Status.BROKEN
    assert "libacme_runtime.so" in cands["loadboom"].result.reason
    assert "loadboom: broken" in reg.selection_reason
    # built-in backends are unaffected
    assert cands["ascend"].status is Status.NOT_INSTALLED


def test_device_facet_still_works_with_broken_plugins(plugin_dir, clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_PLUGINS", ",".join(BROKEN_PLUGINS))
    monkeypatch.setenv("HAL_DISABLE_PLUGIN_AUTOLOAD", "1")
    hal.reset_registry()
    assert hal.device().type == "cpu"
    assert hal.device_count() >= 1


def test_forcing_a_broken_backend_fails_loudly(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_load_boom", HAL_BACKEND="loadboom"))
    with pytest.raises(hal.BackendUnavailable) as ei:
        reg.selected()
    msg = str(ei.value)
    assert "HAL_BACKEND=loadboom" in msg and "libacme_runtime.so" in msg
    assert "choose one of: cpu" in msg


def test_force_by_device_type_and_unknown_name():
    reg = Registry(env=_env(HAL_BACKEND="cpu"))
    assert reg.selected().name == "cpu"
    assert reg.selection_reason == "forced by HAL_BACKEND=cpu"
    reg = Registry(env=_env(HAL_BACKEND="npu"))
    with pytest.raises(hal.BackendUnavailable, match="ascend: not installed .*torch_npu"):
        reg.selected()
    reg = Registry(env=_env(HAL_BACKEND="tpu9000"))
    with pytest.raises(hal.BackendUnavailable, match="no backend has that name or device type"):
        reg.selected()


def test_cpu_is_chosen_with_a_reason():
    reg = Registry(env=_env())
    assert reg.selected().name == "cpu"
    assert "no accelerator backend is available" in reg.selection_reason


def test_block_plugins_by_name(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_import_boom", HAL_BLOCK_PLUGINS="halplug_import_boom,ascend"))
    fails = {f.plugin: f for f in reg.failures}
    assert fails["halplug_import_boom"].stage == "blocked"
    # a plugin name or a backend name can be blocked
    cands = {c.name: c for c in reg.candidates()}
    assert "ascend" not in cands


def test_import_hal_does_no_device_work():
    code = ("import sys, hal, hal.plugin.registry as r; "
            "assert r._registry is None, 'registry built at import'; "
            "bad = [m for m in sys.modules if m.startswith(('torch_npu','torch_mlu','torch_musa','torch_gcu',"
            "'torch_supa','torch_sdaa','hal_backends'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def _install_entry_point_plugin(site, name, module_src):
    (site / f"{name}.py").write_text(module_src)
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[hal.backends]\n{name} = {name}\n")


def test_entry_point_plugins_broken_three_ways_via_cli(tmp_path):
    """Installed plugins (entry points): `hal list` still works and names each failure."""
    for name, src in BROKEN_PLUGINS.items():
        _install_entry_point_plugin(tmp_path, name, src)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "hal", "list", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    by_name = {b["name"]: b for b in rep["backends"]}
    assert by_name["probeboom"]["status"] == "broken"
    assert by_name["loadboom"]["status"] == "broken"
    assert any(f["plugin"] == "halplug_import_boom" and "libfoo.so" in f["reason"] for f in rep["plugin_failures"])
    assert rep["selected"] == "cpu"
    # autoload off: none of them is even seen
    env["HAL_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = subprocess.run([sys.executable, "-m", "hal", "list", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    names = {b["name"] for b in json.loads(out.stdout)["backends"]}
    assert "probeboom" not in names and "cpu" in names
