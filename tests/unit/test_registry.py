"""Registry behaviour a user notices: broken plugins are contained, selection is explained; pluggy does the
blocking (the essential cpu plugin refused), validates hook names, and names the distribution behind each plugin."""
import json
import os
import subprocess
import sys
import textwrap

import jsonschema
import pytest

import hal
from hal.plugin.registry import Registry
from hal.plugin.spec import Status
from importlib import resources
from hal.op_support.torch_profile import plugin_torch_profiles

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
    for name, src in PLUGINS.items():
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
    for name, src in PLUGINS.items():
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


PLUGINS = {
    **BROKEN_PLUGINS,
    # a working plugin: it must be unaffected by the broken ones next to it
    "halplug_good": textwrap.dedent("""
        from hal import hookimpl, BackendSpec, ProbeResult, Status
        SPEC = BackendSpec(name="goodchip", vendor="Acme", device_type="good", priority=5)
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        @hookimpl
        def hal_backend_probe(spec, context):
            return ProbeResult(Status.NO_DEVICE, "no goodchip here", ("test",))
        @hookimpl
        def hal_op_support(spec):
            return {"name": "goodchip", "ops": {}}
        @hookimpl
        def hal_torch_op_profile(spec):
            return {"schema": "hal.op_profile/1", "backend": "goodchip", "ops": {}}
        """),
    # a misspelled probe hook: pluggy registers it without a spec, and it would never be called
    "halplug_typo": textwrap.dedent("""
        from hal import hookimpl, BackendSpec, ProbeResult, Status
        SPEC = BackendSpec(name="typochip", vendor="Acme", device_type="typo")
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        @hookimpl
        def hal_backend_prob(spec, context):
            return ProbeResult(Status.AVAILABLE, "never asked")
        """),
    # a hook argument its hookspec lacks: pluggy refuses it half-way through registration
    "halplug_badarg": textwrap.dedent("""
        from hal import hookimpl, BackendSpec
        SPEC = BackendSpec(name="badargchip", vendor="Acme", device_type="badarg")
        @hookimpl
        def hal_backend_load(spec):
            return None
        @hookimpl
        def hal_backend_probe(spec, ctx):
            return None
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        """),
    # hooks that raise while hal fans them out
    "halplug_fanout_boom": textwrap.dedent("""
        from hal import hookimpl, BackendSpec
        SPEC = BackendSpec(name="boomchip", vendor="Acme", device_type="boom", priority=7)
        @hookimpl
        def hal_backend_specs():
            return [SPEC]
        @hookimpl
        def hal_op_support(spec):
            raise KeyError("op table missing")
        @hookimpl
        def hal_torch_op_profile(spec):
            raise KeyError("profile missing")
        """),
}


