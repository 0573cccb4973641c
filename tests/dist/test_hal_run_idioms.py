"""`hal run` on CUDA-written scripts, as a user runs them: one subprocess per script, on the
cpu backend and on the emulator.  The scripts are in tests/dist/hal_run_scripts/.
"""
import functools
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPTS = Path(__file__).parent / "hal_run_scripts"
CPU = pytest.param("cpu", id="cpu")
EMU = pytest.param("emu", id="emu", marks=pytest.mark.emu)


def hal_run(backend, *args, env=None, timeout=300):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    full.update(HAL_BACKEND=backend, PYTHONWARNINGS="ignore", **(env or {}))
    # run from the scripts' folder, as a user runs a script from its project: lines are
    # then reported as idioms.py:12
    return subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=full, cwd=SCRIPTS,
                          capture_output=True, text=True, timeout=timeout)


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.partition(":")[2].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


# -- the idioms: one run per backend, one test per idiom ------------------------------------
@pytest.fixture(scope="module")
def idioms(tmp_path_factory):
    @functools.lru_cache(maxsize=None)
    def run(backend, sitecustomize=False):
        tmp = tmp_path_factory.mktemp(f"idioms-{backend}")
        env = {}
        if sitecustomize:
            (tmp / "site").mkdir()
            (tmp / "site" / "sitecustomize.py").write_text(CUDA_BUILD_WITHOUT_DRIVER)
            env["PYTHONPATH"] = os.pathsep.join([str(tmp / "site"), os.environ.get("PYTHONPATH", "")])
        proc = hal_run(backend, "--report", tmp / "report.json", SCRIPTS / "idioms.py", tmp / "out.json",
                       env=env)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return (json.loads((tmp / "out.json").read_text()), json.loads((tmp / "report.json").read_text()),
                proc.stderr)
    return run


