"""Rank 0's straggler verdicts from per-rank step times (the judging alone, no processes)."""
import pytest

import hal.metrics as metrics
from hal import HalError
from hal.metrics._straggler import StragglerJudge, _median_without, describe


def _feed(judge, per_rank, first=1):
    for r, times in enumerate(per_rank):
        judge.add(r, range(first, first + len(times)), times)
    return judge.judge()


def test_median_of_the_other_ranks():
    xs = [1.0, 2.0, 3.0, 10.0]
    assert [_median_without(xs, i) for i in range(4)] == [3.0, 3.0, 2.0, 2.0]
    assert _median_without([1.0, 5.0], 1) == 1.0


def test_a_rank_is_named_after_k_consecutive_slow_steps_and_recovers():
    j = StragglerJudge(world=4, factor=1.5, steps=3)
    fast = [0.1] * 10
    slow = [0.1, 0.3, 0.3, 0.1, 0.3, 0.3, 0.3, 0.3, 0.1, 0.1]  # steps 5-8 slow, 2-3 too short a run
    events = _feed(j, [fast, fast, slow, fast])
    assert [(e["type"], e["rank"], e["first_step"], e["last_step"], e["steps"]) for e in events] == [
        ("straggler", 2, 5, 7, 3), ("straggler_recovered", 2, 5, 8, 4)]
    assert events[0]["ratio"] == pytest.approx(3.0)
    assert describe(events[0]) == ("rank 2 is a straggler: step time 0.3 s = 3.0x the median of the "
                                   "other ranks for 3 steps (steps 5-7)")


def test_steps_not_reported_by_every_rank_wait_and_missing_ones_are_skipped():
    j = StragglerJudge(world=2, factor=1.5, steps=2)
    j.add(0, [1, 2, 3, 4], [0.1] * 4)
    j.add(1, [1, 2], [0.5, 0.5])
    assert [e["last_step"] for e in j.judge()] == [2]
    assert j.judged == 2  # steps 3-4 wait for rank 1
    j.add(1, [4, 5], [0.1, 0.1])  # rank 1 never logged step 3
    assert [e["type"] for e in j.judge()] == ["straggler_recovered"]
    assert j.judged == 4 and 3 not in j.times[0]


def test_a_rank_that_never_reports_costs_bounded_memory():
    j = StragglerJudge(world=2, factor=1.5, steps=2, keep=50)
    for start in range(0, 1000, 10):
        j.add(0, range(start, start + 10), [0.1] * 10)
        assert j.judge() == []
    assert sorted(j.times[0]) == list(range(950, 1000))


def test_balanced_ranks_name_nobody():
    j = StragglerJudge(world=3, factor=1.5, steps=2)
    assert _feed(j, [[0.1, 0.12, 0.11] * 5, [0.11, 0.1, 0.12] * 5, [0.12, 0.11, 0.1] * 5]) == []


@pytest.mark.parametrize("kwargs, match", [
    ({"straggler_factor": 1.0}, r"straggler_factor=1.0: must be above 1"),
    ({"straggler_steps": 0}, r"straggler_steps=0: must be at least 1 step"),
    ({"straggler_every": 0}, r"straggler_every=0: must be at least 1 step"),
])
def test_bad_straggler_settings_are_refused(tmp_path, kwargs, match):
    with pytest.raises(HalError, match=match):
        metrics.MetricsLogger(tmp_path, **kwargs)


def test_a_single_process_never_communicates(tmp_path):
    with metrics.MetricsLogger(tmp_path, straggler_every=1) as log:
        assert log.stragglers is None
        assert "events" not in log.log_step(1, step_time_s=0.1)


class _Store:
    """The part of torch.distributed.Store the watch uses, in memory."""

    def __init__(self, fail=False):
        self.data, self.fail = {}, fail

    def set(self, key, value):
        if self.fail:
            raise RuntimeError("connection reset by peer")
        self.data[key] = value.encode()

    def check(self, keys):
        return all(k in self.data for k in keys)

    def multi_get(self, keys):
        return [self.data[k] for k in keys]


def test_two_ranks_through_the_store_name_the_slow_one(caplog):
    from hal.metrics import _straggler
    from hal.metrics._straggler import StragglerWatch

    store = _Store()
    r0 = StragglerWatch("t2", 0, 2, 1.5, 3, every=4, store=store)
    _straggler._instances.pop("t2")  # as if rank 1 were its own process
    r1 = StragglerWatch("t2", 1, 2, 1.5, 3, every=4, store=store)
    events = []
    with caplog.at_level("WARNING", logger="hal.metrics"):
        for step in range(1, 13):
            r1.add(step, 0.3)  # rank 1 posts before rank 0 reads
            events += r0.add(step, 0.1)
    assert [(e["type"], e["rank"], e["first_step"], e["last_step"]) for e in events] == [("straggler", 1, 1, 3)]
    assert caplog.messages == ["rank 1 is a straggler: step time 0.3 s = 3.0x the median of the other ranks "
                               "for 3 steps (steps 1-3)"]


def test_an_unreachable_store_turns_detection_off_with_one_warning(caplog):
    from hal.metrics._straggler import StragglerWatch

    w = StragglerWatch("t3", 1, 2, 1.5, 3, every=2, store=_Store(fail=True))
    with caplog.at_level("WARNING", logger="hal.metrics"):
        for step in range(1, 10):
            assert w.add(step, 0.1) == []
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("straggler detection is off for run t3 on rank 1: posting this rank's "
                                         "step times failed (RuntimeError: connection reset by peer)")
