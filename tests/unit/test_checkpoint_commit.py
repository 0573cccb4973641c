"""Only complete checkpoints are resumed; every skipped one comes with its reason."""
import json
import logging

import pytest
import torch
from torch import nn

import hal.checkpoint as ckpt
from hal.checkpoint import CheckpointError


def _model(value):
    m = nn.Linear(4, 4)
    with torch.no_grad():
        m.weight.fill_(value)
    return m


def _saved(tmp_path, steps=(10, 20)):
    for s in steps:
        ckpt.save(tmp_path, s, model=_model(float(s)))
    return tmp_path


def _weight_after_resume(root):
    m = _model(-1.0)
    ck = ckpt.resume(root, model=m)
    return ck, float(m.weight.detach()[0, 0])


def test_manifest_lists_sizes_and_sha256_and_latest_moves(tmp_path):
    _saved(tmp_path)
    man = json.loads((tmp_path / "step-00000020" / "manifest.json").read_text())
    assert man["schema"] == "hal.checkpoint/1" and man["step"] == 20 and man["world_size"] == 1
    for name, e in man["files"].items():
        f = tmp_path / "step-00000020" / name
        assert f.stat().st_size == e["bytes"] and len(e["sha256"]) == 64
    assert (tmp_path / "latest").read_text().strip() == "step-00000020"
    assert ckpt.latest(tmp_path) == tmp_path / "step-00000020"


def test_no_manifest_is_skipped_with_reason(tmp_path, caplog):
    _saved(tmp_path)
    (tmp_path / "step-00000020" / "manifest.json").unlink()
    with caplog.at_level(logging.WARNING, logger="hal.checkpoint"):
        ck, w = _weight_after_resume(tmp_path)
    assert ck.step == 10 and w == 10.0
    assert "step-00000020: no manifest.json: the save did not finish" in caplog.text
    assert "latest names step-00000020; using step-00000010" in caplog.text
    assert [s.step for s in ck.skipped] == [20]


def test_zero_byte_tensor_file_is_never_latest(tmp_path):
    _saved(tmp_path)
    (tmp_path / "step-00000020" / "rank-00000.safetensors").write_bytes(b"")
    ck, w = _weight_after_resume(tmp_path)
    assert ck.step == 10 and "has 0 bytes" in ck.skipped[0].reason


def test_same_size_corruption_is_caught_by_sha256(tmp_path):
    _saved(tmp_path)
    f = tmp_path / "step-00000020" / "rank-00000.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    assert ckpt.latest(tmp_path) == tmp_path / "step-00000020"  # size check only
    assert ckpt.latest(tmp_path, verify=True) == tmp_path / "step-00000010"
    ck, w = _weight_after_resume(tmp_path)
    assert ck.step == 10 and "sha256 differs" in ck.skipped[0].reason
    with pytest.raises(CheckpointError, match="refused: rank-00000.safetensors sha256 differs"):
        ckpt.load(tmp_path / "step-00000020", model=_model(0.0))


def test_nothing_to_resume_returns_none(tmp_path):
    assert ckpt.resume(tmp_path / "never-written", model=_model(0.0)) is None
    (tmp_path / "step-00000005").mkdir()
    assert ckpt.resume(tmp_path, model=_model(0.0)) is None
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        ckpt.load(tmp_path, model=_model(0.0))


def test_loading_an_incomplete_folder_directly_names_the_reason(tmp_path):
    _saved(tmp_path)
    (tmp_path / "step-00000020" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="refused: no manifest.json: the save did not finish; pass the parent folder"):
        ckpt.load(tmp_path / "step-00000020", model=_model(0.0))


def test_resave_of_a_step_replaces_it(tmp_path):
    ckpt.save(tmp_path, 10, model=_model(1.0))
    ckpt.save(tmp_path, 10, model=_model(2.0))
    ck, w = _weight_after_resume(tmp_path)
    assert ck.step == 10 and w == 2.0


def test_keep_last_retains_newest_complete_and_clears_older_debris(tmp_path):
    (tmp_path / "step-00000001").mkdir(parents=True)  # debris of a crashed save
    for s in (2, 3, 4, 5):
        ckpt.save(tmp_path, s, model=_model(float(s)), keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000004", "step-00000005"]


def test_scan_reports_every_folder(tmp_path):
    _saved(tmp_path, (1, 2, 3))
    (tmp_path / "step-00000002" / "rank-00000.json").unlink()
    infos = ckpt.scan(tmp_path)
    assert [(i.step, i.complete) for i in infos] == [(3, True), (2, False), (1, True)]
    assert infos[1].reason == "rank-00000.json is missing"
