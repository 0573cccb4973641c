"""CUDA graphs under the shim: no backend hal redirects to has them, and torch.cuda.is_available() answers
True, so a library that captures graphs once that check passes (torchtitan 0.3 does by default) must fail
on one line that names the call, the backend and the libraries' switches -- not deep inside torch with
"Tried to instantiate dummy base class".  Written in the idioms those libraries use."""
import pytest
import torch

import hal
import hal.redirect
from hal.plugin.registry import Registry
from hal.stacks import cuda_graph_switches

pytestmark = pytest.mark.emu


@pytest.fixture(params=["cpu", "emu"])
def backend(request, clean_registry):
    return Registry(env={"HAL_BACKEND": request.param}).selected().backend


def _refused(backend, call):
    with hal.redirect.enable(backend):
        with pytest.raises(hal.NotSupported) as info:
            call()
    return str(info.value)


def _names_the_switches(message):
    assert "\n" not in message
    for row in cuda_graph_switches():
        assert f"{row['library']} {row['switch']}" in message, row["library"]


def test_a_trainer_that_captures_when_cuda_is_available_is_told_its_switch(backend):
    """torchtitan 0.3's wrap_with_cuda_graph: capture when the device type is "cuda", CUDA is available and
    not ROCm; the first graph call names torchtitan's --training.disable_cuda_graphs."""
    def capture():
        if torch.cuda.is_available() and torch.version.hip is None:
            pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                pass

    message = _refused(backend, capture)
    assert message.startswith(f"{backend.name}: torch.cuda.graph_pool_handle (CUDA graphs) is not supported")
    assert "torchtitan --training.disable_cuda_graphs" in message
    _names_the_switches(message)


def test_capture_and_graphed_callables_are_refused_the_same_way(backend):
    layer = torch.nn.Linear(4, 4)
    calls = {"torch.cuda.CUDAGraph": lambda: torch.cuda.CUDAGraph(),
             "torch.cuda.graph": lambda: torch.cuda.graph(None),
             "torch.cuda.make_graphed_callables": lambda: torch.cuda.make_graphed_callables(layer, (torch.randn(2, 4),)),
             "torch.cuda.graphs.make_graphed_callables":
                 lambda: torch.cuda.graphs.make_graphed_callables(layer, (torch.randn(2, 4),))}
    for label, call in calls.items():
        message = _refused(backend, call)
        assert f"{label.replace('.graphs.', '.')} (CUDA graphs) is not supported" in message, label
        _names_the_switches(message)


def test_the_graph_classes_stay_classes_and_capture_checks_answer_no(backend):
    with hal.redirect.enable(backend):
        annotation = torch.cuda.CUDAGraph | None  # as a library's type hints evaluate it
        assert annotation.__args__[0] is torch.cuda.CUDAGraph
        assert not isinstance(object(), torch.cuda.graph)
        assert torch.cuda.is_current_stream_capturing() is False


def test_every_switch_names_the_version_and_the_code_it_was_read_in():
    rows = cuda_graph_switches()
    assert {"torchtitan", "DeepSpeed", "vLLM"} <= {row["library"] for row in rows}
    for row in rows:
        assert row["switch"] and row["version"][0].isdigit() and row["source"], row
        assert ";" not in row["switch"], row  # the hint joins the rows with "; "
