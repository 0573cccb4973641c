"""Fixtures of the zoo's emulator tests."""
import pytest
import torch


@pytest.fixture(scope="module")
def emu_one_thread():
    """The emulated device, with one intra-op thread (two cores shared by several processes)."""
    import hal.emu
    hal.emu.install()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield "emu"
    torch.set_num_threads(n)


def step_on(name, device, architectures):
    """Architecture ``name`` built on ``device`` with its optimizer and scheduler (seed 0)."""
    torch.manual_seed(0)
    w = architectures[name](seed=0).to(device)
    opt = w.optimizer_factory(w.model.parameters())
    sched = w.scheduler_factory(opt) if w.scheduler_factory else None
    return lambda: w.step(opt, sched)


def traced_step(step):
    """The emulator's trace rows of one call of ``step``."""
    from hal.emu._trace import DeviceOpTrace
    trace = DeviceOpTrace().start()
    try:
        step()
    finally:
        trace.stop()
    return trace.rows()
