"""ReduceOp.AVG on hal's gloo path: passed on where this torch's gloo averages (2.13), served as a
premultiplied SUM where it sums instead (torch 2.7's reduce_scatter_tensor, FSDP2's gradient
reduction).  One process here, with the probe's answer forced either way; the real thing at 2 and 4
ranks, on whatever torch runs it: tests/dist/test_collectives.py."""
import pytest
import torch
import torch.distributed as dist

import hal
from hal.dist import DistError, premul_sum

R = dist.ReduceOp
RS_TENSOR = next(f for f in premul_sum.FUNCTIONS if f.name == "reduce_scatter_tensor")
ALL_REDUCE = next(f for f in premul_sum.FUNCTIONS if f.name == "all_reduce")


@pytest.fixture
def one_rank(clean_registry, no_launcher):
    no_launcher.setenv("HAL_BACKEND", "cpu")
    hal.reset_registry()
    hal.dist.init(timeout=10)
    return no_launcher


def _recording(calls):
    def reduce_scatter_tensor(output, input, op=R.SUM, group=None, async_op=False):
        calls.append((input, op))
    return reduce_scatter_tensor


def test_the_probe_gives_one_answer_per_process():
    first = premul_sum.gloo_averages()
    assert isinstance(first, bool) and premul_sum.gloo_averages() is first


def test_where_gloo_sums_avg_becomes_a_sum_of_inputs_divided_by_the_group_size(one_rank):
    one_rank.setattr(premul_sum, "gloo_averages", lambda: False)
    one_rank.setattr(dist, "get_world_size", lambda group=None: 4)
    calls = []
    wrapper = premul_sum._wrap(RS_TENSOR, _recording(calls))
    x = torch.arange(8.0)
    wrapper(torch.empty(2), x, op=R.AVG)
    (sent, op), = calls
    assert op == R.SUM and sent.tolist() == (x / 4).tolist()
    assert x.tolist() == list(range(8))   # the caller's input is left alone
    t = torch.full((2,), 8.0)
    premul_sum._wrap(ALL_REDUCE, lambda tensor, op=R.SUM, group=None, async_op=False: None)(t, op=R.AVG)
    assert t.tolist() == [2.0, 2.0]       # all_reduce writes its tensor anyway: multiplied in place


def test_where_gloo_sums_an_integer_avg_is_refused_not_summed(one_rank):
    one_rank.setattr(premul_sum, "gloo_averages", lambda: False)
    wrapper = premul_sum._wrap(RS_TENSOR, _recording([]))
    with pytest.raises(DistError, match=r"ReduceOp.AVG on a torch.int64 tensor over gloo.*does not average"):
        wrapper(torch.empty(2, dtype=torch.int64), torch.ones(4, dtype=torch.int64), op=R.AVG)


def test_where_gloo_averages_avg_reaches_torchs_function_as_called(one_rank):
    one_rank.setattr(premul_sum, "gloo_averages", lambda: True)
    calls = []
    wrapper = premul_sum._wrap(RS_TENSOR, _recording(calls))
    x = torch.arange(4.0)
    wrapper(torch.empty(2), x, op=R.AVG)
    (sent, op), = calls
    assert sent is x and op == R.AVG
