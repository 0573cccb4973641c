"""The shim's C wrappers (hal._C's DeviceCall and SplitCall) behave as the Python ones they stand in
for: the same devices, the same log rows and counts, method binding, torch.compile, pickling, and
nothing kept alive after the shim ends.  ``HAL_REDIRECT_NATIVE=0`` selects the Python wrappers."""
import gc
import pickle
import sys
import weakref

import pytest
import torch

import hal.redirect
from hal.plugin.registry import Registry
from hal.util.frames import short_path

pytestmark = pytest.mark.emu

HERE = short_path(__file__)
NATIVE = hal.redirect.native_wrappers()
WHY_NOT = "the C wrappers are off here (hal._C not built, Python < 3.11, or HAL_REDIRECT_NATIVE=0)"
needs_native = pytest.mark.skipif(not NATIVE, reason=WHY_NOT)


@pytest.fixture
def cpu_backend(clean_registry):
    return Registry(env={"HAL_BACKEND": "cpu"}).selected().backend


def _script(n):
    """A CUDA script's calls, each on its own line, n times; returns the tensors and the first line."""
    x = torch.ones(2, dtype=torch.float32)
    dev = torch.device("cuda")
    first = sys._getframe().f_lineno + 3
    out = []
    for i in range(n):
        out.append(torch.empty(2, device="cuda"))
        out.append(torch.zeros(2, 3, device=dev))
        out.append(torch.full((2,), 1.5, device=f"cuda:{i % 1}"))
        out.append(x.to("cuda"))
        out.append(x.to(device=dev, dtype=torch.float64))
        out.append(torch.Tensor.to(x, "cuda:0"))
        out.append(x.to(torch.float16))  # no device: not redirected
        out.append(torch.arange(3, device=0))
        out.append(torch.cuda.is_available())
        out.append(torch.cuda.device_count())
        out.append(torch.empty(2, pin_memory=True))
        out.append(x.cuda())
        out.append(x.cuda(0))
        out.append(x.cuda(non_blocking=True))
        out.append(x.cuda("cuda:0", True))
    return out, first


@pytest.fixture(params=["1", "0"], ids=["c", "python"])
def native(request, monkeypatch):
    """``"1"``: the C wrappers (skipped where they are off); ``"0"``: the Python ones."""
    if request.param == "1" and not NATIVE:
        pytest.skip(WHY_NOT)
    monkeypatch.setenv("HAL_REDIRECT_NATIVE", request.param)
    return request.param


def test_c_and_python_wrappers_map_and_log_alike(cpu_backend, native):
    with hal.redirect.enable(cpu_backend) as t:
        assert (type(torch.empty).__name__ == "DeviceCall") == (native == "1")
        assert (type(torch.cuda.is_available).__name__ == "SplitCall") == (native == "1")
        assert (type(torch.Tensor.cuda).__name__ == "CudaCall") == (native == "1")
        out, first = _script(7)
        with pytest.raises(TypeError, match="bogus"):  # what the C Tensor.cuda does not know, Python answers
            torch.ones(1).cuda(0, bogus=1)
    tensors = [o for o in out if isinstance(o, torch.Tensor)]
    assert {o.device.type for o in tensors} == {"cpu"}
    assert [o.dtype for o in tensors[:7]] == [torch.float32, torch.float32, torch.float32, torch.float32,
                                             torch.float64, torch.float32, torch.float16]
    assert not any(o.is_pinned() for o in tensors)
    rows = {(r["call"], r["where"]): r["count"] for r in t.log.rows("redirected")}
    expected = {("torch.empty(device=cuda)", 0), ("torch.zeros(device=cuda)", 1), ("torch.full(device=cuda:0)", 2),
                ("Tensor.to(device=cuda)", 3), ("Tensor.to(device=cuda)", 4), ("Tensor.to(device=cuda:0)", 5),
                ("torch.arange(device=0)", 7), ("torch.cuda.is_available", 8), ("torch.cuda.device_count", 9),
                ("Tensor.cuda()", 11), ("Tensor.cuda()", 12), ("Tensor.cuda()", 13), ("Tensor.cuda()", 14)}
    for call, offset in expected:
        assert rows.get((call, f"{HERE}:{first + offset}")) == 7, (call, offset, rows)
    assert not [w for (_, w) in rows if w == f"{HERE}:{first + 6}"]  # x.to(float16) is no redirection
    unpinned = [r for r in t.log.rows("not_redirected") if r["where"] == f"{HERE}:{first + 10}"]
    assert len(unpinned) == 1 and unpinned[0]["call"] == "torch.empty(pin_memory=True)"


