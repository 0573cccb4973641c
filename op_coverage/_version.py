"""The version of op_coverage (one place; the package, the CLI and every report read it)."""
__version__ = "0.1.0"
