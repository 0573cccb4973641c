"""The redirection log records each call site once and counts it: the user's file and line, found on
first sight of the site; after that a site is one lookup (no walk up the stack)."""

import sys

import pytest
import torch

import hal.redirect
from hal.plugin.registry import Registry
from hal.redirect import _log
from hal.util.frames import short_path

pytestmark = pytest.mark.emu

HERE = short_path(__file__)


@pytest.fixture
def cpu_backend(clean_registry):
    return Registry(env={"HAL_BACKEND": "cpu"}).selected().backend


def _line() -> int:
    return sys._getframe(1).f_lineno


def _rows(t, kind="redirected"):
    return {(r["call"], r["where"]): r["count"] for r in t.log.rows(kind)}


def test_each_call_site_is_one_row_at_its_line_counted_over_many_calls(cpu_backend):
    n = 50
    x = torch.ones(2)
    with hal.redirect.enable(cpu_backend) as t:
        first = _line() + 2
        for _ in range(n):
            torch.empty(2, device="cuda")
            torch.zeros(2, device=torch.device("cuda"))
            x.to("cuda")
            x.cuda()
            torch.cuda.is_available()
            torch.cuda.device_count()
            torch.cuda.synchronize()
            torch.cuda.Stream()
            torch.cuda.current_stream()
            torch.cuda.Event(enable_timing=True).record()
    expected = ["torch.empty(device=cuda)", "torch.zeros(device=cuda)", "Tensor.to(device=cuda)", "Tensor.cuda()",
                "torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.synchronize", "torch.cuda.Stream",
                "torch.cuda.current_stream", "torch.cuda.Event"]
    rows = _rows(t)
    for i, call in enumerate(expected):
        assert rows.get((call, f"{HERE}:{first + i}")) == n, (call, rows)
    loop = {f"{HERE}:{first + i}" for i in range(len(expected))}
    assert len([k for k in rows if k[1] in loop]) == len(expected)


def test_the_same_call_on_two_lines_is_two_rows_and_one_line_is_one_row(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(3):
            a = torch.ones(1, device="cuda"); b = torch.ones(1, device="cuda")  # noqa: E702 - one line
            line = _line() - 1
            torch.ones(1, device="cuda")
    rows = _rows(t)
    assert rows[("torch.ones(device=cuda)", f"{HERE}:{line}")] == 6
    assert rows[("torch.ones(device=cuda)", f"{HERE}:{line + 2}")] == 3
    assert a.device.type == b.device.type == "cpu"


def test_steady_state_looks_for_no_user_frame(cpu_backend, monkeypatch):
    """After a site's first sight its calls are counted by one lookup: the user's frame is not looked for."""
    looked = []
    real = _log.is_user
    monkeypatch.setattr(_log, "is_user", lambda f: looked.append(f) or real(f))
    x = torch.ones(1)
    with hal.redirect.enable(cpu_backend) as t:
        first = _line() + 4
        for i in range(20):
            if i == 1:
                before = len(looked)
            torch.empty(1, device="cuda")
            x.to("cuda")
            torch.cuda.is_available()
            torch.cuda.Event()
    assert before > 0 and len(looked) == before
    counts = {w: c for (_, w), c in _rows(t).items()}
    assert [counts.get(f"{HERE}:{first + i}") for i in range(4)] == [20] * 4


def test_a_call_torch_makes_for_the_user_is_recorded_at_the_users_line(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(4):
            layer = torch.nn.Linear(3, 2, device="cuda")
            line = _line() - 1
    assert layer.weight.device.type == "cpu"
    rows = _rows(t)
    assert rows[("torch.empty(device=cuda)", f"{HERE}:{line}")] == 8  # weight and bias, four times


def test_torch_keeps_the_real_answers_after_the_users_sites_are_known(cpu_backend):
    real = (torch.cuda.is_available(), torch.cuda.device_count())
    inside = {"__name__": "torch.utils.data.fake_internal", "torch": torch}
    exec("def ask():\n    return torch.cuda.is_available(), torch.cuda.device_count(), "
         "type(torch.cuda.Stream).__call__ is not None", inside)
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(3):
            user = (torch.cuda.is_available(), torch.cuda.device_count())
            theirs = inside["ask"]()
    assert user == (True, 1)
    assert theirs[:2] == real
    assert all(not r["where"].startswith("<") for r in t.log.rows("redirected"))


@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason=f"torch {torch.__version__} has no torch.accelerator (2.6+)")
def test_torch_accelerator_is_recorded_at_the_users_line(cpu_backend, monkeypatch):
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: torch.device("cuda"))
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(3):
            assert torch.accelerator.device_count() == 1
            line = _line() - 1
    assert _rows(t)[("torch.cuda.device_count", f"{HERE}:{line}")] == 3


def test_memory_statistics_the_cpu_lacks_answer_neutrally_each_time_and_are_reported_once(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(5):
            assert torch.cuda.memory_allocated() == 0
            line = _line() - 1
    rows = [r for r in t.log.rows("not_redirected") if r["call"] == "torch.cuda.memory_allocated"]
    assert [(r["where"], r["count"]) for r in rows] == [(f"{HERE}:{line}", 5)]
    assert "returned 0" in rows[0]["detail"]


def test_device_index_maps_and_is_recorded_per_spelling(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        for _ in range(2):
            torch.empty(1, device="cuda:0"); torch.empty(1, device=0)  # noqa: E702
            line = _line() - 1
    rows = _rows(t)
    assert rows[("torch.empty(device=cuda:0)", f"{HERE}:{line}")] == 2
    assert rows[("torch.empty(device=0)", f"{HERE}:{line}")] == 2
