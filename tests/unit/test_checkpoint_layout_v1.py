"""Checkpoints written by hal's first on-disk layout still resume: the committed ones in tests/data/checkpoint-v1.

``plain/`` (a Checkpointer's save: model, optimizer, scheduler, extras, RNG, a StatefulDataLoader's
position) and ``sharded/`` (an FSDP2 model's state in torch.distributed.checkpoint's files, one rank)
were written by ``tests/data/checkpoint-v1/make.py`` with the code of commit b4b1b33 (how to write
them again is in its docstring); the values expected here are the ones that script built.
"""
import importlib.util
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import hal.checkpoint as ckpt

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoint-v1"
_spec = importlib.util.spec_from_file_location("checkpoint_v1_make", DATA / "make.py")
made = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(made)


@pytest.fixture
def keep_rng():
    """The resume restores the saved RNG of python, numpy and torch; the other tests keep theirs."""
    state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def _copy(name, tmp_path) -> Path:
    """The committed checkpoint in a folder of the test's own (a resume records events in its root)."""
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def _fresh():
    torch.manual_seed(123)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def _assert_state_as_made(model, opt, sched):
    want_model, want_opt, want_sched = made.build()
    for (name, want), got in zip(want_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(got, want), f"{name}: {got} != {want}"
    want_buffers = [want_opt.state[p]["momentum_buffer"] for p in want_model.parameters()]
    got_buffers = [opt.state[p]["momentum_buffer"] for p in model.parameters()]
    assert all(torch.equal(g, w) for g, w in zip(got_buffers, want_buffers)), "SGD momentum buffers differ"
    want = want_sched.state_dict()  # the keys this torch's scheduler has: one saved by a newer torch may hold
    assert {k: v for k, v in sched.state_dict().items() if k in want} == want  # more (2.13's _is_initial on 2.7)
    assert sched.get_last_lr() == want_sched.get_last_lr()


def test_a_checkpointer_save_of_the_first_layout_resumes(tmp_path, keep_rng):
    root = _copy("plain", tmp_path)
    model, opt, sched = _fresh()
    loader = StatefulDataLoader(TensorDataset(made.DATA), batch_size=2, shuffle=False)
    saver = ckpt.Checkpointer(root, model=model, optimizer=opt, scheduler=sched, dataloader=loader)
    ck = saver.resume()
    drawn = torch.rand(4)
    saver.close()
    torch.manual_seed(made.SEED)
    assert torch.equal(drawn, torch.rand(4)), "the saved torch RNG state was not restored"
    assert (ck.step, ck.epoch, ck.extra) == (made.STEP, 0, made.EXTRA)
    _assert_state_as_made(model, opt, sched)
    assert [b[0].flatten().tolist() for b in loader] == [[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], \
        "the loader did not resume after the batch drawn before the save"


def test_a_sharded_save_of_the_first_layout_loads_into_the_unsharded_model(tmp_path):
    root = _copy("sharded", tmp_path)
    assert ckpt.is_complete(root / "step-00000003"), "a committed file no longer matches its manifest"
    model, opt, sched = _fresh()
    ck = ckpt.resume(root, model=model, optimizer=opt, scheduler=sched, restore_rng=False)
    assert (ck.step, ck.manifest["mode"], ck.extra) == (made.STEP, "dcp", made.EXTRA)
    _assert_state_as_made(model, opt, sched)
    assert ck.states == {}, "the first layout has no states= objects"
