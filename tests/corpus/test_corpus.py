"""The corpus of CUDA-written training scripts, run as a user runs them.

Each script of ``manifest.json`` runs three ways, each in a fresh process:

* ``python script.py`` — plain torch on the CPU, the reference (the scripts fall back to the
  CPU when CUDA is absent, as public scripts do);
* ``HAL_BACKEND=cpu hal run script.py`` — the CUDA code paths, redirected to the CPU;
* ``HAL_BACKEND=emu hal run script.py`` — the CUDA code paths, on the emulated accelerator.

Both ``hal run`` forms must finish with exit 0 and print their losses; for the scripts the
manifest marks deterministic (no random numbers drawn on the device), the losses must equal
the plain CPU run's.  DDP scripts run at 2 ranks (torchrun, ``hal run --nproc-per-node 2``).
``make test`` runs a part of this matrix and ``make long`` the rest (CPU_IN_MAKE_TEST below).
"""
import concurrent.futures
import os
import sys

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


def _run_plain(name):
    entry = ENTRIES[name]
    rc, _, _, out, err = corpus.run_once(corpus.command_for(entry), TIMEOUT_S, env=_env())
    return rc, corpus.extract_losses(entry["loss_regex"], out), corpus.first_error_line(err, out)


def _one_process(name):
    """A script that runs as one process on one thread (no torchrun, no mp.spawn)."""
    entry = ENTRIES[name]
    return not entry.get("nproc_per_node") and "mp-spawn" not in entry["idioms"]


@pytest.fixture(scope="module")
def plain(request):
    """``plain(name)``: the plain CPU run of a script, ``(rc, losses, error line)``.  The one-process
    plain runs the selected tests need start at once, in order, in one background thread: each is one
    process on one thread (OMP_NUM_THREADS=1), so on two cores it runs beside the hal run a test waits
    on.  A multi-process script's plain run starts when a test asks for it, alone."""
    needed = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = params.get("name")
        if (getattr(item, "module", None) is sys.modules[__name__] and name in ENTRIES and name not in needed
                and _one_process(name) and ("backend" not in params or ENTRIES[name]["deterministic"])):
            needed.append(name)
    done = {}

    def get(name):
        if name not in done:
            done[name] = runs[name].result() if name in runs else _run_plain(name)
        return done[name]

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="plain-corpus")
    runs = {name: pool.submit(_run_plain, name) for name in needed}
    yield get
    pool.shutdown(cancel_futures=True)  # runs no selected test asked for (a test failed with -x)


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


#: ``make test`` runs every script through hal run on emu (the redirection and a device) and plainly where
#: that run is the reference (the deterministic scripts); ``make long`` adds the rest, for the 20-minute
#: budget: hal run on cpu of the scripts whose cpu path is emu's without the device (the same redirections,
#: the same CPU kernels), the four slowest multi-process scripts on cpu, and the plain runs nothing is
#: compared with.  On cpu in ``make test``: the scripts that take another path there (autocast's cpu
#: policy, compile with inductor, no allocator statistics, torch.accelerator without a device, streams).
CPU_IN_MAKE_TEST = {"amp_cuda_amp", "timm_amp_train", "nanogpt_fused_adamw", "compile_mlp", "cuda_timing_memory",
                    "accelerator_mlp", "data_prefetcher"}
PLAIN_CASES = [pytest.param(n, marks=[] if ENTRIES[n]["deterministic"] else [pytest.mark.long])
               for n in sorted(ENTRIES)]
HAL_RUN_CASES = [pytest.param(n, b, id=f"{n}-{b}", marks=[pytest.mark.emu] if b == "emu"
                              else [] if n in CPU_IN_MAKE_TEST else [pytest.mark.long])
                 for n in sorted(ENTRIES) for b in ("cpu", "emu")]


@pytest.mark.parametrize("name,backend", HAL_RUN_CASES)
def test_script_runs_unmodified_through_hal_run(name, backend, plain):
    entry = ENTRIES[name]
    rc, _, _, out, err = corpus.run_once(corpus.command_for(entry, hal=backend), TIMEOUT_S, env=_env(backend))
    assert rc == 0, f"{corpus.first_error_line(err, out)}\n{err[-3000:]}"
    losses = corpus.extract_losses(entry["loss_regex"], out)
    assert losses, f"no loss matched {entry['loss_regex']!r}\n{out[-2000:]}"
    if entry["deterministic"]:
        plain_rc, plain_losses, plain_error = plain(name)
        assert plain_rc == 0, plain_error
        diff = corpus.max_rel_diff(plain_losses, losses)
        assert diff <= RTOL, (f"losses differ from plain torch on the CPU (max relative difference {diff:.3g}):\n"
                              f"plain: {corpus.short(plain_losses)}\nhal:   {corpus.short(losses)}")


@pytest.mark.parametrize("name", PLAIN_CASES)
def test_script_runs_with_plain_torch_on_the_cpu(name, plain):
    rc, losses, error = plain(name)
    assert rc == 0, error
    assert losses, f"no loss matched {ENTRIES[name]['loss_regex']!r}"
