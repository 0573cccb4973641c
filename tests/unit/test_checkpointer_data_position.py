"""Checkpointer(dataloader=...): a run stopped mid-epoch resumes with the batch that would have come."""
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import hal.checkpoint as ckpt

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

TOTAL, EVERY = 23, 4   # 10 batches per epoch: two epoch boundaries inside the run


def _run(folder, stop_after=None, workers=0):
    """Train; return (batches seen, final parameters); raise after ``stop_after`` steps."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 3), torch.randn(40, 1))
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    loader = StatefulDataLoader(data, batch_size=4, shuffle=True, num_workers=workers)
    saver = ckpt.Checkpointer(folder, every=EVERY, model=model, optimizer=opt, dataloader=loader)
    ck = saver.resume()
    step = ck.step if ck else 0
    seen = []
    with saver:
        while step < TOTAL:
            for x, y in loader:
                loss = ((model(x) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                seen.append((step, x.sum().item()))
                saver.step(step)
                if step == stop_after:
                    raise KeyboardInterrupt("stopped")
                if step == TOTAL:
                    break
    return seen, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_continues_the_same_batches_and_weights(tmp_path, workers):
    ref_seen, ref_params = _run(tmp_path / "ref", workers=workers)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "run", stop_after=14, workers=workers)   # epoch 1, batch 4; last save at 12
    seen, params = _run(tmp_path / "run", workers=workers)
    assert seen[0][0] == 13, "did not resume after the newest checkpoint (step 12)"
    assert seen == ref_seen[12:], "the batches after the resume differ from the uninterrupted run's"
    assert all(p.isfinite().all() for p in ref_params), "the reference run diverged"
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params)), "final weights differ"
    events = [e["event"] for e in ckpt._events.read(tmp_path / "run")]
    assert events == ["start", "failure", "resume", "closed"], events


def test_a_plain_dataloader_is_refused_with_the_fix(tmp_path):
    loader = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)
    with pytest.raises(ckpt.CheckpointError, match="DataLoader has no state_dict.*StatefulDataLoader"):
        ckpt.Checkpointer(tmp_path, dataloader=loader)


def test_every_must_be_a_positive_step_count(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="every=0: must be a positive number of steps"):
        ckpt.Checkpointer(tmp_path, every=0)


def test_a_checkpoint_saved_without_a_loader_warns_that_the_epoch_restarts(tmp_path):
    model = torch.nn.Linear(2, 2)
    with ckpt.Checkpointer(tmp_path, every=1, model=model, async_save=False) as saver:
        saver.step(1)
    loader = StatefulDataLoader(TensorDataset(torch.zeros(8, 1)), batch_size=2)
    with pytest.warns(ckpt.CheckpointWarning, match="holds no data position .* batches already seen come again"):
        ck = ckpt.Checkpointer(tmp_path, model=model, dataloader=loader).resume()
    assert ck.step == 1 and ck.epoch is None
    assert [b[0].shape[0] for b in loader] == [2, 2, 2, 2], "the loader must start its epoch from the beginning"