def _cli_env(tmp_path, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(kw)
    return env


def _hal(*args, env):
    return subprocess.run([sys.executable, "-m", "hal", *args], env=env, capture_output=True, text=True,
                          timeout=120)


# -- blocking -----------------------------------------------------------------------------
def test_blocking_cpu_in_hal_list_is_one_line_not_a_traceback(tmp_path):
    """The original report: ``HAL_BLOCK_PLUGINS=cpu hal list`` ended in a bare StopIteration."""
    out = _hal("list", env=_cli_env(tmp_path, HAL_BLOCK_PLUGINS="cpu"))
    assert out.returncode == 3, out
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in out.stderr, out.stderr
    assert err[0] == ("hal list: error: HAL_BLOCK_PLUGINS=cpu: the cpu plugin cannot be blocked: hal falls "
                      "back to it when no accelerator is usable; remove it from HAL_BLOCK_PLUGINS")


def test_blocking_cpu_among_others_is_refused_by_hal_device(clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_BLOCK_PLUGINS", "ascend, cpu")
    with pytest.raises(hal.HalError, match=r"^HAL_BLOCK_PLUGINS=ascend, cpu: the cpu plugin cannot be blocked"):
        hal.device()


def test_blocking_goes_through_pluggy_and_imports_nothing(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_import_boom,halplug_good",
                            HAL_BLOCK_PLUGINS="halplug_import_boom,hygon,goodchip"))
    assert reg.pm.is_blocked("halplug_import_boom") and reg.pm.is_blocked("hygon")
    assert "halplug_import_boom" not in sys.modules
    assert [(f.plugin, f.stage) for f in reg.failures] == [("halplug_import_boom", "blocked")]
    cands = {c.name: c for c in reg.candidates()}
    # a backend name, declared by a plugin that declares others too: only that backend is blocked
    assert cands["hygon"].status is Status.BLOCKED and cands["goodchip"].status is Status.BLOCKED
    assert cands["rocm"].status is not Status.BLOCKED
    assert reg.blocked == {"halplug_import_boom", "hygon", "goodchip"}
    # a blocked backend is left out of every fan-out
    assert not [p for p, spec, _ in reg.call_each("hal_op_support") if spec.name in ("hygon", "goodchip")]


# -- validation ---------------------------------------------------------------------------
def test_a_misspelled_hook_fails_its_plugin_only(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_typo,halplug_good"))
    fails = {f.plugin: f for f in reg.failures}
    assert fails["halplug_typo"].stage == "validate"
    why = fails["halplug_typo"].error
    assert "unknown hook hal_backend_prob (did you mean hal_backend_probe?)" in why
    assert "hal_backend_specs, hal_c10d_backend" in why and "rename it" in why
    assert not reg.pm.has_plugin("halplug_typo")
    cands = {c.name: c for c in reg.candidates()}
    assert "typochip" not in cands
    assert cands["goodchip"].status is Status.NO_DEVICE and "halplug_good" not in fails


def test_an_unknown_hook_marked_optional_is_accepted(tmp_path, monkeypatch):
    (tmp_path / "halplug_optional.py").write_text(textwrap.dedent("""
        from hal import hookimpl
        @hookimpl(optionalhook=True)
        def hal_future_hook():
            return 1
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(env=_env(HAL_PLUGINS="halplug_optional"))
    assert reg.failures == [] and reg.pm.has_plugin("halplug_optional")


def test_a_hook_with_an_unknown_argument_leaves_nothing_registered(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_badarg"))
    (fail,) = reg.failures
    assert fail.plugin == "halplug_badarg" and fail.stage == "validate"
    assert "hal_backend_probe" in fail.error and "ctx" in fail.error
    assert not reg.pm.has_plugin("halplug_badarg")
    # pluggy had registered hal_backend_load before it refused hal_backend_probe
    assert all(i.plugin_name != "halplug_badarg" for i in reg.pm.hook.hal_backend_load.get_hookimpls())
    assert "badargchip" not in {c.name for c in reg.candidates()}


# -- distributions ------------------------------------------------------------------------
def _dist_info(site, dist, version, top_level=None, entry_point=None):
    d = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if top_level:
        (d / "top_level.txt").write_text(top_level + "\n")
    if entry_point:
        (d / "entry_points.txt").write_text(f"[hal.backends]\n{entry_point} = {entry_point}\n")


def test_each_plugin_names_its_distribution(plugin_dir, monkeypatch):
    (plugin_dir / "halplug_owned.py").write_text(PLUGINS["halplug_good"].replace("goodchip", "ownedchip"))
    (plugin_dir / "halplug_ep.py").write_text(PLUGINS["halplug_good"].replace("goodchip", "epchip"))
    _dist_info(plugin_dir, "acme-owned", "2.3", top_level="halplug_owned")
    _dist_info(plugin_dir, "acme-ep", "1.0", entry_point="halplug_ep")
    reg = Registry(env={"HAL_PLUGINS": "halplug_owned,halplug_good,halplug_import_boom"})
    got = {o.plugin: (o.source, o.distribution, o.version) for o in reg.plugin_origins()}
    assert got["cuda_compatible"] == ("built-in", "hal", hal.__version__)
    assert got["halplug_owned"] == ("HAL_PLUGINS", "acme-owned", "2.3")
    assert got["halplug_good"] == ("HAL_PLUGINS", None, None)
    assert got["halplug_import_boom"] == ("HAL_PLUGINS", None, None)  # broken ones are named too
    assert got["halplug_ep"] == ("entry point", "acme-ep", "1.0")


def test_hal_list_shows_distributions_and_validation_failures(plugin_dir):
    _dist_info(plugin_dir, "acme-ep", "1.0", entry_point="halplug_good")
    env = _cli_env(plugin_dir, HAL_PLUGINS="halplug_typo")
    out = _hal("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    schema = json.loads(resources.files("hal").joinpath("data/hal-list.schema.json").read_text())
    jsonschema.validate(rep, schema)
    plugins = {p["name"]: p for p in rep["plugins"]}
    assert plugins["cpu"] == {"name": "cpu", "source": "built-in", "distribution": "hal",
                              "version": hal.__version__}
    assert (plugins["halplug_good"]["distribution"], plugins["halplug_good"]["version"]) == ("acme-ep", "1.0")
    assert any(f["plugin"] == "halplug_typo" and f["stage"] == "validate" and "hal_backend_prob" in f["reason"]
               for f in rep["plugin_failures"])
    table = _hal("list", env=env).stdout
    assert f"plugins: hal {hal.__version__}: cpu, cuda," in table
    assert "acme-ep 1.0: halplug_good" in table and "unknown distribution: halplug_typo" in table
    assert "plugin validate: unknown hook hal_backend_prob" in table
    assert max(len(ln) for ln in table.splitlines() if ln.startswith(("plugins:", "  "))) <= 80


# -- fan-out ------------------------------------------------------------------------------
def test_call_each_contains_a_raising_hook_and_records_it(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_fanout_boom,halplug_good"))
    assert reg.op_profiles() == [("halplug_good", {"name": "goodchip", "ops": {}})]
    (fail,) = [f for f in reg.failures if f.plugin == "halplug_fanout_boom"]
    assert fail.stage == "op_support" and "op table missing" in fail.error
    # one call per declared spec, each on the declaring plugin alone
    specs = [(p, spec.name) for p, spec, _ in reg.call_each("hal_fused_kernels")]
    assert ("cuda_compatible", "hygon") in specs and ("cuda_compatible", "rocm") in specs
    assert len(specs) == len(reg.candidates())
    # a hook without spec is called once per plugin
    assert {p for p, spec, _ in reg.call_each("hal_backend_specs") if spec is None} >= {"cpu", "halplug_good"}


def test_a_raising_torch_profile_hook_does_not_hide_the_others(plugin_dir, clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_PLUGINS", "halplug_fanout_boom,halplug_good")
    monkeypatch.setenv("HAL_DISABLE_PLUGIN_AUTOLOAD", "1")
    names = [name for name, _ in plugin_torch_profiles()]
    assert "halplug_good:goodchip" in names and "emu:emu" in names
    assert not [n for n in names if n.startswith("halplug_fanout_boom")]


def test_call_for_and_call_selected_reach_one_plugin(plugin_dir):
    reg = Registry(env=_env(HAL_PLUGINS="halplug_good"))
    good = next(c for c in reg.candidates() if c.name == "goodchip")
    assert reg.call_for(good, "hal_torch_op_profile") == [{"schema": "hal.op_profile/1", "backend": "goodchip",
                                                           "ops": {}}]
    assert reg.selected().name == "cpu"
    assert reg.call_selected("hal_torch_op_profile") == []
    assert reg.call_selected("hal_device_utilization", index=0) is None
