"""RNG state is keyed by device; another device type's state is never applied blindly."""
import hashlib
import json
import random

import numpy as np
import pytest
import torch

import hal.checkpoint as ckpt
from hal.checkpoint import CheckpointWarning, _rng


def _rewrite_rank_doc(path, edit):
    """Edit rank-00000.json of a saved checkpoint and re-seal the manifest, as another machine would have written it."""
    f = path / "rank-00000.json"
    doc = json.loads(f.read_text())
    edit(doc)
    f.write_text(json.dumps(doc))
    man = json.loads((path / "manifest.json").read_text())
    man["files"][f.name].update(bytes=f.stat().st_size, sha256=hashlib.sha256(f.read_bytes()).hexdigest())
    (path / "manifest.json").write_text(json.dumps(man))


def _cuda_checkpoint(tmp_path):
    """A checkpoint as a CUDA machine writes it: backend cuda, a 16-byte Philox state under cuda:0."""
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    path = ckpt.save(tmp_path, 3, model=torch.nn.Linear(2, 2))
    expected = (torch.rand(4), random.random(), np.random.rand())

    def to_cuda(doc):
        fake = torch.tensor(list(range(16)), dtype=torch.uint8)
        doc["rng"]["backend"] = "cuda"
        doc["rng"]["device_type"] = "cuda"
        doc["rng"]["torch"]["cuda:0"] = _rng._b64(fake)
    _rewrite_rank_doc(path, to_cuda)
    return path, expected


def test_cuda_rng_state_on_cpu_warns_and_restores_the_rest(tmp_path, clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_BACKEND", "cpu")
    path, (t, r, n) = _cuda_checkpoint(tmp_path)
    with pytest.warns(CheckpointWarning, match=r"cuda:0 was saved on backend 'cuda' but this process runs on 'cpu'"):
        ck = ckpt.load(path, model=torch.nn.Linear(2, 2))
    assert "cuda:0" not in ck.rng_applied
    assert ck.rng_applied[:3] == ["python", "numpy", "cpu"]
    assert torch.equal(torch.rand(4), t) and random.random() == r and np.random.rand() == n


def test_foreign_state_reseeds_the_device_deterministically(tmp_path):
    class NPU:
        """The parts of a Backend the RNG restore touches, for a device this machine lacks."""
        name, device_type = "ascend", "npu"

        def __init__(self):
            self.seeds, self.states = [], []

        def device_count(self):
            return 2

        def manual_seed_all(self, seed):
            self.seeds.append(seed)

        def set_rng_state(self, state, index):
            self.states.append((index, state))

    saved = _rng.capture()
    saved["torch"]["cuda:0"] = _rng._b64(torch.zeros(16, dtype=torch.uint8))
    a, b = NPU(), NPU()
    for dev in (a, b):
        with pytest.warns(CheckpointWarning, match=r"npu generators reseeded with \d+ \(derived from step 40, rank 1\)"):
            _rng.restore(saved, step=40, rank=1, backend=dev)
    assert a.seeds == b.seeds == [_rng.reseed_value(40, 1)] and a.states == []
    assert _rng.reseed_value(40, 1) != _rng.reseed_value(40, 0) != _rng.reseed_value(41, 0)


def test_same_device_type_missing_index_is_reseeded_not_crashed():
    class NPU:
        name, device_type = "ascend", "npu"
        seeds = []

        def device_count(self):
            return 1

        def manual_seed_all(self, seed):
            self.seeds.append(seed)

        def set_rng_state(self, state, index):
            raise AssertionError("must not be called for a missing index")

    saved = {"torch": {"npu:3": _rng._b64(torch.zeros(8, dtype=torch.uint8))}, "backend": "ascend"}
    dev = NPU()
    with pytest.warns(CheckpointWarning, match=r"npu:3 could not be applied \(IndexError: this machine shows 1 npu"):
        _rng.restore(saved, step=1, rank=0, backend=dev)
    assert dev.seeds == [_rng.reseed_value(1, 0)]


def test_missing_rng_for_this_rank_reseeds_everything_deterministically(tmp_path):
    path = ckpt.save(tmp_path, 5, model=torch.nn.Linear(2, 2))
    _rewrite_rank_doc(path, lambda doc: doc.update(rng=None))
    draws = []
    for _ in range(2):
        with pytest.warns(CheckpointWarning, match="holds no RNG state for rank 0"):
            ckpt.load(path, model=torch.nn.Linear(2, 2))
        draws.append((torch.rand(3), random.random()))
    assert torch.equal(draws[0][0], draws[1][0]) and draws[0][1] == draws[1][1]


def test_restore_rng_false_leaves_generators_alone(tmp_path):
    path = ckpt.save(tmp_path, 5, model=torch.nn.Linear(2, 2))
    target = torch.nn.Linear(2, 2)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ck = ckpt.load(path, model=target, restore_rng=False)
    assert ck.rng_applied == [] and torch.equal(torch.rand(3), expected)


def test_rank_restarted_on_another_index_gets_its_own_stream():
    class NPU:
        name, device_type = "ascend", "npu"

        def __init__(self, current):
            self.current, self.states = current, []

        def device_count(self):
            return 8

        def current_device(self):
            return self.current

        def get_rng_state(self, index):
            return torch.full((8,), index, dtype=torch.uint8)

        def set_rng_state(self, state, index):
            self.states.append((index, state.tolist()))

    saved = _rng.capture(backend=NPU(current=3))
    assert saved["current_device"] == "npu:3" and "npu:3" in saved["torch"]
    after_restart = NPU(current=0)
    assert "npu:3" in _rng.restore(saved, step=1, rank=0, backend=after_restart)
    assert after_restart.states == [(0, [3] * 8)]
