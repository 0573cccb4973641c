"""Faults during a 2-rank DDP job under torchrun --max-restarts 3: the job finishes and its
final weights are bitwise those of a run that never failed.

Each test launches examples/train_ddp_resilient.py (gloo on the CPU, a shuffling
DistributedSampler, 2 DataLoader workers per rank, an epoch boundary every 20 steps, the
asynchronous Checkpointer every 5 steps) and injects one fault from outside at a random step
(``HAL_CHAOS_SEED`` reproduces a run; the seed is in every failure message).  ``make chaos``
runs the whole matrix, with SIGSTOP, the emulator and several seeds.
"""
import os
import random
import shutil

import pytest

import fault_injection as fi

pytestmark = [pytest.mark.dist]

SEED = int(os.environ.get("HAL_CHAOS_SEED") or random.SystemRandom().randrange(10 ** 6))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every faulted run must equal."""
    out = tmp_path_factory.mktemp("uninterrupted")
    job = fi.launch(out)
    assert job.wait() == 0, job.text()[-4000:]
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def rng(request):
    return random.Random(f"{SEED}-{request.node.name}")


def _step(rng, job=None):
    step = fi.random_step(rng)
    if job is not None:
        job.note("chosen", seed=SEED, step=step)
    return step


def _context(job):
    return f"(HAL_CHAOS_SEED={SEED}; faults: {job.events})"


def test_sigkill_of_one_rank(tmp_path, reference, rng):
    job = fi.launch(tmp_path)
    rank, step = rng.randint(0, 1), _step(rng, job)
    fi.sigkill_rank(job, rank, step)
    job.wait()
    measured = fi.check(job, reference)
    assert measured["lost_steps"][0] <= fi.EVERY, _context(job)
    assert any("resumed at step" in line for line in measured["restart_lines"]), _context(job)


@pytest.mark.long  # make long; make chaos runs hung ranks in its matrix too
def test_hung_rank_fails_the_group_within_the_timeout_and_restarts(tmp_path, reference, rng):
    """A rank stuck outside any collective: the other one's all-reduce times out after
    --timeout seconds, its exception fails the group, torchrun restarts it."""
    step = _step(rng)
    job = fi.launch(tmp_path, extra=["--hang-at", f"1:{step}"])
    job.note("hang", rank=1, step=step)
    job.wait()
    measured = fi.check(job, reference)
    lines = "\n".join(measured["restart_lines"])
    assert f"rank 0 failed at step {step}" in lines and "Timed out" in lines, lines + _context(job)
    assert "rank 1 sent no report" in lines, lines


def test_whole_job_killed_in_the_middle_of_an_async_save(tmp_path, reference, rng):
    job = fi.kill_job_mid_save(tmp_path, _step(rng))
    job.wait()
    measured = fi.check(job, reference)
    text = job.text()
    assert "no manifest.json: the save did not finish" in text, "the half-written checkpoint was not skipped"
    assert "relaunch: the previous run left no failure report" in text, _context(job)
    assert measured["lost_steps"], _context(job)


def test_disk_full_during_a_save_drops_that_checkpoint_and_training_goes_on(tmp_path, reference, rng):
    job = fi.launch(tmp_path)
    fi.fill_disk_during_save(job, _step(rng), limit_bytes=50_000)
    job.wait()
    fi.check(job, reference, restarts=0)
    failed = [e for e in fi.events(tmp_path) if e["event"] == "save_failed"]
    assert failed and all(e["error"]["errno"] == 27 for e in failed), failed  # EFBIG: over the size limit
    assert "saves in a row failed; training continues" in job.text()


@pytest.mark.long  # make long; make chaos runs repeated faults too
def test_two_faults_in_a_row(tmp_path, reference, rng):
    """SIGKILL of rank 1, then, in the restarted group, an exception on rank 0."""
    first = rng.randint(fi.EVERY + 2, 20)
    second = rng.randint(first + fi.EVERY + 2, fi.STEPS - 3)
    job = fi.launch(tmp_path, extra=["--raise-at", f"0:{second}:1"])
    job.note("raise", rank=0, step=second, attempt=1)
    fi.sigkill_rank(job, 1, first)
    job.wait()
    measured = fi.check(job, reference, restarts=2)
    lines = "\n".join(measured["restart_lines"])
    assert "restart 2 of this group" in lines and f"rank 0 failed at step {second}" in lines, lines + _context(job)


@pytest.mark.emu
@pytest.mark.long  # about 25 s on 2 cores: make long
def test_the_same_script_on_the_emulator_through_hal_run(tmp_path, rng):
    """hal run --nproc-per-node 2 --max-restarts 3 on the emulated accelerator: the script
    takes its CUDA path (cuda devices, NCCL, GradScaler on), one rank is SIGKILLed."""
    ref = tmp_path / "uninterrupted"
    first = fi.launch(ref, via="hal-run", backend="emu")
    assert first.wait() == 0, first.text()[-4000:]
    job = fi.launch(tmp_path / "killed", via="hal-run", backend="emu")
    fi.sigkill_rank(job, rng.randint(0, 1), _step(rng, job))
    job.wait()
    measured = fi.check(job, ref)
    assert measured["lost_steps"][0] <= fi.EVERY, _context(job)
