"""hal run --max-restarts without a torchrun group: one clear line (the restarts themselves run for
real in tests/dist/test_fault_tolerance.py, through hal run on the emulator)."""
from hal.cli import main


def test_max_restarts_without_a_group_is_one_line_and_exit_2(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(0)\n")
    assert main(["run", "--max-restarts", "2", str(script)]) == 2
    err = capsys.readouterr().err
    assert "--max-restarts restarts a torchrun group: give --nproc-per-node too" in err
    assert "Traceback" not in err

