"""The corpus of CUDA-written training scripts, run as a user runs them.

Each script of ``manifest.json`` runs three ways, each in a fresh process:

* ``python script.py`` — plain torch on the CPU, the reference (the scripts fall back to the
  CPU when CUDA is absent, as public scripts do);
* ``HAL_BACKEND=cpu hal run script.py`` — the CUDA code paths, redirected to the CPU;
* ``HAL_BACKEND=emu hal run script.py`` — the CUDA code paths, on the emulated accelerator.

Both ``hal run`` forms must finish with exit 0 and print their losses; for the scripts the
manifest marks deterministic (no random numbers drawn on the device), the losses must equal
the plain CPU run's.  DDP scripts run at 2 ranks (torchrun, ``hal run --nproc-per-node 2``).
"""
import os

import pytest

import check_plain_cpu as corpus  # tests/corpus/check_plain_cpu.py (pytest puts this folder on sys.path)

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

MANIFEST = corpus.load_manifest()
ENTRIES = {e["script"][:-3]: e for e in MANIFEST["scripts"]}
#: per-run limit (a run takes a few seconds; a hang must not stall CI)
TIMEOUT_S = 240
#: relative difference allowed between a deterministic script's losses on emu and on the CPU
#: (the emulator runs the CPU's kernels, so they agree to the printed digits)
RTOL = 1e-5


def _env(backend=None):
    # two cores shared by the launcher, the ranks and the data-loader workers: one intra-op
    # thread each keeps the runs from spinning against each other (wall time is not checked)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if backend:
        env["HAL_BACKEND"] = backend
    return env


_plain_cache = {}


def _plain(name):
    if name not in _plain_cache:
        entry = ENTRIES[name]
        rc, _, _, out, err = corpus.run_once(corpus.command_for(entry), TIMEOUT_S, env=_env())
        _plain_cache[name] = (rc, corpus.extract_losses(entry["loss_regex"], out),
                              corpus.first_error_line(err, out))
    return _plain_cache[name]


def test_manifest_is_consistent():
    assert corpus.validate_manifest(MANIFEST) == []
    assert len(ENTRIES) >= 25
    on_disk = {f[:-3] for f in os.listdir(corpus.SCRIPTS) if f.endswith(".py")}
    assert on_disk == set(ENTRIES), "every script is in the manifest and every entry has its script"


def test_the_error_line_is_the_exception_a_rank_raised():
    """What a failed run is reported by: the exception line, hal's NotSupported included (a 2-rank run's
    rank-prefixed lines before torchrun's failure table)."""
    err = ("[rank0]:Traceback (most recent call last):\n"
           "[rank0]:hal._errors.NotSupported: cpu: torch.cuda.graph_pool_handle (CUDA graphs) is not supported\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n  exitcode  : 1 (pid: 7)\n")
    assert corpus.first_error_line(err).startswith("hal._errors.NotSupported: cpu: torch.cuda.graph_pool_handle")
    assert corpus.first_error_line("Traceback\nValueError: bad shape\n") == "ValueError: bad shape"


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_script_runs_with_plain_torch_on_the_cpu(name):
    rc, losses, error = _plain(name)
    assert rc == 0, error
    assert losses, f"no loss matched {ENTRIES[name]['loss_regex']!r}"


#: the slowest multi-process scripts run through hal run on cpu in ``make long`` only (the
#: default run keeps them on emu, and runs them with plain torch on the cpu): the time limit
LONG_ON_CPU = {"mnist_hogwild", "ddp_torchrun_basic", "ddp_trainer_snapshot", "hogwild_spawn"}
HAL_RUN_CASES = [pytest.param(n, b, id=f"{n}-{b}",
                              marks=[pytest.mark.emu] if b == "emu" else [pytest.mark.long] if n in LONG_ON_CPU else [])
                 for n in sorted(ENTRIES) for b in ("cpu", "emu")]


@pytest.mark.parametrize("name,backend", HAL_RUN_CASES)
def test_script_runs_unmodified_through_hal_run(name, backend):
    entry = ENTRIES[name]
    rc, _, _, out, err = corpus.run_once(corpus.command_for(entry, hal=backend), TIMEOUT_S, env=_env(backend))
    assert rc == 0, f"{corpus.first_error_line(err, out)}\n{err[-3000:]}"
    losses = corpus.extract_losses(entry["loss_regex"], out)
    assert losses, f"no loss matched {entry['loss_regex']!r}\n{out[-2000:]}"
    if entry["deterministic"]:
        plain_rc, plain_losses, plain_error = _plain(name)
        assert plain_rc == 0, plain_error
        diff = corpus.max_rel_diff(plain_losses, losses)
        assert diff <= RTOL, (f"losses differ from plain torch on the CPU (max relative difference {diff:.3g}):\n"
                              f"plain: {corpus.short(plain_losses)}\nhal:   {corpus.short(losses)}")
