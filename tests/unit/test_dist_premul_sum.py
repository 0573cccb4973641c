"""ReduceOp.PREMUL_SUM on hal's gloo path, in one process (a one-rank gloo group): each collective
that takes an op gives factor x input, the caller's read-only input is left alone, SUM calls reach
torch's function untouched, and a torch whose functions moved is refused before anything is patched.
At 2 ranks through `hal run`: tests/dist/test_hal_run_c10d_parts.py; against a plain computation:
`hal conformance`'s ccl check (tests/dist/test_ccl_conformance.py)."""
import warnings

import pytest
import torch
import torch.distributed as dist

import hal
from hal.dist import DistError, premul_sum

R = dist.ReduceOp


def premul(factor):
    """``ReduceOp.PREMUL_SUM(factor)`` where the enum member is callable (2.13 has it, 2.10 not), else
    ``_make_nccl_premul_sum(factor)``, the spelling FSDP2 uses on every torch of hal's window."""
    return R.PREMUL_SUM(factor) if callable(R.PREMUL_SUM) else dist._make_nccl_premul_sum(factor)


if not hasattr(dist._make_nccl_premul_sum(0.5), "factor"):
    pytestmark = pytest.mark.skip(reason=f"torch {torch.__version__}'s ReduceOp does not give Python a "
                                         f"PREMUL_SUM's factor (2.13 does): hal refuses the op there")

needs_reduce_scatter_single = pytest.mark.skipif(
    not hasattr(dist, "reduce_scatter_single"),
    reason=f"torch {torch.__version__} has no torch.distributed.reduce_scatter_single (2.13 has it, 2.10 not)")


@pytest.fixture
def one_rank(clean_registry, no_launcher):
    no_launcher.setenv("HAL_BACKEND", "cpu")
    hal.reset_registry()
    torch_all_reduce = dist.all_reduce
    hal.dist.init(timeout=10)
    return torch_all_reduce


@pytest.mark.parametrize("factor", [0.5, torch.tensor(0.25), torch.tensor(0.5, dtype=torch.float64)],
                         ids=["float", "tensor", "float64-tensor"])
def test_every_collective_that_takes_an_op_multiplies_then_sums(one_rank, factor):
    op, f = premul(factor), float(factor)
    x = torch.arange(4.0) + 1
    t = x.clone()
    dist.all_reduce(t, op=op)
    assert t.tolist() == (x * f).tolist()
    t = x.clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor), async_op=True).wait()  # torch 2.13's other spelling
    assert t.tolist() == (x * f).tolist()
    t = x.clone()
    dist.reduce(t, dst=0, op=op)
    assert t.tolist() == (x * f).tolist()
    inp, out = x.clone(), torch.empty(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # reduce_scatter_tensor, all_reduce_coalesced: deprecated
        dist.reduce_scatter_tensor(out, inp, op=op, async_op=True).wait()
        assert out.tolist() == (x * f).tolist() and inp.tolist() == x.tolist()  # the input is the caller's
        ts = [x.clone(), x[:2].clone()]
        dist.all_reduce_coalesced(ts, op=op)
    assert [t.tolist() for t in ts] == [(x * f).tolist(), (x[:2] * f).tolist()]
    if hasattr(dist, "reduce_scatter_single"):  # 2.13 has it, 2.10 not
        out = torch.empty(4)
        dist.reduce_scatter_single(out, inp, op=op)
        assert out.tolist() == (x * f).tolist() and inp.tolist() == x.tolist()
    ins = [x.clone()]
    dist.reduce_scatter(out, ins, op=op)
    assert out.tolist() == (x * f).tolist() and ins[0].tolist() == x.tolist()


@needs_reduce_scatter_single
def test_inside_the_coalescing_manager(one_rank):
    outs, ts = [torch.empty(2), torch.empty(3)], [torch.ones(2), torch.ones(3)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o in outs:
            dist.reduce_scatter_single(o, torch.full((o.numel(),), 6.0), op=premul(0.5))
    cm.wait()
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, op=premul(0.25))
    cm.wait()
    assert [o.tolist() for o in outs] == [[3.0] * 2, [3.0] * 3] and [t.tolist() for t in ts] == [[0.25] * 2, [0.25] * 3]


def test_sum_and_avg_reach_torchs_function_as_they_were_called(one_rank):
    calls = []
    wrapper = premul_sum._wrap(premul_sum.FUNCTIONS[0], lambda tensor, op=R.SUM, group=None, async_op=False:
                               calls.append((tensor, op, group, async_op)))
    t = torch.ones(2)
    # AVG too where this torch's gloo averages (2.13); where it sums instead (2.7), hal serves AVG
    ops = (R.SUM, R.AVG, R.MAX) if premul_sum.gloo_averages() else (R.SUM, R.MAX)
    for op in ops:
        wrapper(t, op, None, True)
        wrapper(t, op=op)
    assert [(c[0] is t, c[1], c[3]) for c in calls] == [(True, op, a) for op in ops for a in (True, False)]
    wrapper(t, premul(0.5))   # multiplied in place (all_reduce writes its tensor), then SUM
    assert calls[-1][0] is t and t.tolist() == [0.5, 0.5] and calls[-1][1] == R.SUM


def test_destroy_puts_torchs_functions_back(one_rank):
    assert getattr(dist.all_reduce, premul_sum.MARK) is one_rank
    hal.dist.destroy()
    assert dist.all_reduce is one_rank and not any(hasattr(getattr(dist, f.name, None), premul_sum.MARK)
                                                   for f in premul_sum.FUNCTIONS)


def test_an_integer_tensor_is_refused_as_nccl_refuses_it(one_rank):
    with pytest.raises(DistError, match=r"PREMUL_SUM on a torch.int64 tensor.*floating-point.*ReduceOp.SUM"):
        dist.all_reduce(torch.ones(2, dtype=torch.int64), op=premul(0.5))


def test_a_python_process_group_serves_its_own_ops():
    class PythonGroup(dist.ProcessGroup):   # the emulator's emuccl is one, as a vendor CCL may be
        pass

    assert premul_sum.reaches_gloo(PythonGroup(0, 1), torch.device("cpu")) is False


def test_a_torch_whose_functions_moved_is_refused_before_anything_is_patched(monkeypatch):
    patched = []
    monkeypatch.delattr(dist, "reduce")
    with pytest.raises(DistError, match=r"torch.distributed.reduce is missing.*torch 2.13.*report it"):
        premul_sum.install(lambda owner, name, value: patched.append(name))
    monkeypatch.undo()
    monkeypatch.setattr(dist, "reduce_scatter", lambda output, input_list, group=None: None)
    with pytest.raises(DistError, match=r"torch.distributed.reduce_scatter\(output, input_list, group=None\): "
                                        r"no parameter op"):
        premul_sum.install(lambda owner, name, value: patched.append(name))
    assert patched == []


def test_hal_run_serves_it_for_as_long_as_the_redirection_lasts(clean_registry):
    from hal.plugin.registry import Registry
    cpu = Registry(env={"HAL_BACKEND": "cpu"}).selected().backend
    torch_all_reduce = dist.all_reduce
    with hal.redirect.enable(cpu):
        assert getattr(dist.all_reduce, premul_sum.MARK) is torch_all_reduce
        assert premul_sum.install(lambda owner, name, value: pytest.fail("wrapped twice")) == []
    assert dist.all_reduce is torch_all_reduce
