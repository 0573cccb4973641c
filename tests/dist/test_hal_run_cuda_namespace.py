"""`hal run` on code that uses torch.cuda's classes and submodules, as a user runs it: transformers'
module-level `torch.cuda.Stream | None` annotation, a stream class of the script's own, the
Trainer's RNG checkpoint through torch.cuda.random (tests/dist/hal_run_scripts/cuda_namespace.py),
and the import of a transformers model itself."""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPTS = Path(__file__).parent / "hal_run_scripts"
CPU = pytest.param("cpu", id="cpu")
EMU = pytest.param("emu", id="emu", marks=pytest.mark.emu)


def hal_run(backend, *args, cwd=SCRIPTS, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(HAL_BACKEND=backend, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    @functools.lru_cache(maxsize=None)
    def run(backend, ranks=1):
        tmp = tmp_path_factory.mktemp(f"cuda-namespace-{backend}-{ranks}")
        launch = ("--nproc-per-node", ranks) if ranks > 1 else ()
        proc = hal_run(backend, *launch, "--report", tmp / "report.json", SCRIPTS / "cuda_namespace.py",
                       tmp / "out.json", tmp / "checkpoint.pt")
        assert proc.returncode == 0, proc.stderr[-4000:]
        outs = [json.loads((tmp / ("out.json" if r == 0 else f"out.json.{r}")).read_text()) for r in range(ranks)]
        return outs, json.loads((tmp / "report.json").read_text())
    return run


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_cuda_classes_in_annotations_isinstance_and_subclasses(namespace, backend):
    (out,), _ = namespace(backend)
    assert out["classes"] == {"stream": [True, True, backend], "event": [True, True],
                              "subclass": [True, True, 8.0], "context": True, "is_built": True}


@pytest.mark.parametrize("backend", [CPU, EMU])
def test_the_trainers_rng_checkpoint_round_trips(namespace, backend):
    (out,), report = namespace(backend)
    assert out["rng"]["states"] == out["rng"]["count"] >= 1  # not [] as torch's own gives off CUDA
    assert out["rng"]["restored"] and out["rng"]["restored_device_only"]
    calls = {r["call"]: r["where"] for r in report["redirected"]}
    assert calls["torch.cuda.get_rng_state"].startswith("cuda_namespace.py:")  # reached as torch.cuda.random.*
    assert calls["torch.cuda.set_rng_state_all"].startswith("cuda_namespace.py:")


@pytest.mark.frameworks
@pytest.mark.parametrize("backend", [CPU, EMU])
def test_the_trainers_rng_checkpoint_round_trips_at_two_ranks(namespace, backend):
    outs, _ = namespace(backend, ranks=2)
    for out in outs:
        assert out["rng"]["states"] == out["rng"]["count"] >= 1
        assert out["rng"]["restored"] and out["rng"]["restored_device_only"]


@pytest.mark.frameworks
@pytest.mark.parametrize("backend", [CPU, EMU])
def test_a_transformers_model_imports_under_hal_run(tmp_path, backend):
    pytest.importorskip("transformers")
    script = tmp_path / "import_model.py"
    script.write_text("from transformers import BertModel\nprint(BertModel.__name__)\n")
    proc = hal_run(backend, script, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "BertModel", proc.stderr[-4000:]