@needs_native
def test_a_site_alternating_devices_counts_each_and_the_wrappers_go_away_with_the_shim(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        wrapper = weakref.ref(torch.empty)
        for i in range(6):
            torch.empty(1, device=("cuda", "cuda:0", torch.device("cuda"))[i % 3])
            line = sys._getframe().f_lineno - 1
    rows = {r["call"]: r["count"] for r in t.log.rows("redirected") if r["where"] == f"{HERE}:{line}"}
    assert rows == {"torch.empty(device=cuda)": 4, "torch.empty(device=cuda:0)": 2}
    del t
    gc.collect()
    assert wrapper() is None  # the wrapper, its site table and the rows it holds are freed


@needs_native
def test_c_wrappers_compile_and_pickle(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        assert pickle.loads(pickle.dumps(torch.zeros)) is torch.zeros  # by reference, as torch's own

        @torch.compile(fullgraph=True, backend="eager")  # the Python wrappers break this graph when
        def step(x):  # torch._dynamo was imported before the shim started (sys._getframe is untraceable)
            return x + torch.zeros(3, device="cuda") + x.to("cuda")

        y = step(torch.ones(3, device="cuda"))
        assert y.device.type == "cpu"
        assert any(r["call"] == "torch.zeros(device=cuda)" for r in t.log.rows("redirected"))
    assert type(torch.zeros).__name__ == "builtin_function_or_method"


def test_stream_and_event_stand_ins_build_and_log_alike(cpu_backend, native):
    with hal.redirect.enable(cpu_backend) as t:
        construct = type(torch.cuda.Stream).__dict__.get("__call__")
        assert (type(construct).__name__ == "StandInCall") == (native == "1")
        made = []
        first = sys._getframe().f_lineno + 2
        for _ in range(5):
            made.append(torch.cuda.Stream())
            made.append(torch.cuda.Event(enable_timing=True))
            made.append(torch.cuda.Stream(device="cuda:0", priority=-1))
            made.append(torch.cuda.current_stream())

        class MyStream(torch.cuda.Stream):  # a subclass is built as any class is
            pass

        mine = MyStream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) >= 0
        assert all(isinstance(s, torch.cuda.Stream) for s in made[0::4] + made[2::4] + [mine])
        assert isinstance(made[1], torch.cuda.Event)
    assert all(isinstance(s, torch.Stream) and s.device.type == "cpu" for s in made[0::4] + made[3::4])
    assert made[2].priority == -1 and isinstance(mine, MyStream) and isinstance(mine, torch.Stream)
    rows = {(r["call"], r["where"]): r["count"] for r in t.log.rows("redirected")}
    for call, offset in (("torch.cuda.Stream", 0), ("torch.cuda.Event", 1), ("torch.cuda.Stream", 2),
                         ("torch.cuda.current_stream", 3)):
        assert rows.get((call, f"{HERE}:{first + offset}")) == 5, (call, offset, rows)


def test_memory_statistics_answer_and_log_alike(cpu_backend, monkeypatch, native):
    with hal.redirect.enable(cpu_backend) as t:
        first = sys._getframe().f_lineno + 2
        for _ in range(5):
            assert torch.cuda.memory_allocated() == 0  # the cpu keeps no allocator statistics
            assert torch.cuda.max_memory_allocated("cuda:0") == 0
            assert torch.cuda.memory_stats() == {}
    rows = {(r["call"], r["where"]): r for r in t.log.rows("not_redirected")}
    for call, offset in (("torch.cuda.memory_allocated", 0), ("torch.cuda.max_memory_allocated", 1),
                         ("torch.cuda.memory_stats", 2)):
        row = rows[(call, f"{HERE}:{first + offset}")]
        assert row["count"] == 5 and "keeps no allocator statistics" in row["detail"], row
    # a backend that answers for itself is asked on every call
    monkeypatch.setattr(type(cpu_backend), "memory_allocated", lambda self, index=None: 123, raising=False)
    with hal.redirect.enable(cpu_backend) as t:
        assert torch.cuda.memory_allocated() == 123
    assert any(r["call"] == "torch.cuda.memory_allocated" for r in t.log.rows("redirected"))
