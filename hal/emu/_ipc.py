"""Sharing emulated device memory between processes (filled in below)."""


def register() -> None:
    """Teach torch.multiprocessing to pass emu tensors between processes."""
