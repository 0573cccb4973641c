"""The parallelism corpus (tests/parallel/manifest.json) through `hal run` on cpu (gloo) and on the
emulator (emuccl): every case's losses and gathered parameters against one process on the whole
batch.  The default run holds the cases marked ``default`` on the emulator (TP with sequence and loss
parallel inside FSDP2 on a 2 x 2 mesh, eagerly initialised; its cpu run is in make parallel, and
FSDP2 at 2 ranks alone in tests/dist/test_hal_run_c10d_parts.py); the whole matrix is behind
``-m parallel`` (make parallel)."""
import pytest

import check_parallel

pytestmark = [pytest.mark.dist, pytest.mark.slow]
MANIFEST = check_parallel.load_manifest()
CASES = {c["name"]: c for c in MANIFEST["cases"]}


def _params(default):
    return [pytest.param(name, backend, id=f"{name}-{backend}",
                         marks=([] if default and backend == "emu" else [pytest.mark.parallel])
                         + ([pytest.mark.emu] if backend == "emu" else []))
            for name, c in CASES.items() if c["default"] == default for backend in check_parallel.BACKENDS]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The single-process reference of each backend, made once."""
    cache = {}

    def get(backend):
        if backend not in cache:
            cache[backend] = check_parallel.reference(CASES["fsdp2"], backend, str(tmp_path_factory.mktemp("ref")))
        return cache[backend]
    return get


def _check(name, backend, references, tmp_path):
    case = CASES[name]
    result = check_parallel.run_case(case, backend, references(backend),
                                     MANIFEST["tolerances"][case["tolerance"]], str(tmp_path))
    assert result["ok"], check_parallel.line(result)


@pytest.mark.parametrize("name,backend", _params(default=True))
def test_default_cases_match_one_process(name, backend, references, tmp_path):
    _check(name, backend, references, tmp_path)


@pytest.mark.parametrize("name,backend", _params(default=False))
def test_every_case_matches_one_process(name, backend, references, tmp_path):
    _check(name, backend, references, tmp_path)


def test_manifest_names_existing_scripts_and_tolerances():
    import os
    for c in MANIFEST["cases"]:
        assert os.path.isfile(os.path.join(check_parallel.SCRIPTS, c["script"])), c["name"]
        assert c["tolerance"] in MANIFEST["tolerances"] and c["launcher"] in ("hal run", "torchrun"), c["name"]
    assert sum(c["default"] for c in MANIFEST["cases"]) <= 3
