"""torch.cuda's whole namespace under the shim: its classes stay classes whose instances are the
backend's, and its submodules (torch.cuda.random, memory, streams, graphs, nccl, amp ...) and
torch.backends.cuda answer as torch.cuda does.  The names are found here by walking torch,
independently of hal's own walk, so that none is missed."""
import importlib
import pkgutil
import warnings

import pytest
import torch

import hal.redirect
from hal.plugin.registry import Registry
from hal.redirect._cuda_submodules import BACKENDS_CUDA_SETTINGS, BACKENDS_CUDA_SETTINGS_SINCE

pytestmark = pytest.mark.emu
MARK = "__hal_redirect__"


@pytest.fixture(params=["cpu", "emu"])
def backend(request, clean_registry):
    return Registry(env={"HAL_BACKEND": request.param}).selected().backend


def cuda_modules():
    """torch.cuda and every public submodule of it (packages walked down)."""
    found = [torch.cuda]
    for info in pkgutil.walk_packages(torch.cuda.__path__, "torch.cuda."):
        if not any(part.startswith("_") for part in info.name.split(".")[2:]):
            found.append(importlib.import_module(info.name))
    return found


def public(kind):
    """(label, module, name) of every public class (kind "class") or function (kind "function")
    that torch.cuda or one of its submodules holds and torch.cuda defines."""
    out = []
    for mod in cuda_modules():
        for name, obj in vars(mod).items():
            if name.startswith("_") or not getattr(obj, "__module__", "").startswith("torch.cuda"):
                continue
            if (kind == "class") == isinstance(obj, type) and callable(obj):
                out.append((f"{mod.__name__}.{name}", mod, name))
    return out


def _subclass(cls):
    with warnings.catch_warnings():  # torch.cuda.amp's deprecated classes warn on subclassing
        warnings.simplefilter("ignore", FutureWarning)
        return type("Sub", (cls,), {})


def _subclassable(cls):
    try:
        _subclass(cls)
        return True
    except TypeError:
        return False


def test_the_walk_finds_what_a_script_reaches():
    classes = {label for label, _, _ in public("class")}
    functions = {label for label, _, _ in public("function")}
    assert {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.Event", "torch.cuda.StreamContext",
            "torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.device", "torch.cuda.device_of",
            "torch.cuda.ExternalStream", "torch.cuda.amp.GradScaler", "torch.cuda.amp.autocast"} <= classes
    assert {"torch.cuda.random.get_rng_state_all", "torch.cuda.random.manual_seed_all",
            "torch.cuda.memory.memory_allocated", "torch.cuda.nccl.version"} <= functions


def test_every_torch_cuda_class_stays_a_class(backend):
    classes = public("class")
    subclassable = {label for label, mod, name in classes if _subclassable(getattr(mod, name))}
    with hal.redirect.enable(backend):
        for label, mod, name in classes:
            cls = getattr(mod, name)
            assert isinstance(cls, type), label
            assert (cls | None).__args__ == (cls, type(None)), label  # an annotation: X | None
            assert not isinstance(object(), cls) and not issubclass(int, cls), label
            if label in subclassable:
                assert issubclass(_subclass(cls), cls), label


def test_every_torch_cuda_function_is_redirected_or_reported(backend):
    """Every public function of torch.cuda and its submodules is the shim's (an answer for the
    backend, or torch's own reported when the script calls it), and a name torch.cuda shares
    with a submodule stays one object.  torch.cuda.amp's are torch.amp's with "cuda",
    redirected there."""
    functions = public("function")
    shared = [(label, mod, name) for label, mod, name in functions if getattr(torch.cuda, name, None) is getattr(mod, name)]
    assert len(shared) > 40
    with hal.redirect.enable(backend):
        missed = [label for label, mod, name in functions
                  if not getattr(getattr(mod, name), MARK, False) and not label.startswith("torch.cuda.amp.")]
        split = [label for label, mod, name in shared if getattr(torch.cuda, name) is not getattr(mod, name)]
    assert missed == [] and split == []


def test_torch_backends_cuda_answers_for_the_backend(backend):
    bc = torch.backends.cuda
    functions = [n for n, obj in vars(bc).items() if not n.startswith("_") and callable(obj)
                 and not isinstance(obj, type) and getattr(obj, "__module__", "") == "torch.backends.cuda"]
    have = tuple(int(p) for p in torch.__version__.split(".")[:2])
    expected = {n for n, since in BACKENDS_CUDA_SETTINGS_SINCE.items() if have >= tuple(map(int, since.split(".")))}
    assert expected <= set(functions)
    q = torch.randn(1, 1, 4, 8)
    with hal.redirect.enable(backend) as t:
        missed = [n for n in functions if n not in BACKENDS_CUDA_SETTINGS and not getattr(getattr(bc, n), MARK, False)]
        answers = [bc.is_built()]
        if hasattr(bc, "is_flash_attention_available"):  # torch 2.5+ (and SDPAParams with enable_gqa)
            answers += [bc.is_flash_attention_available(),
                        bc.can_use_flash_attention(bc.SDPAParams(q, q, q, None, 0.0, False, False), False)]
    assert missed == []
    assert answers == [True, False, False][:len(answers)]
    assert "torch.backends.cuda.is_built" in {r["call"] for r in t.log.rows("redirected")}


