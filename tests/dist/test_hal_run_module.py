"""`hal run -m MODULE` as `python -m` / `torchrun -m` run a library's entry point (torchtitan.train), and the
torchrun console options a library's launcher passes (`--local-ranks-filter 0 --role rank --tee 3`)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.dist]


def hal_run(tmp_path, *args, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(HAL_BACKEND="cpu", PYTHONWARNINGS="ignore", HAL_RUN_QUIET="1")
    return subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def package(tmp_path):
    """A package whose __init__ reads sys.argv and torch.cuda at import, as torchtitan.config does
    (ConfigManager.parse_args(args=sys.argv[1:]) binds its default then), and a module that prints both."""
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""\
        import sys
        import torch
        ARGV_AT_IMPORT = list(sys.argv[1:])
        CUDA_AT_IMPORT = torch.cuda.is_available()
    """))
    (pkg / "train.py").write_text(textwrap.dedent("""\
        import os
        import trainpkg
        print(f"rank {os.environ.get('RANK', '-')} argv {trainpkg.ARGV_AT_IMPORT} cuda {trainpkg.CUDA_AT_IMPORT}")
    """))
    return tmp_path


def test_the_module_s_packages_import_with_its_arguments_under_the_shim(package):
    proc = hal_run(package, "-m", "trainpkg.train", "--job.config_file", "x.toml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "argv ['--job.config_file', 'x.toml'] cuda True" in proc.stdout


@pytest.mark.slow
def test_torchrun_console_options_show_the_chosen_rank_prefixed(package):
    proc = hal_run(package, "--nproc-per-node", 2, "--local-ranks-filter", 1, "--role", "rank", "--tee", 3,
                   "-m", "trainpkg.train", "--x", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "argv" in line]
    assert lines == ["[rank1]:rank 1 argv ['--x', '1'] cuda True"], proc.stdout


def test_torchrun_console_options_without_torchrun_say_so(package):
    proc = hal_run(package, "--tee", 3, "-m", "trainpkg.train")
    assert proc.returncode == 2
    assert "--tee are torchrun's options: give --nproc-per-node too" in proc.stderr
