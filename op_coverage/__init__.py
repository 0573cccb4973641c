"""op_coverage: which ONNX operators a target lacks, and how to replace them.

Library API (the CLI is a thin layer over it)::

    import op_coverage
    report = op_coverage.scan("model.onnx", ["ascend", "ort-cuda"])
    report.exit_code()            # 0 / 3 / 4, as the CLI
    report.to_dict()              # versioned JSON (data/report.schema.json)
    op_coverage.render(report, "md")
    op_coverage.list_targets()    # profiles and their provenance
"""
__version__ = "0.1.0"

from .errors import ScanError  # noqa: E402
from .report import render  # noqa: E402
from .scan import scan  # noqa: E402
from .targets import load_targets  # noqa: E402


def list_targets(profile_files=None) -> list[dict]:
    """Every known target with its kind, provenance and caveats (what ``op_coverage targets`` prints)."""
    ts = load_targets(profile_files)
    ts.load_plugins()
    ts.get("ort-live")
    out = []
    for p in ts.profiles.values():
        out.append({"name": p.name, "aliases": p.aliases, "title": p.title, "kind": p.kind,
                    "provenance": p.provenance(), "source": p.source, "origin": p.origin,
                    "entries": len(p.entries), "uncertain": p.uncertain, "fallback_profile": p.fallback_profile,
                    "expands_functions": getattr(p, "expands_functions", False)})
    return out


__all__ = ["ScanError", "__version__", "list_targets", "load_targets", "render", "scan"]