def outcome(idioms, backend, name):
    results = idioms(backend)[0]
    r = results[name]
    assert r["ok"], f"{name} on {backend}: {r['error']}\n{r['traceback']}"
    return r["value"]


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_two_argument_torch_device_keeps_its_cuda_name_and_lands_on_the_backend(idioms, backend):
    # torch.device("cuda", 0) raised TypeError under the old TorchFunctionMode shim
    assert outcome(idioms, backend, "torch_device_two_args") == {"device": "cuda:0", "tensor": backend}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_data_parallel_cuda_and_its_forward_run_the_module_on_the_backend(idioms, backend):
    r = outcome(idioms, backend, "data_parallel")
    assert r == {"out": backend, "param": backend, "matches": True, "state_dict_prefix": "module"}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_device_queries_answer_for_the_backend(idioms, backend):
    r = outcome(idioms, backend, "device_count_gate")
    assert r["available"] is True and r["current"] == 0
    if backend == "cpu":
        assert r["count"] == 1  # everything maps to the one CPU device
    else:
        assert r["count"] == outcome(idioms, backend, "accelerator_api")["count"] >= 1


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_device_name_and_properties_describe_the_backend_device(idioms, backend):
    name = outcome(idioms, backend, "get_device_name")
    props = outcome(idioms, backend, "get_device_properties")
    assert props["name"] == name and name
    assert props["total_memory"] > 0 and props["multi_processor_count"] >= 1
    assert isinstance(props["major"], int) and isinstance(props["minor"], int)
    if backend == "cpu":
        assert (props["major"], props["minor"]) == (0, 0)
        assert props["total_memory"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        assert props["multi_processor_count"] == os.cpu_count()
        if _cpu_model():
            assert name == _cpu_model()
    else:
        assert "emulated" in name


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_timing_events_measure_the_work_between_them(idioms, backend):
    ms = outcome(idioms, backend, "event_elapsed_time")
    assert 50.0 <= ms < 5000.0  # the idiom sleeps 50 ms between the records


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_side_stream_and_wait_stream(idioms, backend):
    assert outcome(idioms, backend, "stream_and_wait_stream") == {"sum": 8.0, "device": backend}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_peak_memory_statistics(idioms, backend):
    r = outcome(idioms, backend, "peak_memory")
    report = idioms(backend)[1]
    if backend == "cpu":  # no device allocator: 0, and the report says so
        assert r["peak"] == r["allocated"] == 0
        assert "torch.cuda.max_memory_allocated" in {row["call"] for row in report["not_redirected"]}
    else:
        assert r["peak"] >= r["allocated"] >= 4 << 20


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_generator_on_cuda_is_a_generator_of_the_backend(idioms, backend):
    r = outcome(idioms, backend, "generator_on_cuda")
    assert r == {"tensor": backend, "generator": backend, "same": True, "isinstance": True}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_deprecated_cuda_amp_namespace_keeps_float16(idioms, backend):
    assert outcome(idioms, backend, "amp_deprecated_namespace") == {"dtype": "torch.float16", "scale": 65536.0}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_small_idioms_land_on_the_backend(idioms, backend):
    assert outcome(idioms, backend, "cudnn_benchmark") == backend
    assert outcome(idioms, backend, "cuda_non_blocking") == backend
    assert outcome(idioms, backend, "empty_cache") is True
    assert outcome(idioms, backend, "default_device_context") == backend
    assert outcome(idioms, backend, "legacy_tensor_type") == {"device": backend, "dtype": "torch.float32",
                                                              "isinstance": True}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_is_cuda_gates_take_the_cuda_branch_on_the_device(idioms, backend):
    # on an accelerator the script's tensors answer is_cuda for its branches; on the CPU
    # every tensor is on the one device and both branches agree
    assert outcome(idioms, backend, "is_cuda_gate") == {"is_cuda": backend != "cpu", "out": backend}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_device_selection_by_index_and_context(idioms, backend):
    assert outcome(idioms, backend, "cuda_device_context") == {"current": 0, "tensor": backend}
    assert outcome(idioms, backend, "set_device_local_rank") == {"current": 0, "tensor": backend}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_torch_compile_runs_and_matches_eager(idioms, backend):
    assert outcome(idioms, backend, "compile_model") == {"device": backend, "matches": True}
    rows = {r["call"]: r["detail"] for r in idioms(backend)[1]["redirected"]}
    if backend == "cpu":  # inductor generates CPU code: left alone
        assert "torch.compile(backend='inductor')" not in rows
    else:
        assert "aot_eager" in rows["torch.compile(backend='inductor')"]


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_torch_accelerator_answers_as_on_a_cuda_machine_and_lands_on_the_backend(idioms, backend):
    r = outcome(idioms, backend, "accelerator_api")
    assert r["accelerator"] == "cuda" and r["available"] is True and r["count"] >= 1
    assert outcome(idioms, backend, "accelerator_device_choice") == backend


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_pinned_dataloader_with_workers_and_adam(idioms, backend):
    r = outcome(idioms, backend, "dataloader_pin_memory_workers_and_adam")
    assert r["param"] == backend and r["loss"] == r["loss"]  # not NaN


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_report_rows_point_at_the_script_never_at_hal_or_torch(idioms, backend):
    report = idioms(backend)[1]
    schema = json.loads(resources.files("hal").joinpath("data/hal-run.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, schema)
    rows = report["redirected"] + report["not_redirected"]
    assert len(report["redirected"]) >= 20
    assert {r["where"].rpartition(":")[0] for r in rows} == {"idioms.py"}
    assert report["status"] == "ok" and report["exit_code"] == 0 and report["error"] is None


# -- a CUDA build of torch on a machine without a driver ------------------------------------
#: put first on PYTHONPATH: makes this CPU build look like PyPI's CUDA build with no driver,
#: where torch.cuda.is_available() is False and any call into CUDA fails
CUDA_BUILD_WITHOUT_DRIVER = '''
import torch

def _no_driver(name):
    def call(*args, **kwargs):
        raise RuntimeError(f"CUDA error: CUDA driver version is insufficient for CUDA runtime version "
                           f"(simulated no-driver CUDA build: torch called {name})")
    return call

torch.backends.cuda.is_built = lambda: True
torch.cuda.is_available = lambda: False
torch.cuda.device_count = lambda: 0
torch._C._accelerator_getAccelerator = lambda: torch.device("cuda")
for _name in ("_lazy_init", "init", "current_device", "set_device", "synchronize", "is_current_stream_capturing",
              "current_stream", "default_stream", "get_device_properties", "get_device_name",
              "get_device_capability", "mem_get_info", "memory_allocated", "max_memory_allocated",
              "memory_reserved", "reset_peak_memory_stats", "empty_cache", "Stream", "Event"):
    setattr(torch.cuda, _name, _no_driver("torch.cuda." + _name))
for _name in ("_accelerator_getDeviceIndex", "_accelerator_setDeviceIndex", "_accelerator_synchronizeDevice",
              "_accelerator_getStream"):
    setattr(torch._C, _name, _no_driver("torch._C." + _name))
'''


def test_on_a_cuda_build_without_driver_torch_itself_never_calls_cuda(idioms):
    results, report, stderr = idioms("cpu", sitecustomize=True)
    failed = {k: v["error"] for k, v in results.items() if not v["ok"]}
    assert not failed, failed
    assert "simulated no-driver CUDA build" not in stderr
    # the user's code sees CUDA through torch.cuda and torch.accelerator alike, and torch never calls into it
    assert results["device_count_gate"]["value"]["available"] is True
    assert results["accelerator_api"]["value"] == {"accelerator": "cuda", "available": True, "count": 1}


# -- torch.load of a checkpoint saved on CUDA ---------------------------------------------
FORMS = ["none", "str_cuda", "str_cuda_0", "device_cuda", "dict", "callable"]


@pytest.fixture(scope="module")
def cuda_checkpoint(tmp_path_factory):
    """A checkpoint whose storages carry the location tag "cuda:1", as torch.save writes it on
    a GPU: torch.save itself, with the tag its CUDA tagger would give."""
    import torch
    import torch.serialization as ser
    path = tmp_path_factory.mktemp("ckpt") / "cuda.pt"
    orig = ser.location_tag
    ser.location_tag = lambda storage: "cuda:1"
    try:
        torch.save({"w": torch.arange(4.0)}, path)
    finally:
        ser.location_tag = orig
    with pytest.raises(RuntimeError, match="CUDA"):  # really a CUDA checkpoint for torch here
        torch.load(path)
    return path


@pytest.fixture(scope="module")
def loads(cuda_checkpoint, tmp_path_factory):
    @functools.lru_cache(maxsize=None)
    def run(backend):
        out = tmp_path_factory.mktemp(f"load-{backend}") / "out.json"
        proc = hal_run(backend, "--quiet", SCRIPTS / "load_checkpoint.py", cuda_checkpoint, out)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(out.read_text())
    return run


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("backend", [CPU, EMU])
def test_cuda_checkpoint_loads_onto_the_backend(loads, backend, form):
    r = loads(backend)[form]
    assert r["ok"], r["error"]
    assert r["device"].partition(":")[0] == backend and r["values"] == [0.0, 1.0, 2.0, 3.0]
    if form == "dict" and backend != "cpu":
        assert r["device"] == f"{backend}:0"  # {"cuda:1": "cuda:0"} picks device 0


# -- failures are reported ----------------------------------------------------------------
def _line_of(script, text):
    return next(i for i, ln in enumerate(script.read_text().splitlines(), 1) if text in ln)


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_a_script_that_raises_gets_a_summary_a_report_and_exit_code_1(backend, tmp_path):
    script = SCRIPTS / "fails.py"
    proc = hal_run(backend, "--report", tmp_path / "r.json", script, "raise")
    assert proc.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    where = f"fails.py:{_line_of(script, 'x @ torch.ones(3, 3')}"
    assert report["status"] == "failed" and report["exit_code"] == 1
    assert report["error"]["type"] == "RuntimeError" and report["error"]["where"] == where
    assert report["error"]["message"] in proc.stderr
    # the traceback starts at the script: none of hal run's or runpy's frames above it (frames
    # below it, inside torch or the emulator, show where the error arose and stay)
    tb = proc.stderr[proc.stderr.index("Traceback (most recent call last):"):]
    tb = tb[:tb.index("\nRuntimeError: ")]
    assert tb.splitlines()[1].strip().startswith(f'File "{script}"'), tb
    assert "runpy" not in tb and f"hal{os.sep}redirect" not in tb and f"hal{os.sep}cli" not in tb
    # the redirection made before the failure is in the report, and the summary is printed
    assert any(r["call"] == "Tensor.cuda()" for r in report["redirected"])
    assert f"hal run: fails.py on {backend}: failed (exit code 1, RuntimeError at {where})" in proc.stderr


@pytest.mark.parametrize("how, code", [("exit", 3), ("message", 1)])
def test_the_scripts_exit_code_is_hal_runs(tmp_path, how, code):
    proc = hal_run("cpu", "--json", SCRIPTS / "fails.py", how, "3" if how == "exit" else "giving up: no data")
    assert proc.returncode == code
    report = json.loads(proc.stdout)
    assert report["status"] == "failed" and report["exit_code"] == code
    if how == "message":
        assert "giving up: no data" in proc.stderr and report["error"]["message"] == "giving up: no data"
    else:
        assert report["error"] is None
    assert "hal run: fails.py on cpu: failed (exit code" in proc.stderr


def test_redirections_are_printed_at_the_users_line_and_can_be_silenced(tmp_path):
    script = SCRIPTS / "fails.py"
    line = f"hal run: fails.py:{_line_of(script, 'torch.ones(2, 2).cuda()')}: redirected Tensor.cuda()"
    loud = hal_run("cpu", script, "exit", "0")
    assert loud.returncode == 0 and line in loud.stderr
    assert loud.stderr.count("redirected Tensor.cuda()") == 1
    for quiet in (hal_run("cpu", "--quiet", script, "exit", "0"),
                  hal_run("cpu", script, "exit", "0", env={"HAL_RUN_QUIET": "1"}),
                  hal_run("cpu", script, "exit", "0", env={"RANK": "1"})):  # other ranks count silently
        assert quiet.returncode == 0 and ": redirected " not in quiet.stderr
    assert "hal run: fails.py on cpu: ok" in hal_run("cpu", "--quiet", script, "exit", "0").stderr


# -- several devices ------------------------------------------------------------------------
def test_multi_gpu_gate_on_cpu_sees_one_device_and_exits_as_the_script_says(tmp_path):
    proc = hal_run("cpu", "--quiet", SCRIPTS / "multi_device.py", tmp_path / "out.json")
    assert proc.returncode == 1 and "needs 4 GPUs, found 1" in proc.stderr
    # and is told how to show it more (HAL_CPU_DEVICES: tests/dist/test_hal_run_children.py)
    assert ("hal run: torch.cuda.device_count() answered 1 at multi_device.py:15: on the cpu backend "
            "HAL_CPU_DEVICES=N shows N logical devices") in proc.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {"count": 1}


@pytest.mark.emu
def test_cuda_indices_map_to_the_emulators_devices(tmp_path):
    proc = hal_run("emu", "--quiet", SCRIPTS / "multi_device.py", tmp_path / "out.json",
                   env={"HAL_EMU_DEVICES": "4"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "out.json").read_text())
    assert r["count"] == 4 and r["current"] == 2 and r["after_context"] == 2
    assert (r["default"], r["cuda3"], r["index1"]) == ("emu:2", "emu:3", "emu:1")
    assert (r["in_context"], r["cuda_in_context"], r["module"]) == (1, "emu:1", "emu:3")
    assert "3" in r["name3"]


# -- processes the script spawns ----------------------------------------------------------------
def test_hogwild_children_spawned_by_the_script_run_under_the_shim(tmp_path):
    proc = hal_run("cpu", "--quiet", "--report", tmp_path / "report.json", SCRIPTS / "hogwild.py",
                   tmp_path / "out.json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "out.json").read_text())
    children = json.loads((tmp_path / "report.json").read_text())["children"]
    assert [(c["kind"], c["status"], c["exit_code"]) for c in children] == [("multiprocessing", "ok", 0)] * 2
    assert r["parent_device"] == "cpu"
    # each child re-ran the script's top level under the shim (torch.cuda.is_available() -> True)
    assert r["children"] == {"0": {**r["children"]["0"], "available": True, "device": "cpu"},
                             "1": {**r["children"]["1"], "available": True, "device": "cpu"}}
    assert r["loss_after"] < r["loss_before"] / 10  # the shared model was trained by the children
