"""torch.cuda's classes and submodules as CUDA-written code uses them, outcomes written as JSON.

    HAL_BACKEND=cpu hal run cuda_namespace.py OUT.json CHECKPOINT

Written for CUDA and nothing else.  The annotation below is transformers' (its
generation/continuous_batching/utils.py, evaluated when any model is imported); the RNG
checkpoint is the Hugging Face Trainer's (_save_rng_state / _load_rng_state: torch.cuda.random
in a single process, get_rng_state_all under DDP).  tests/dist/test_hal_run_cuda_namespace.py
asserts what each outcome must be.
"""
import json
import os
import sys

import torch


def create_device_stream(device: torch.device) -> torch.cuda.Stream | None:
    return torch.cuda.Stream(device=device) if device.type == "cuda" else None


class SideStream(torch.cuda.Stream):
    """A stream class of the script's own, as pipelining code derives one."""

    def run(self, fn):
        with torch.cuda.stream(self):
            out = fn()
        torch.cuda.current_stream().wait_stream(self)
        return out


def classes():
    s = create_device_stream(torch.device("cuda", 0))
    e = torch.cuda.Event(enable_timing=True)
    side = SideStream()
    y = side.run(lambda: torch.ones(4, device="cuda") * 2)
    return {"stream": [isinstance(s, torch.Stream), isinstance(s, torch.cuda.Stream), s.device.type],
            "event": [isinstance(e, torch.Event), isinstance(e, torch.cuda.Event)],
            "subclass": [isinstance(side, torch.Stream), isinstance(side, torch.cuda.streams.Stream), y.sum().item()],
            "context": isinstance(torch.cuda.stream(s), torch.cuda.StreamContext),
            "is_built": torch.backends.cuda.is_built()}


def trainer_rng(path):
    """Save the RNG as the Trainer does, draw, restore it, draw again."""
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    torch.manual_seed(0)
    torch.save({"cpu": torch.random.get_rng_state(),
                "cuda": torch.cuda.random.get_rng_state_all() if ddp else torch.cuda.random.get_rng_state()}, path)
    first = torch.rand(4, device="cuda")
    state = torch.load(path)
    torch.random.set_rng_state(state["cpu"])
    if ddp:
        torch.cuda.random.set_rng_state_all(state["cuda"])
    else:
        torch.cuda.random.set_rng_state(state["cuda"])
    again = torch.rand(4, device="cuda")
    # the device generator alone, restored through torch.cuda.random
    saved = torch.cuda.random.get_rng_state_all()
    third = torch.rand(4, device="cuda")
    torch.cuda.random.set_rng_state_all(saved)
    fourth = torch.rand(4, device="cuda")
    return {"states": len(saved), "count": torch.cuda.device_count(), "restored": torch.equal(first, again),
            "restored_device_only": torch.equal(third, fourth)}


if __name__ == "__main__":
    out, checkpoint = sys.argv[1], sys.argv[2]
    rank = int(os.environ.get("RANK", "0"))
    result = {"classes": classes(), "rng": trainer_rng(f"{checkpoint}.{rank}")}
    with open(f"{out}.{rank}" if rank else out, "w") as f:
        json.dump(result, f)
