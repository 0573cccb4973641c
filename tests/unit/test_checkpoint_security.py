"""A checkpoint never executes pickle: a malicious pickle is refused, not run."""
import hashlib
import json
import os
import pickle

import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt
from hal.checkpoint import CheckpointError


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _malicious(path, marker):
    with open(path, "wb") as f:
        pickle.dump({"model": _Exploit(str(marker))}, f)


def test_malicious_torch_file_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "model.pt"
    _malicious(bad, marker)
    with pytest.raises(CheckpointError, match="refused: the pickle holds objects other than tensors"):
        ckpt.load(bad, model=nn.Linear(2, 2))
    assert not marker.exists()


def test_pickle_swapped_into_a_checkpoint_folder_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = ckpt.save(tmp_path / "ck", 1, model=nn.Linear(2, 2))
    _malicious(path / "rank-00000.safetensors", marker)
    with pytest.raises(CheckpointError, match="refused"):
        ckpt.load(path, model=nn.Linear(2, 2))
    assert ckpt.resume(tmp_path / "ck", model=nn.Linear(2, 2)) is None
    assert not marker.exists()


def test_pickle_with_a_forged_manifest_is_refused_by_the_parser(tmp_path):
    marker = tmp_path / "pwned"
    path = ckpt.save(tmp_path / "ck", 1, model=nn.Linear(2, 2))
    bad = path / "rank-00000.safetensors"
    _malicious(bad, marker)
    man = json.loads((path / "manifest.json").read_text())
    man["files"][bad.name].update(bytes=bad.stat().st_size, sha256=hashlib.sha256(bad.read_bytes()).hexdigest())
    (path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="not a valid safetensors file .* refused without executing anything"):
        ckpt.load(path, model=nn.Linear(2, 2))
    assert not marker.exists()


def test_stray_pickle_beside_a_checkpoint_is_never_opened(tmp_path):
    marker = tmp_path / "pwned"
    path = ckpt.save(tmp_path / "ck", 1, model=nn.Linear(2, 2))
    _malicious(path / "optimizer.pt", marker)
    _malicious(tmp_path / "ck" / "model.pkl", marker)
    ck = ckpt.resume(tmp_path / "ck", model=nn.Linear(2, 2))
    assert ck.step == 1 and not marker.exists()


def test_folder_without_manifest_is_not_a_checkpoint(tmp_path):
    _malicious(tmp_path / "model.pt", tmp_path / "pwned")
    with pytest.raises(CheckpointError, match="not a hal checkpoint"):
        ckpt.load(tmp_path, model=nn.Linear(2, 2))


def test_plain_tensor_torch_file_still_loads(tmp_path):
    src = nn.Linear(2, 2)
    torch.save(src.state_dict(), tmp_path / "weights.pt")
    dst = nn.Linear(2, 2)
    ckpt.load(tmp_path / "weights.pt", model=dst)
    assert torch.equal(dst.weight, src.weight)
