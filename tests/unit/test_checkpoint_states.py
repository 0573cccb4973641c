"""Objects with state_dict() / load_state_dict() (DCP's Stateful) saved and resumed by name: states={...}."""
import warnings

import pytest
import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import TensorDataset

import hal.checkpoint as ckpt

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402


class EMA(Stateful):
    """An exponential moving average of the weights, as training scripts keep one."""

    def __init__(self, model, decay=0.5):
        self.decay, self.updates = decay, 0
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def update(self, model):
        self.updates += 1
        for k, v in model.state_dict().items():
            self.shadow[k].mul_(self.decay).add_(v.detach(), alpha=1 - self.decay)

    def state_dict(self):
        return {"decay": self.decay, "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state_dict):
        self.decay, self.updates = state_dict["decay"], state_dict["updates"]
        for k, v in state_dict["shadow"].items():
            self.shadow[k].copy_(v)


def _job(folder, steps, stop_at=None):
    """Train ``steps`` steps (resuming from ``folder``), the EMA and the loader given as states=."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = EMA(model)
    g = torch.Generator().manual_seed(3)
    loader = StatefulDataLoader(TensorDataset(torch.arange(24.0).reshape(12, 2)), batch_size=2, shuffle=True,
                                generator=g)
    saver = ckpt.Checkpointer(folder, every=3, model=model, optimizer=opt, states={"ema": ema, "loader": loader})
    ck = saver.resume()
    step = ck.step if ck else 0
    seen, at_save = [], None
    with saver:
        for (x,) in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            ema.update(model)
            step += 1
            seen.append(x.sum().item())
            if saver.step(step):
                at_save = {k: v.clone() for k, v in ema.shadow.items()}
            if step in (stop_at, steps):
                break
    return ck, ema, seen, at_save


def test_a_checkpointer_resumes_stateful_objects_as_they_were_at_the_save(tmp_path):
    _, _, ref_seen, _ = _job(tmp_path / "ref", steps=5)
    _, ema, _, at_save = _job(tmp_path / "run", steps=5, stop_at=4)   # async save at 3, one more step after it
    assert ema.updates == 4
    ck, ema, seen, _ = _job(tmp_path / "run", steps=5)
    assert ck.step == 3 and ema.updates == 5
    assert seen == ref_seen[3:], "the loader given in states= did not continue after the batches saved"
    assert sorted(ck.states) == ["ema", "loader"] and ck.states["ema"]["updates"] == 3
    for k, v in at_save.items():
        assert torch.equal(ck.states["ema"]["shadow"][k], v), f"{k}: not the EMA of the moment save() was called"


def test_save_load_and_resume_take_states_and_a_forgotten_one_warns(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        opt.step()
        sched.step()
    ema = EMA(model)
    ema.update(model)
    ckpt.save(tmp_path, 7, model=model, states={"schedule": sched, "ema": ema})
    fresh = torch.nn.Linear(2, 2)
    sched2 = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(fresh.parameters(), lr=1.0), step_size=1, gamma=0.5)
    ck = ckpt.load(tmp_path / "step-00000007", model=fresh, states={"schedule": sched2, "ema": EMA(fresh)},
                   restore_rng=False)
    assert sched2.get_last_lr() == sched.get_last_lr() == [0.125]
    assert ck.states["ema"]["updates"] == 1
    with pytest.warns(ckpt.CheckpointWarning, match=r"holds the state of 'ema' \(saved with states=\).*not restored"):
        ckpt.resume(tmp_path, model=fresh, states={"schedule": sched2}, restore_rng=False)


def test_what_cannot_be_a_state_is_refused_with_the_fix(tmp_path):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ckpt.CheckpointError, match=r"states\['loader'\]=DataLoader: has no state_dict\(\) / "
                                                  r"load_state_dict\(\).*Stateful.*extra="):
        ckpt.Checkpointer(tmp_path, states={"loader": torch.utils.data.DataLoader(range(4))})
    with pytest.raises(ckpt.CheckpointError, match=r"states\['opt'\]=SGD: a class; pass the object itself"):
        ckpt.save(tmp_path, 1, model=model, states={"opt": torch.optim.SGD})

    class Sampler(Stateful):
        """Hands out its generator itself rather than the generator's state."""

        def state_dict(self):
            return {"generator": torch.Generator()}

        def load_state_dict(self, state_dict):
            pass

    with pytest.raises(ckpt.CheckpointError, match=r"states/sampler/generator: a torch\S*Generator cannot be "
                                                  r"stored without pickle"):
        ckpt.save(tmp_path, 1, model=model, states={"sampler": Sampler()})
    ckpt.save(tmp_path, 1, model=model)
    with pytest.raises(ckpt.CheckpointError, match=r"states\['ema'\]: .*step-00000001 holds no state of that name "
                                                  r"\(its states: none\)"):
        ckpt.resume(tmp_path, model=model, states={"ema": EMA(model)})
