"""The parts of hal run's child processes that need no child: which command lines are taken over,
the run's folder of records read into the report, the cpu backend's logical device count.
(The children themselves: tests/dist/test_hal_run_children.py.)"""
import os
import subprocess
import sys
import threading
import time

import pytest

from hal._errors import HalError
from hal.redirect import _child_start as start
from hal.redirect._children import Children
from hal.redirect._core import cpu_device_count

PY = "/usr/bin/python3"


def test_a_script_file_is_found_with_its_arguments_and_the_interpreters_options(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    argv = [str(script), "--lr", "0.1"]
    assert start.script_of(argv, [PY, "-u", "-X", "dev", *argv]) == (str(script), ["--lr", "0.1"], ["-u", "-X", "dev"])
    assert start.script_of(argv, None) == (str(script), ["--lr", "0.1"], [])  # Python 3.9: no orig_argv


@pytest.mark.parametrize("argv", [["-c", "x"], ["-m", "--help"], ["-"], [""], ["no_such_file.py"]])
def test_no_script_file_no_take_over(argv):
    assert start.script_of(argv, [PY, *argv]) is None


def test_only_py_files_outside_torch_and_hal_are_taken_over(tmp_path):
    inside = tmp_path / "torch"
    inside.mkdir()
    assert start.takes_over(str(tmp_path / "train.py"), (str(inside) + os.sep,))
    assert not start.takes_over(str(inside / "_inductor_worker.py"), (str(inside) + os.sep,))
    assert not start.takes_over(str(tmp_path / "pip"))  # a console script: a command, not the user's script


def test_a_librarys_helper_script_is_not_taken_over(tmp_path):
    """DeepSpeed's CPU op builders run py-cpuinfo's cpuinfo.py as a script, twice: a library's helper,
    which must not pay hal's start-up; the user's script (anywhere else) still is taken over."""
    import sysconfig

    from hal.redirect._children import not_the_users
    helper = os.path.join(sysconfig.get_paths()["purelib"], "cpuinfo", "cpuinfo.py")
    assert not start.takes_over(helper, not_the_users())
    assert start.takes_over(str(tmp_path / "train.py"), not_the_users())


def test_outside_a_run_nothing_is_taken_over(monkeypatch):
    monkeypatch.delenv(start.ENV_RUN, raising=False)
    assert start.run_info() is None
    assert start.run_info({start.ENV_RUN: "not json"}) is None


def _record(folder, pid, **fields):
    start.write_record(str(folder), pid, {"pid": pid, "ppid": 1, "kind": "subprocess", "script": "t.py",
                                          "argv": [], "rank": "0", "local_rank": "1", "started": time.time(),
                                          "status": "running", **fields})


def test_the_report_waits_for_a_running_child_and_tells_one_that_vanished(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _record(tmp_path, dead.pid)  # ended without recording its exit (as when killed)
    _record(tmp_path, os.getpid())  # running: it records its exit 0.2 s later
    done = threading.Timer(0.2, _record, (tmp_path, os.getpid()), {"status": "ok", "exit_code": 0, "redirected": 3})
    done.start()
    rows = Children(str(tmp_path), root=True).collect(wait_s=10)
    done.join()
    by_pid = {r["pid"]: r for r in rows}
    assert (by_pid[dead.pid]["status"], by_pid[dead.pid]["exit_code"]) == ("unknown", None)
    assert (by_pid[os.getpid()]["status"], by_pid[os.getpid()]["exit_code"]) == ("ok", 0)
    assert by_pid[os.getpid()]["local_rank"] == 1 and by_pid[os.getpid()]["redirected"] == 3
    assert not tmp_path.exists()  # the run's folder is removed once read


def test_a_child_still_running_past_the_wait_is_reported_running(tmp_path):
    _record(tmp_path, os.getpid())
    t0 = time.monotonic()
    assert [r["status"] for r in Children(str(tmp_path), root=True).collect(wait_s=0.2)] == ["running"]
    assert time.monotonic() - t0 < 5


def test_a_childs_own_run_reports_no_children(tmp_path):
    _record(tmp_path, os.getpid(), status="ok", exit_code=0)
    assert Children(str(tmp_path), root=False).collect() == []
    assert tmp_path.exists()  # the folder belongs to the process that started the run


@pytest.mark.parametrize("env, count", [({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 4), ({"LOCAL_WORLD_SIZE": "1"}, 1),
                                        ({"HAL_CPU_DEVICES": "2", "LOCAL_WORLD_SIZE": "4"}, 2),
                                        ({"HAL_CPU_DEVICES": " 3 "}, 3)])
def test_cpu_logical_device_count(env, count):
    assert cpu_device_count(env)[0] == count


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_a_wrong_hal_cpu_devices_names_itself_and_the_fix(raw):
    with pytest.raises(HalError, match=rf"HAL_CPU_DEVICES='{raw}': expected a whole number >= 1.*unset it"):
        cpu_device_count({"HAL_CPU_DEVICES": raw})
