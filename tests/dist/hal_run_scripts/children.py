"""Processes a CUDA-written script starts, as scripts and launchers start them; outcomes as JSON.

    hal run children.py OUTDIR

The script starts itself again as Lightning starts its ranks (``Popen([sys.executable,
sys.argv[0], ...])`` with ``LOCAL_RANK=1``), through a shell (a child that raises), a Python
started with ``-I`` and one with ``-c`` (neither is taken over), and a program that is not Python;
then it replaces its own process with ``os.execv`` (the new program runs on under ``hal run``).
Each process writes what it saw to ``OUTDIR/<role>.json``.
"""
import json
import os
import subprocess
import sys

import torch

ME = os.path.abspath(__file__)
#: the check a -c / -I child runs: did hal's start-up hook load, did it take the process over
HOOK = "import sys; print('_hal_child_start' in sys.modules, 'hal.redirect' in sys.modules)"


def seen(**more):
    """What this process sees of CUDA, and of its start."""
    try:
        import sitecustomize  # the user's own (the test puts one on PYTHONPATH): it must still have run
    except ImportError:
        sitecustomize = None
    x = torch.ones(2).cuda()
    return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "device": x.device.type, "argv": sys.argv[1:], "pid": os.getpid(),
            "sys_path0": sys.path[0], "user_sitecustomize": getattr(sitecustomize, "MARK", None), **more}


def dump(out, role, record):
    with open(os.path.join(out, f"{role}.json"), "w") as f:
        json.dump(record, f)


def parent(out):
    r = seen()
    if os.environ.get("HAL_CPU_DEVICES"):  # several logical cpu devices: selection by index works
        torch.cuda.set_device(1)
        y = torch.zeros(2).to("cuda:1")
        with torch.cuda.device(1):
            z = torch.ones(1, device="cuda:1")
        r["logical"] = {"y": str(y.device), "z": str(z.device), "plain": type(y) is torch.Tensor and type(z) is torch.Tensor}
    # Lightning's idiom for rank 1: the same script again, LOCAL_RANK in the environment
    proc = subprocess.Popen([sys.executable, sys.argv[0], "worker", out, "rank1"],
                            env={**os.environ, "LOCAL_RANK": "1"})
    r["rank1_code"] = proc.wait()
    # through a shell, a child that raises
    r["shell_code"] = subprocess.call(f"{sys.executable} {ME} worker {out} raises", shell=True)
    # not reached: -I ignores PYTHONPATH; -c runs no script file
    r["isolated"] = subprocess.run([sys.executable, "-I", "-c", HOOK], capture_output=True, text=True).stdout.split()
    r["dash_c"] = subprocess.run([sys.executable, "-c", HOOK], capture_output=True, text=True).stdout.split()
    # not Python: untouched
    r["sh"] = subprocess.run(["sh", "-c", 'echo "$0 $1"', "a", "b"], capture_output=True, text=True).stdout.strip()
    r["pid"] = os.getpid()
    dump(out, "parent", r)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, ME, "after_exec", out])


def main():
    if sys.argv[1] == "worker":
        out, name = sys.argv[2], sys.argv[3]
        dump(out, name, seen(local_rank=os.environ.get("LOCAL_RANK")))
        if name == "raises":
            raise ValueError("a child that fails")
    elif sys.argv[1] == "after_exec":
        dump(sys.argv[2], "after_exec", seen())
    else:
        parent(sys.argv[1])


if __name__ == "__main__":
    main()