def test_streams_and_events_are_the_backends_and_still_cuda_classes(backend):
    with hal.redirect.enable(backend):
        s, e = torch.cuda.Stream(), torch.cuda.Event(enable_timing=True)
        assert isinstance(s, torch.Stream) and isinstance(s, torch.cuda.Stream)
        assert isinstance(e, torch.Event) and isinstance(e, torch.cuda.Event)
        assert s.device.type == e.device.type == backend.device_type
        assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
        assert torch.cuda.streams.Stream is torch.cuda.Stream and torch.cuda.streams.Event is torch.cuda.Event
        ctx = torch.cuda.stream(s)
        assert isinstance(ctx, torch.cuda.StreamContext)
        with ctx:
            assert torch.cuda.current_stream() == s
        assert torch.cuda.current_stream() != s
        assert issubclass(torch.cuda.ExternalStream, torch.cuda.Stream)


def test_a_script_can_derive_from_cuda_streams_and_events(backend):
    with hal.redirect.enable(backend):
        class TaggedStream(torch.cuda.Stream):
            def tag(self):
                return "side"

        class TimingEvent(torch.cuda.Event):  # CUDA's events take their arguments in __new__
            def __new__(cls):
                return super().__new__(cls, enable_timing=True)

        s = TaggedStream(priority=-1)
        assert s.tag() == "side" and isinstance(s, torch.Stream) and s.device.type == backend.device_type
        start, end = TimingEvent(), TimingEvent()
        start.record()
        torch.ones(8, device="cuda").sum()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) >= 0 and isinstance(start, torch.cuda.Event)


def test_torchs_own_code_gets_torchs_classes(backend):
    inside = {"__name__": "torch.utils.fake_internal", "torch": torch}
    with hal.redirect.enable(backend):
        inside["s"] = torch.cuda.Stream()
        exec("is_cuda_stream = isinstance(s, torch.cuda.Stream)\n"
             "try:\n    made = type(torch.cuda.Stream())\nexcept (RuntimeError, AssertionError) as exc:\n"
             "    made = exc\n", inside)
    assert inside["is_cuda_stream"] is False  # torch would take it for a CUDA stream
    assert not (isinstance(inside["made"], type) and issubclass(inside["made"], torch.Stream)
                and inside["made"].__module__.startswith("hal"))


def test_rng_state_of_torch_cuda_random_round_trips(backend):
    with hal.redirect.enable(backend):
        count = torch.cuda.device_count()
        saved = torch.cuda.random.get_rng_state_all()  # what the Trainer saves under DDP
        one = torch.cuda.random.get_rng_state()        # and in a single process
        first = torch.rand(4, device="cuda")
        torch.cuda.random.set_rng_state_all(saved)
        again = torch.rand(4, device="cuda")
        torch.cuda.random.set_rng_state(one)
        third = torch.rand(4, device="cuda")
    assert len(saved) == count >= 1 and all(s.dtype == torch.uint8 and s.numel() > 0 for s in saved)
    assert torch.equal(first, again) and torch.equal(first, third)


def test_manual_seed_all_of_torch_cuda_random_seeds_the_device_generator(clean_registry):
    backend = Registry(env={"HAL_BACKEND": "emu"}).selected().backend
    with hal.redirect.enable(backend):
        torch.cuda.random.manual_seed_all(7)
        a = torch.rand(4, device="cuda")
        torch.cuda.random.manual_seed_all(7)
        b = torch.rand(4, device="cuda")
    assert a.device.type == "emu" and torch.equal(a, b)


def test_the_whole_namespace_is_restored(backend):
    names = public("class") + public("function")
    before = {label: getattr(mod, name) for label, mod, name in names}
    bc = {n: getattr(torch.backends.cuda, n) for n in vars(torch.backends.cuda) if not n.startswith("_")}
    with hal.redirect.enable(backend):
        pass
    assert [label for label, mod, name in names if getattr(mod, name) is not before[label]] == []
    assert [n for n, obj in bc.items() if getattr(torch.backends.cuda, n) is not obj] == []


def test_a_state_saved_on_cuda_leaves_the_cpu_generator_alone(clean_registry):
    """Resuming a checkpoint made on a GPU on the cpu backend: the Trainer restores a CUDA
    generator's state (16 bytes: seed and offset), which is not a CPU generator's."""
    backend = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend
    cuda_state = torch.zeros(16, dtype=torch.uint8)
    with hal.redirect.enable(backend) as t:
        before = torch.get_rng_state()
        torch.cuda.random.set_rng_state(cuda_state)
        torch.cuda.random.set_rng_state_all([cuda_state, cuda_state])
        assert torch.equal(torch.get_rng_state(), before)
    assert {"torch.cuda.set_rng_state", "torch.cuda.set_rng_state_all"} <= {r["call"] for r in t.log.rows("not_redirected")}
