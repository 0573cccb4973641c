"""Processes a `hal run` script starts run under the redirection on the same backend, and the
run report counts them; several logical "GPUs" on the cpu backend.  As a user runs it: `hal run`
in a subprocess, the scripts in tests/dist/hal_run_scripts/ (children.py, lightning_ddp.py).
"""
import functools
import json
import os

import pytest

from test_hal_run_idioms import CPU, EMU, SCRIPTS, hal_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]
#: the children run on cpu: in `make frameworks` (the default run has it on emu, and Lightning's ranks on cpu)
CHILDREN_CPU = pytest.param("cpu", id="cpu", marks=pytest.mark.frameworks)


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """One `hal run children.py` per backend (HAL_CPU_DEVICES=2 on cpu), with a user's own
    sitecustomize on PYTHONPATH: what each process saw, the report, stderr."""
    @functools.lru_cache(maxsize=None)
    def run(backend):
        tmp = tmp_path_factory.mktemp(f"children-{backend}")
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text('MARK = "the user\'s sitecustomize"\n')
        env = {"PYTHONPATH": os.pathsep.join([str(tmp / "site"), os.environ.get("PYTHONPATH", "")])}
        if backend == "cpu":
            env["HAL_CPU_DEVICES"] = "2"
        proc = hal_run(backend, "--report", tmp / "report.json", SCRIPTS / "children.py", tmp, env=env)
        assert proc.returncode == 0, proc.stderr[-4000:]
        seen = {p.stem: json.loads(p.read_text()) for p in tmp.glob("*.json") if p.stem != "report"}
        return seen, json.loads((tmp / "report.json").read_text()), proc.stderr
    return run


@pytest.mark.parametrize("backend", [CHILDREN_CPU, EMU])
def test_a_script_started_as_lightning_starts_rank_1_runs_under_the_redirection(children, backend):
    seen, report, _ = children(backend)
    rank1 = seen["rank1"]
    assert (rank1["available"], rank1["device"], rank1["local_rank"]) == (True, backend, "1")
    assert rank1["count"] == seen["parent"]["count"] == (2 if backend == "cpu" else 8)
    assert rank1["argv"] == ["worker", seen["parent"]["argv"][0], "rank1"]  # its own command line, as given
    assert rank1["sys_path0"] == str(SCRIPTS)  # sys.path as `python script.py` gives it
    assert rank1["user_sitecustomize"] == seen["parent"]["user_sitecustomize"] == "the user's sitecustomize"
    assert seen["parent"]["rank1_code"] == 0


@pytest.mark.parametrize("backend", [CHILDREN_CPU, EMU])
def test_the_report_counts_the_children_and_their_exit_codes(children, backend):
    seen, report, stderr = children(backend)
    assert report["schema"] == "hal.run/3"
    rows = {r["argv"][-1]: r for r in report["children"]}
    assert set(rows) == {"rank1", "raises"}  # -I, -c and sh are not children of the run
    assert rows["rank1"]["pid"] == seen["rank1"]["pid"] and rows["rank1"]["ppid"] == seen["parent"]["pid"]
    assert (rows["rank1"]["status"], rows["rank1"]["exit_code"], rows["rank1"]["local_rank"]) == ("ok", 0, 1)
    assert rows["rank1"]["redirected"] >= 2 and rows["rank1"]["kind"] == "subprocess"
    # started through a shell, it raised: its exit code and error, its traceback on stderr
    assert (rows["raises"]["status"], rows["raises"]["exit_code"]) == ("failed", 1)
    assert rows["raises"]["error"] == {"type": "ValueError", "where": "children.py:70"}
    assert seen["parent"]["shell_code"] == 1 and "ValueError: a child that fails" in stderr
    assert f"hal run: child process {rows['raises']['pid']}: children.py on {backend}: failed" in stderr
    assert "2 child processes (exit codes 0, 1)" in stderr.splitlines()[-1]


@pytest.mark.parametrize("backend", [CHILDREN_CPU, EMU])
def test_what_is_not_taken_over_starts_as_it_would_have(children, backend):
    parent = children(backend)[0]["parent"]
    assert parent["isolated"] == ["False", "False"]  # -I ignores PYTHONPATH: hal cannot reach it
    assert parent["dash_c"] == ["True", "False"]  # the start-up hook ran and left a -c child alone
    assert parent["sh"] == "a b"  # not Python: untouched


@pytest.mark.parametrize("backend", [CHILDREN_CPU, EMU])
def test_the_script_replacing_its_process_with_os_exec_runs_on_under_hal_run(children, backend):
    seen, report, _ = children(backend)
    after = seen["after_exec"]
    assert after["pid"] == seen["parent"]["pid"] and (after["available"], after["device"]) == (True, backend)
    assert report["argv"][0] == "after_exec" and report["status"] == "ok"  # --report was carried over


@pytest.mark.frameworks
def test_logical_cpu_devices_select_by_index_and_stay_plain_cpu_tensors(children):
    parent = children("cpu")[0]["parent"]
    assert parent["logical"] == {"y": "cpu", "z": "cpu", "plain": True}


def test_hal_cpu_devices_shows_a_multi_gpu_gate_several_logical_cpu_devices(tmp_path):
    proc = hal_run("cpu", "--quiet", SCRIPTS / "multi_device.py", tmp_path / "out.json", env={"HAL_CPU_DEVICES": "4"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "out.json").read_text())
    assert r["count"] == 4 and (r["default"], r["cuda3"], r["index1"], r["module"]) == ("cpu",) * 4
    assert r["cuda_in_context"] == "cpu" and r["plain"] is True  # plain CPU tensors, whatever the index


# -- Lightning starts its own ranks -------------------------------------------------------------
@pytest.mark.parametrize("backend", [CPU, pytest.param("emu", id="emu", marks=[pytest.mark.emu, pytest.mark.frameworks])])
def test_lightning_ddp_starts_rank_1_under_the_redirection(backend, tmp_path):
    pytest.importorskip("lightning")
    env = {"HAL_CPU_DEVICES": "2"} if backend == "cpu" else {}
    proc = hal_run(backend, "--quiet", "--report", tmp_path / "report.json", SCRIPTS / "lightning_ddp.py", tmp_path,
                   env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    devices = ["cpu", "cpu"] if backend == "cpu" else ["emu:0", "emu:1"]  # rank 1 on its own device
    assert [(r["rank"], r["world_size"], r["step"], r["device"]) for r in ranks] == [(0, 2, 2, devices[0]),
                                                                                   (1, 2, 2, devices[1])]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas in step
    children = json.loads((tmp_path / "report.json").read_text())["children"]
    assert [(c["local_rank"], c["status"], c["exit_code"]) for c in children] == [(1, "ok", 0)]
