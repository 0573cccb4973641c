"""Why FSDP2 cannot run on the CPU with the installed torch (None where it can): the one reason the FSDP2
tests skip with."""
import torch

try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    WHY_NOT = None if hasattr(torch.cpu.Stream, "record_event") else (
        f"torch {torch.__version__}'s FSDP2 records events on torch.cpu.Stream, which has no record_event there "
        f"(2.13 has it): FSDP2 on the CPU (gloo) fails in torch itself")
except ImportError:
    WHY_NOT = (f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard: its FSDP2 prototype "
               f"(torch.distributed._composable.fsdp) initialises CUDA on a CPU job")
