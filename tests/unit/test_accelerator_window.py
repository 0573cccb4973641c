"""hal.util.accelerator answers as each torch of the window does: no torch.accelerator (2.4-2.5: the
compiled accelerator, where its module sees a device), raising where none is present (2.6), None (2.7+).
The real releases run through `make torch-window`; here torch is shaped as each one."""
import types

import torch

from hal.util import accelerator


def test_a_torch_without_torch_accelerator_asks_what_it_was_built_for(monkeypatch):
    monkeypatch.delattr(torch, "accelerator", raising=False)
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"), raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not accelerator.has_api() and accelerator.current() is None  # a CUDA build on a machine without GPUs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert accelerator.current() == torch.device("cuda") and accelerator.is_available()
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cpu"))
    assert accelerator.current() is None


def test_torch_2_6_raising_where_none_is_present_is_none(monkeypatch):
    def raises():
        raise RuntimeError("Cannot access accelerator device when none is available.")

    shaped = types.SimpleNamespace(current_accelerator=lambda: raises(), is_available=lambda: raises())
    monkeypatch.setattr(torch, "accelerator", shaped, raising=False)
    assert accelerator.has_api() and accelerator.current() is None and not accelerator.is_available()


def test_torch_2_7_and_later_answer_none_or_the_device(monkeypatch):
    for answer in (None, torch.device("cuda")):
        shaped = types.SimpleNamespace(current_accelerator=lambda check_available=False, a=answer: a)
        monkeypatch.setattr(torch, "accelerator", shaped, raising=False)
        assert accelerator.current() == answer
