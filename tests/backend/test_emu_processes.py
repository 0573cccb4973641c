"""Emulated device memory across processes: shared with spawn (Hogwild), refused after fork."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.emu

HOGWILD = textwrap.dedent("""
    import sys, torch, torch.multiprocessing as mp
    import hal.emu

    def train(rank, model):
        with torch.no_grad():
            model.weight.add_(1.0)          # every process updates the one shared model

    if __name__ == "__main__":
        hal.emu.install()
        mp.set_start_method(sys.argv[1], force=True)
        model = torch.nn.Linear(2, 2, bias=False).to("emu:1")
        model.share_memory()
        before = model.weight.detach().cpu().clone()
        procs = [mp.Process(target=train, args=(r, model)) for r in range(2)]
        for p in procs: p.start()
        for p in procs: p.join()
        print([p.exitcode for p in procs], sorted({round(v, 4) for v in (model.weight.detach().cpu() - before).flatten().tolist()}),
              model.weight.device)
""")


def _run(tmp_path, method):
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    return subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=300)


def test_hogwild_processes_update_one_shared_model_with_spawn(tmp_path):
    out = _run(tmp_path, "spawn")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 0] [2.0] emu:1"


def test_a_forked_child_refuses_device_work_with_the_fix(tmp_path):
    out = _run(tmp_path, "fork")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("[1, 1] [0.0]")
    assert "cannot use the emulated device in a forked subprocess" in out.stderr
    assert "set_start_method('spawn')" in out.stderr
