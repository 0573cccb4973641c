"""hal run on the emulator: each op's first fallback is one line at the script's line, on rank 0,
silenced by --quiet; the report counts every call and holds none of hal's own ops."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.emu]
SCRIPTS = Path(__file__).parent / "hal_run_scripts"


def hal_run(*args, env=None, timeout=300):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    full.update(HAL_BACKEND="emu", PYTHONWARNINGS="ignore", **(env or {}))
    return subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=full, cwd=SCRIPTS,
                          capture_output=True, text=True, timeout=timeout)


def _fallback_lines(stderr):
    return [ln for ln in stderr.splitlines() if "is not native on emu" in ln]


def test_one_line_per_op_at_the_scripts_line_and_every_call_counted(tmp_path):
    out = hal_run("--report", tmp_path / "r.json", "fallbacks.py")
    assert out.returncode == 0, out.stderr
    lines = _fallback_lines(out.stderr)
    assert len(lines) == 2, out.stderr
    assert lines[0].startswith("hal run: fallbacks.py:12: aten::gelu is not native on emu")
    assert lines[1].startswith("hal run: fallbacks.py:13: aten::erfinv is not native on emu")
    assert "FallbackWarning" not in out.stderr and "hal/emu" not in out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    counts = {r["op"]: r["count"] for r in report["fallbacks"]}
    assert counts["aten::gelu"] == 5
    # hal's own start-up (the autograd check, the dtype probe) is not the script's doing
    assert not any(op.startswith(("aten::ones", "aten::ones_like")) for op in counts), counts


def test_quiet_prints_no_fallback_lines_but_the_summary_still_counts_them():
    out = hal_run("--quiet", "fallbacks.py")
    assert out.returncode == 0, out.stderr
    assert _fallback_lines(out.stderr) == []
    assert "aten::gelu (host x5)" in out.stderr


def test_two_ranks_print_each_fallback_once():
    out = hal_run("--nproc-per-node", "2", "fallbacks.py")
    assert out.returncode == 0, out.stderr
    gelu = [ln for ln in _fallback_lines(out.stderr) if "aten::gelu " in ln]
    assert len(gelu) == 1, out.stderr
    assert out.stdout.count("loss ") == 2
