"""emu's memory as torch's device-generic code sees it: ``torch.accelerator``'s memory API (a
``c10::DeviceAllocator``, torch 2.9 and later) and ``torch.emu``'s, one set of counters behind both."""
import re
import subprocess
import sys

import pytest
import torch

import hal.emu

pytestmark = pytest.mark.emu

MiB = 1 << 20
needs_accelerator_memory = pytest.mark.skipif(
    not hasattr(getattr(torch, "accelerator", None), "memory_allocated"),
    reason=f"torch {torch.__version__} has no torch.accelerator memory API (it arrived in torch 2.9)")


@pytest.fixture(scope="module", autouse=True)
def emu_device():
    hal.emu.install()


@needs_accelerator_memory
def test_allocating_a_tensor_moves_the_counts_by_its_bytes():
    before = torch.accelerator.memory_allocated()
    assert torch.emu.memory_allocated() == before
    t = torch.empty(3 * MiB // 4, dtype=torch.float32, device="emu")  # 3 MiB
    assert torch.accelerator.memory_allocated() - before == 3 * MiB
    assert torch.accelerator.memory_reserved() - before == 3 * MiB  # nothing cached: reserved is allocated
    assert torch.emu.memory_allocated() == torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= before + 3 * MiB
    del t
    assert torch.accelerator.memory_allocated() == before


@needs_accelerator_memory
def test_memory_stats_are_torch_cudas_keys_with_the_same_numbers_in_both_apis():
    keep = [torch.empty(2 * MiB, dtype=torch.uint8, device="emu"), torch.empty(100, device="emu")]
    ours, torchs = torch.emu.memory_stats(), torch.accelerator.memory_stats()
    assert ours == torchs
    for key in ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak", "active_bytes.small_pool.current",
                "requested_bytes.all.allocated", "segment.all.current", "allocation.all.freed",
                "active.large_pool.current", "inactive_split_bytes.all.current", "num_ooms", "num_alloc_retries",
                "num_device_alloc", "num_device_free"):
        assert key in ours, key
    # a 2 MiB allocation is in the large pool, a 400-byte one in the small pool (CUDA's 1 MiB line)
    assert ours["allocated_bytes.large_pool.current"] >= 2 * MiB
    assert ours["allocated_bytes.small_pool.current"] >= 400
    assert ours["allocated_bytes.all.current"] == (ours["allocated_bytes.large_pool.current"]
                                                   + ours["allocated_bytes.small_pool.current"])
    del keep


@needs_accelerator_memory
def test_reset_peak_makes_the_peak_the_current_value():
    big = torch.empty(4 * MiB, dtype=torch.uint8, device="emu")
    del big
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated() + 4 * MiB
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    assert torch.emu.max_memory_allocated() == torch.emu.memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.accelerator.memory_reserved()


@needs_accelerator_memory
def test_reset_accumulated_zeroes_the_totals_but_not_the_current():
    keep = torch.empty(MiB, dtype=torch.uint8, device="emu")
    current = torch.accelerator.memory_allocated()
    torch.accelerator.reset_accumulated_memory_stats()
    stats = torch.emu.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0
    assert stats["allocated_bytes.all.current"] == current
    torch.empty(8, device="emu")
    assert torch.emu.memory_stats()["allocation.all.allocated"] == 1
    del keep


@needs_accelerator_memory
def test_empty_cache_and_memory_info_answer_on_emu():
    keep = torch.ones(1000, device="emu")
    before = torch.accelerator.memory_allocated()
    torch.accelerator.empty_cache()  # accelerate and transformers call it at every evaluation
    torch.emu.empty_cache()
    assert torch.accelerator.memory_allocated() == before  # nothing cached, nothing freed under a live tensor
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total and total == torch.emu.mem_get_info()[1]  # host memory
    assert keep.sum().item() == 1000.0


def test_statistics_follow_the_device_index():
    before = [torch.emu.memory_allocated(i) for i in (0, 1)]
    t = torch.empty(MiB, dtype=torch.uint8, device="emu:1")
    assert torch.emu.memory_allocated(1) - before[1] == MiB and torch.emu.memory_allocated(0) == before[0]
    del t


@pytest.mark.skipif(not hasattr(getattr(torch, "accelerator", None), "empty_host_cache"),
                    reason=f"torch {torch.__version__} has no torch.accelerator.empty_host_cache")
def test_empty_host_cache_does_not_crash_the_process():
    # torch 2.13 dereferences the device's host allocator unchecked: without one the process dies (SIGSEGV),
    # so this runs in a child
    code = ("import torch, hal.emu; hal.emu.install(); p = torch.ones(4).pin_memory(); "
            "torch.accelerator.empty_host_cache(); print(p.is_pinned())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"


@needs_accelerator_memory
def test_a_torch_whose_api_the_build_cannot_serve_is_named_plainly(monkeypatch):
    # a build without c10::DeviceAllocator on a torch with torch.accelerator's memory API (hal's guard wrong)
    monkeypatch.setitem(torch.emu.FEATURES, "device_allocator", False)
    with pytest.warns(RuntimeWarning, match=re.escape(f"torch {torch.__version__} offers torch.accelerator's memory "
                                                      "API") + ".*use torch.emu's memory calls"):
        torch.emu.check_torch_features()
