"""The version of hal (one place: the package, the CLI, checkpoints and the emulator build read it)."""
__version__ = "0.1.0"
