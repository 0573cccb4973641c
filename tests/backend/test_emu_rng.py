"""emu's generator: counter-based, with CUDA's 16-byte state (seed, offset) that torch's device-generic
code (DTensor's RNG tracker, fork_rng, checkpoints) reads and writes."""
import threading

import pytest
import torch
import torch.nn.functional as F

import hal.emu

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module", autouse=True)
def emu_device():
    hal.emu.install()


def seed_and_offset(state: torch.Tensor):
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    return state[:8].view(torch.int64).item(), state[8:].view(torch.int64).item()


def test_state_is_seed_then_offset_and_random_ops_advance_the_offset_in_fours():
    torch.emu.manual_seed(1234)
    assert seed_and_offset(torch.emu.get_rng_state()) == (1234, 0)
    torch.randn(10, device="emu")
    assert seed_and_offset(torch.emu.get_rng_state()) == (1234, 12)  # 10 draws, CUDA's unit of 4
    torch.rand(3, 5, device="emu")
    torch.empty(100, device="emu").uniform_()
    assert torch.emu.default_generators[0].get_offset() == 12 + 16 + 100
    torch.randperm(10, device="emu")  # a factory: its size counts
    torch.randint(0, 9, (3, 5), device="emu")
    assert torch.emu.default_generators[0].get_offset() == 128 + 12 + 16
    torch.emu.manual_seed(7)  # a new seed starts at offset 0
    assert seed_and_offset(torch.emu.get_rng_state()) == (7, 0)


def test_a_seed_reproduces_draws_and_another_seed_does_not():
    torch.manual_seed(3)  # seeds the emu generators too
    a = torch.randn(1000, device="emu").cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.randn(1000, device="emu").cpu(), a)
    torch.manual_seed(4)
    assert not torch.equal(torch.randn(1000, device="emu").cpu(), a)
    assert torch.emu.initial_seed() == 4


def test_set_rng_state_restores_a_draw_exactly():
    torch.emu.manual_seed(11)
    torch.randn(5, device="emu")
    state = torch.emu.get_rng_state()
    a = torch.randn(64, device="emu").cpu()
    torch.rand(7, device="emu")
    torch.emu.set_rng_state(state)
    assert torch.equal(torch.randn(64, device="emu").cpu(), a)


def test_successive_draws_and_offsets_are_distinct_streams():
    g = torch.Generator(device="emu").manual_seed(0)
    first = torch.randn(256, device="emu", generator=g).cpu()
    second = torch.randn(256, device="emu", generator=g).cpu()
    assert not torch.equal(first, second)
    g.set_offset(0)
    assert torch.equal(torch.randn(256, device="emu", generator=g).cpu(), first)
    g.set_offset(4)  # one unit later: another stream, not the first one shifted
    shifted = torch.randn(256, device="emu", generator=g).cpu()
    assert not torch.equal(shifted, first) and not torch.equal(shifted[:-4], first[4:])
    with pytest.raises(RuntimeError, match="multiple of 4"):
        g.set_offset(6)


def test_fork_rng_restores_the_device_stream():
    torch.manual_seed(21)
    expected = [torch.randn(8, device="emu").cpu() for _ in range(2)]
    torch.manual_seed(21)
    got = [torch.randn(8, device="emu").cpu()]
    with torch.random.fork_rng(devices=[0], device_type="emu"):
        torch.randn(1000, device="emu")
        torch.emu.manual_seed(99)
    got.append(torch.randn(8, device="emu").cpu())
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_a_device_generator_is_independent_of_the_default_one():
    torch.emu.manual_seed(5)
    g = torch.Generator(device="emu").manual_seed(5)
    assert seed_and_offset(g.get_state()) == (5, 0)
    mine = torch.randn(32, device="emu", generator=g).cpu()
    assert torch.emu.default_generators[0].get_offset() == 0 and g.get_offset() == 32
    assert torch.equal(torch.randn(32, device="emu").cpu(), mine)  # same (seed, offset): same numbers
    twin = torch.Generator(device="emu")
    twin.set_state(torch.emu.get_rng_state())
    assert torch.equal(torch.randn(16, device="emu", generator=twin).cpu(), torch.randn(16, device="emu").cpu())
    clone = g.clone_state()
    assert torch.equal(torch.rand(9, device="emu", generator=clone).cpu(), torch.rand(9, device="emu", generator=g).cpu())


def test_dropout_is_reproducible_for_a_seed():
    x = torch.ones(4096, device="emu")
    torch.emu.manual_seed(8)
    a = F.dropout(x, 0.5).cpu()
    torch.emu.manual_seed(8)
    assert torch.equal(F.dropout(x, 0.5).cpu(), a)
    assert 0.4 < (a == 0).float().mean().item() < 0.6 and set(a.unique().tolist()) == {0.0, 2.0}
    assert not torch.equal(F.dropout(x, 0.5).cpu(), a)


def test_a_state_of_the_wrong_size_is_refused_with_the_fix():
    cpu_state = torch.get_rng_state()  # 5056 bytes: the layout emu generators held before
    with pytest.raises(RuntimeError, match="5056 bytes is a CPU generator's state.*manual_seed"):
        torch.emu.set_rng_state(cpu_state)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.emu.set_rng_state(torch.zeros(8, dtype=torch.uint8))


def test_seed_picks_a_fresh_seed_at_offset_zero():
    torch.randn(4, device="emu")
    torch.emu.seed()
    seed, offset = seed_and_offset(torch.emu.get_rng_state())
    assert offset == 0 and seed == torch.emu.initial_seed()


def test_threads_drawing_at_once_never_share_an_offset():
    torch.emu.manual_seed(0)
    draws = []

    def work():
        for _ in range(50):
            draws.append(torch.rand(4, device="emu").cpu())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert torch.emu.default_generators[0].get_offset() == 4 * 50 * 4
    assert len({tuple(d.tolist()) for d in draws}) == 200
