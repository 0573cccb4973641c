"""Restarted torchrun groups must not read the keys a dead attempt left in the agent's store."""
import datetime
import importlib

import torch.distributed as dist

import hal.checkpoint  # noqa: F401  (installs the env:// wrapper)
from hal.dist import elastic
from hal.dist.launch import free_port


def test_env_rendezvous_under_the_agent_store_gets_a_per_attempt_prefix(monkeypatch):
    port = free_port()
    agent_store = dist.TCPStore("127.0.0.1", port, 1, is_master=True,
                                timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    assert elastic.install() and getattr(rdzv._rendezvous_handlers["env"], "hal_wrapped", False)
    seen = {}
    for attempt in ("0", "1"):
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", attempt)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        store, rank, world = next(rdzv.rendezvous("env://", rank=0, world_size=1))
        assert (rank, world) == (0, 1)
        # what gloo / NCCL publish under "default_pg/..." in one attempt is invisible to the next
        assert not store.check(["default_pg/0//rank_0"]), f"attempt {attempt} sees a dead attempt's address"
        store.set("default_pg/0//rank_0", f"address of attempt {attempt}")
        # hal's prefix, or torch 2.4's own where it prefixes the attempt itself
        keys = (f"attempt_{attempt}/default_pg/0//rank_0", f"/worker/attempt_{attempt}/default_pg/0//rank_0")
        key = next(k for k in keys if agent_store.check([k]))
        seen[attempt] = agent_store.get(key).decode()
    assert seen == {"0": "address of attempt 0", "1": "address of attempt 1"}


def test_outside_torchelastic_nothing_is_prefixed(monkeypatch):
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, 2, is_master=True,
                           timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    store, _, _ = next(rdzv.rendezvous("env://", rank=1, world_size=2))  # a client of rank 0's store
    store.set("k", "v")
    assert master.get("k") == b"v"
