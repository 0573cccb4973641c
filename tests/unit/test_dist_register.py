"""hal.dist.register_c10d_backend guards torch's register_backend footguns."""
import pytest
import torch.distributed as dist

from hal.dist import DistError, register_c10d_backend, registered_backends
from hal.dist import register as reg


@pytest.fixture
def torch_backend_state():
    """Restore torch's global backend tables after each test."""
    B = dist.Backend
    saved = (list(B.backend_list), dict(B.default_device_backend_map), dict(B.backend_capability),
             dict(B.backend_type_map), dict(B._plugins), dict(reg._registered))
    attrs = set(vars(B))
    yield
    B.backend_list[:] = saved[0]
    for table, old in zip((B.default_device_backend_map, B.backend_capability, B.backend_type_map,
                           B._plugins, reg._registered), saved[1:]):
        table.clear()
        table.update(old)
    for a in set(vars(B)) - attrs:
        delattr(B, a)


def _creator(store, rank, world_size, timeout):  # never called: registration only
    raise AssertionError("not used")


def test_a_device_string_is_one_device_not_its_letters(torch_backend_state):
    assert register_c10d_backend("halccl", _creator, devices="npuemu") == "halccl"
    assert dist.Backend.default_device_backend_map.get("npuemu") == "halccl"
    assert not {"n", "p", "u"} & set(dist.Backend.default_device_backend_map)
    assert dist.Backend.backend_capability["halccl"] == ["npuemu"]
    assert "halccl" in dist.Backend.backend_list
    assert registered_backends()["halccl"] == ["npuemu"]


def test_registering_the_same_creator_twice_is_a_no_op(torch_backend_state):
    register_c10d_backend("halccl", _creator, devices=["npuemu"])
    assert register_c10d_backend("HalCCL", _creator, devices=["npuemu"]) == "halccl"
    with pytest.raises(DistError, match="already registered"):
        register_c10d_backend("halccl", lambda *a: None, devices=["npuemu"])


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="gloo", creator=_creator, devices=["npuemu"]), "built into torch"),
    (dict(name="halccl", creator="not a function", devices=["npuemu"]), "not callable"),
    (dict(name="halccl", creator=_creator, devices=None), "devices is required"),
    (dict(name="halccl", creator=_creator, devices=[]), "devices is empty"),
    (dict(name="halccl", creator=_creator, devices=["n"]), "not a device type"),
    (dict(name="hal-ccl", creator=_creator, devices=["npuemu"]), "must be an identifier"),
    (dict(name="halccl", creator=_creator, devices=["cpu"]), "already served by 'gloo'"),
])
def test_bad_registration_is_refused_and_changes_nothing(torch_backend_state, kwargs, message):
    before = (list(dist.Backend.backend_list), dict(dist.Backend.default_device_backend_map))
    before_hal = registered_backends()
    with pytest.raises(DistError, match=message):
        register_c10d_backend(**kwargs)
    assert (list(dist.Backend.backend_list), dict(dist.Backend.default_device_backend_map)) == before
    assert registered_backends() == before_hal


PLUGIN = '''
from hal.plugin import hookimpl
from hal.plugin.spec import BackendSpec, ProbeResult, Status
from hal_backends.cpu import CPUBackend

SPEC = BackendSpec(name="toy", vendor="test", device_type="cpu", dist_backend="toyccl", priority=1)

def create(store, rank, world_size, timeout):
    raise AssertionError("not used")

@hookimpl
def hal_backend_specs():
    return [SPEC]

@hookimpl
def hal_backend_probe(spec, context):
    return ProbeResult(Status.AVAILABLE, "test plugin") if spec.name == "toy" else None

@hookimpl
def hal_backend_load(spec):
    return CPUBackend(spec) if spec.name == "toy" else None

@hookimpl
def hal_c10d_backend(spec):
    return {"name": "toyccl", "creator": create, "devices": "toydev"} if spec.name == "toy" else None
'''


def test_the_selected_plugin_registers_its_ccl_through_the_hook(torch_backend_state, tmp_path,
                                                                  monkeypatch, clean_registry):
    import hal

    (tmp_path / "hal_toy_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HAL_PLUGINS", "hal_toy_plugin")
    monkeypatch.setenv("HAL_BACKEND", "toy")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    hal.reset_registry()
    try:
        hal.dist.init(timeout=10)
        assert registered_backends()["toyccl"] == ["toydev"]
        assert dist.Backend.default_device_backend_map["toydev"] == "toyccl"
    finally:
        hal.dist.destroy()
