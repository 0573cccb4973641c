"""What a scan costs: finding hal's plugin profiles never imports torch."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "op_coverage" / "examples" / "tiny_block.onnx"

CHILD = """
import json, sys
from op_coverage.cli import main
rc = main(["scan", {path!r}, "--no-progress", "--fail-on", "never"])
import hal_backends
print(json.dumps({{"rc": rc, "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")),
                  "plugins": sorted(m for m in sys.modules if m.startswith("hal_backends.")),
                  "backends_dir": list(hal_backends.__path__)}}))
"""


def _this_checkout_env(tmp_path: Path) -> dict:
    # ``hal_backends`` is the checkout's backends/ folder (an installed copy may point elsewhere)
    (tmp_path / "hal_backends").symlink_to(ROOT / "backends", target_is_directory=True)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))


def test_scan_with_default_targets_does_not_import_torch(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD.format(path=str(TINY))], capture_output=True, text=True,
                         env=_this_checkout_env(tmp_path), timeout=120, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["rc"] == 0
    assert Path(r["backends_dir"][0]).resolve() == (ROOT / "backends").resolve()
    # hal's built-in plugins were registered (their profiles were asked for) ...
    assert "hal_backends.cpu" in r["plugins"] and "hal_backends.cuda" in r["plugins"]
    # ... and none of them imported torch: a plugin imports it when it probes or loads
    assert r["torch"] == []


def test_loading_a_backend_still_works_after_lazy_registration(tmp_path):
    code = ("import sys\nfrom hal.plugin.registry import Registry\nreg = Registry(env={'HAL_BACKEND': 'cpu'})\n"
            "assert 'torch' not in sys.modules\nb = reg.selected().backend\n"
            "from hal_backends.cpu import CPUBackend\nprint(type(b).__name__, isinstance(b, CPUBackend), "
            "b.device_count(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_this_checkout_env(tmp_path), timeout=120, check=True).stdout.split()
    assert out == ["CPUBackend", "True", "1", "True"]
