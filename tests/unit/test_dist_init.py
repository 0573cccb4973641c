"""hal.dist.init in one process: the backend string, device binding and clear set-up errors."""

import pytest
import torch

import hal
from hal.plugin.backend import Backend
from hal.dist import DistError, RendezvousError
from hal.dist.launch import free_port
from hal.plugin.spec import BackendSpec


@pytest.fixture
def no_launcher(clean_registry, no_launcher):
    """tests/conftest.py's no_launcher on a fresh registry with HAL_BACKEND=cpu."""
    no_launcher.setenv("HAL_BACKEND", "cpu")
    hal.reset_registry()
    return no_launcher


def _fake(name, device_type, ccl, module=None):
    return Backend(BackendSpec(name=name, vendor="test", device_type=device_type, dist_backend=ccl,
                               module=module))


def test_backend_string_cpu_only_for_the_cpu(no_launcher):
    assert hal.dist.backend_string() == "cpu:gloo"


def test_backend_string_names_an_unregistered_ccl_and_the_fix():
    with pytest.raises(DistError, match=r"'hccl' is not registered.*import torch_npu first"):
        hal.dist.backend_string(_fake("ascend", "npu", "hccl", module="torch_npu"))


def test_backend_string_for_a_registered_ccl():
    if not torch.distributed.is_nccl_available():
        with pytest.raises(DistError, match="'nccl' is not registered"):
            hal.dist.backend_string(_fake("cuda", "cuda", "nccl"))
    else:
        assert hal.dist.backend_string(_fake("cuda", "cuda", "nccl")) == "cpu:gloo,cuda:nccl"


def test_single_process_init_and_checked_all_reduce(no_launcher):
    info = hal.dist.init(timeout=10)
    assert (info.rank, info.world_size, info.backend, info.device) == (0, 1, "cpu:gloo", "cpu")
    assert hal.dist.init() is info  # idempotent
    t = hal.dist.all_reduce(torch.full((3,), 2.0))
    assert t.tolist() == [2.0, 2.0, 2.0]
    hal.dist.destroy()
    assert not hal.dist.is_initialized()


@pytest.mark.parametrize("env, message", [
    ({"RANK": "0"}, "only one of RANK and WORLD_SIZE"),
    ({"RANK": "3", "WORLD_SIZE": "2"}, "outside WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR=None"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"HAL_DIST_TIMEOUT": "soon"}, "HAL_DIST_TIMEOUT='soon'"),
])
def test_bad_launcher_environment_is_explained(no_launcher, env, message):
    for k, v in env.items():
        no_launcher.setenv(k, v)
    with pytest.raises(DistError, match=message):
        hal.dist.init()


def test_unreachable_rendezvous_fails_fast_and_says_where(no_launcher):
    port = free_port()  # nobody listens there
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        no_launcher.setenv(k, v)
    with pytest.raises(RendezvousError, match=rf"could not reach .*MASTER_PORT={port} within 1 s"):
        hal.dist.init(timeout=1)


def test_missing_rank_at_rendezvous_is_named(no_launcher):
    port = free_port()
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        no_launcher.setenv(k, v)
    with pytest.raises(RendezvousError, match="rank 1 did not join the rendezvous within 1 s"):
        hal.dist.init(timeout=1)
    assert not hal.dist.is_initialized()
