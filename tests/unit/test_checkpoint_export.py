"""hal checkpoint info / consolidate on a full-state checkpoint (one process; the sharded case is
tests/dist/test_checkpoint_reshard.py)."""
import json

import pytest
import torch
from safetensors.torch import load_file

import hal.checkpoint as ckpt
from hal.cli import main


@pytest.fixture
def root(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    ckpt.save(tmp_path / "ckpt", 7, model=model, optimizer=opt, extra={"note": "x"})
    return tmp_path / "ckpt", model


def test_consolidate_writes_the_model_and_nothing_else(root, tmp_path, capsys):
    folder, model = root
    assert main(["checkpoint", "consolidate", str(folder), "-o", str(tmp_path / "m.safetensors"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["tensors"] == 4 and rep["parameters"] == sum(p.numel() for p in model.parameters())
    full = load_file(tmp_path / "m.safetensors")
    assert sorted(full) == sorted(model.state_dict())
    assert all(torch.equal(full[k], v) for k, v in model.state_dict().items())


def test_info_lists_the_step(root, capsys):
    folder, _ = root
    assert main(["checkpoint", "info", str(folder), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["step"], rep["mode"], rep["world_size"]) == (7, "replicated", 1)
    assert rep["model"]["0.weight"]["shape"] == [5, 3] and rep["optimizer"]["tensors"] == 12  # exp_avg, exp_avg_sq, step x 4
    assert rep["holds"] == ["extra"]
    assert main(["checkpoint", "info", str(folder)]) == 0
    assert "layout: full state on every rank (replicated)" in capsys.readouterr().out


def test_a_damaged_step_is_refused_by_name(root, tmp_path, capsys):
    folder, _ = root
    step = folder / "step-00000007"
    data = bytearray((step / "rank-00000.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (step / "rank-00000.safetensors").write_bytes(bytes(data))
    assert main(["checkpoint", "consolidate", str(step), "-o", str(tmp_path / "m.safetensors")]) == 3
    assert "sha256 differs" in capsys.readouterr().err
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("action", ["info", "consolidate"])
def test_help_teaches_with_examples(action, capsys):
    with pytest.raises(SystemExit):
        main(["checkpoint", action, "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and f"hal checkpoint {action} runs/exp1/ckpt" in out
