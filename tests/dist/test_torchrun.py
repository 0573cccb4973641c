"""hal.dist.init and hal bench under a real torchrun (its agent's store, its variables)."""
import os
import signal
import subprocess
import sys

import pytest

from hal.dist.launch import free_port

pytestmark = [pytest.mark.dist]


def test_bench_under_torchrun_prints_once_from_rank_0():
    env = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_port()), "-m", "hal", "bench", "all_reduce", "-b", "1K", "-e", "4K",
           "-f", "4", "--iters", "3", "--timeout", "60"]
    # its own session, so that a timeout here can take torchrun's workers down too
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    out = subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("# Out of bounds values : 0 OK") == 1
    assert "(cpu; 2 ranks)" in out.stdout
    rows = [l.split() for l in out.stdout.splitlines() if l.strip() and l.strip()[0].isdigit()]
    assert [r[0] for r in rows] == ["1024", "4096"]
