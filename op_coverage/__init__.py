"""op_coverage: which ONNX operators a target lacks, and how to replace them.

Library API (the CLI is a thin layer over it)::

    import op_coverage
    report = op_coverage.scan("model.onnx", ["ascend", "ort-cuda"])
    report.exit_code()            # 0 / 3 / 4, as the CLI
    report.to_dict()              # versioned JSON (data/report.schema.json)
    op_coverage.render(report, "md")
    op_coverage.list_targets()    # profiles and their provenance
"""
from op_coverage._version import __version__  # noqa: E402,F401
from op_coverage._moved import install_moved as _install_moved  # noqa: E402
from op_coverage.errors import ScanError  # noqa: E402
from op_coverage.report import render  # noqa: E402
from op_coverage.scan import scan  # noqa: E402
from op_coverage.targets.catalog import load_targets  # noqa: E402

_install_moved()


def list_targets(profile_files=None, kinds=("onnx", "torch"), use_plugins: bool = True,
                 problems: list | None = None) -> list[dict]:
    """Every known target with its kind (``onnx`` or ``torch``), provenance and caveats.

    What ``op_coverage targets`` prints.  ``profile_files`` may mix ONNX and torch profiles (told
    apart by their ``schema`` field); ``profile_kind`` says where a profile comes from.
    """
    from op_coverage.targets.catalog import split_profile_files

    onnx_files, torch_files = split_profile_files(profile_files)
    out = []
    if "onnx" in kinds:
        ts = load_targets(onnx_files, use_plugins=use_plugins)
        ts.load_plugins()
        try:
            ts.get("ort-live")
        except ScanError:
            pass  # no onnxruntime here: the live target is simply not listed
        for p in ts.profiles.values():
            out.append({"name": p.name, "aliases": p.aliases, "title": p.title, "kind": "onnx",
                        "profile_kind": p.kind, "provenance": p.provenance(), "source": p.source,
                        "origin": p.origin, "entries": len(p.entries), "uncertain": p.uncertain,
                        "fallback_profile": p.fallback_profile,
                        "expands_functions": getattr(p, "expands_functions", False)})
        if problems is not None:
            problems += ts.problems
    if "torch" in kinds:
        from hal.op_support.torch_profile import load_torch_profiles

        from hal.op_support.torch_profile import version_key

        tps = load_torch_profiles(torch_files, use_plugins=use_plugins, problems=problems).values()
        out += [p.summary() for p in sorted(tps, key=lambda p: (p.vendor, version_key(p.torch_version), p.name))]
    return out


__all__ = ["ScanError", "__version__", "list_targets", "load_targets", "render", "scan"]
