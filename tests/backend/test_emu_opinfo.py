"""Every op of torch's own OpInfo database runs on the emulated device and matches the CPU.

torch's ``op_db`` (``torch.testing._internal.common_methods_invocations``) is the outside
ground truth: the sample inputs PyTorch tests its own kernels with.  Each op's float32
samples run on the CPU and on ``emu``; the emulator must route every op that reaches the
device (native, decomposition or host), give the CPU's values, and — for ops with autograd —
the CPU's gradients.
"""
import warnings
from itertools import islice  # the first samples only: generating all of them took ~6 s a walk

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import hal.emu

pytestmark = pytest.mark.emu

common_methods_invocations = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations",
    reason="torch's OpInfo database needs expecttest (installed with hal's test extras)")

#: ops left out, with the reason (every other op of op_db must pass)
NOT_ON_EMU = {
    "sparse.sampled_addmm": "sparse layouts are not emulated (dense tensors only)",
    "sparse.mm": "sparse layouts are not emulated (dense tensors only)",
    "to_sparse": "sparse layouts are not emulated (dense tensors only)",
    "tensor_split": "the sample moves the split-indices tensor to the device, which CUDA refuses too "
                    "(tensor_split takes its indices tensor on the CPU)",
}
#: ops whose values are not comparable between two runs, or between two devices: a random op draws from
#: the device's generator, counter-based as CUDA's, not from the CPU's mt19937 (the same seed gives
#: other numbers, as it does on CUDA)
NONDETERMINISTIC = ("normal", "bernoulli", "rand", "multinomial", "nn.functional.dropout", "uniform",
                    "exponential", "cauchy", "geometric", "log_normal", "nn.functional.rrelu",
                    "nn.functional.feature_alpha", "nn.functional.alpha_dropout", "empty", "new_empty",
                    "nn.functional.fractional_max_pool", "nn.functional.multi_head_attention_forward")
#: ops that read a tensor's whole storage, which a copy to another device does not preserve
STORAGE_LEVEL = {"as_strided", "as_strided_scatter"}
#: ops whose extra outputs differ by device: in eval mode CUDA (and torch's decomposition,
#: which the emulator runs) return per-channel save_mean / save_invstd where the CPU returns
#: empty tensors; only the normalised output is compared
FIRST_OUTPUT_ONLY = {"native_batch_norm", "_native_batch_norm_legit"}


def _drops(op, sample) -> bool:
    """True for a sample of a deterministic op that asks for dropout (``dropout_p`` > 0:
    scaled_dot_product_attention's; torch 2.4's first two samples of it include one).  Its mask comes
    from the device generator, so its values are not the CPU's (docs/emulator.md: "Runs with dropout
    differ from the CPU ... a seed repeats them on emu"): such a sample is checked for what hal
    promises, the same values from the same seed on emu."""
    return not op.name.startswith(NONDETERMINISTIC) and (sample.kwargs.get("dropout_p") or 0) > 0


def _ops():
    return [op for op in common_methods_invocations.op_db
            if op.name not in NOT_ON_EMU and torch.float32 in op.supported_dtypes("cpu")]


@pytest.fixture(scope="module", autouse=True)
def emulator():
    hal.emu.install()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _to_emu(tree, mapping=None):
    def move(x):
        if not isinstance(x, torch.Tensor):
            return x
        y = x.detach().to("emu").requires_grad_(x.requires_grad)
        if mapping is not None:
            mapping[id(x)] = y
        return y
    return tree_map(move, tree)


def _to_cpu(tree):
    return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def _compare(op, got, ref):
    if op.name.startswith(NONDETERMINISTIC) or op.name in STORAGE_LEVEL:
        return
    if op.name in FIRST_OUTPUT_ONLY:
        got, ref = got[0], ref[0]
    torch.testing.assert_close(got, ref, equal_nan=True, atol=1e-4, rtol=1e-4, check_device=False)


# the decomposition route walks the whole database again: make long (the default route is the host)
@pytest.fixture(params=["host", pytest.param("decomposition", marks=pytest.mark.long)])
def route(request):
    hal.emu.set_fallback_route(request.param)
    yield request.param
    hal.emu.set_fallback_route("host")


def test_every_op_of_torchs_opinfo_database_runs_and_matches_the_cpu(route):
    failures, ran = [], 0
    for op in _ops():
        try:
            samples = list(islice(op.sample_inputs("cpu", torch.float32, requires_grad=False), 2))
        except Exception:  # an op whose sample generator needs something this machine lacks
            continue
        for s in samples:
            try:
                torch.manual_seed(0)
                ref = op(s.input, *s.args, **s.kwargs)
            except Exception:
                continue  # the CPU refuses this sample: nothing to compare
            try:
                torch.manual_seed(0)
                got = _to_cpu(op(_to_emu(s.input), *_to_emu(s.args), **_to_emu(s.kwargs)))
                if _drops(op, s):
                    torch.manual_seed(0)
                    again = _to_cpu(op(_to_emu(s.input), *_to_emu(s.args), **_to_emu(s.kwargs)))
                    torch.testing.assert_close(got, again, rtol=0, atol=0)
                else:
                    _compare(op, got, ref)
                ran += 1
            except Exception as exc:
                failures.append(f"{op.name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}")
                break
    assert not failures, "\n".join(failures)
    assert ran > 1000  # the database really ran (op_db holds ~600 ops with float32 samples)


@pytest.mark.long  # about 22 s on 2 cores (the forward walk above stays in the default run): make long
def test_every_differentiable_op_gives_the_cpus_gradients_on_emu():
    failures, ran = [], 0
    for op in _ops():
        if not op.supports_autograd:
            continue
        try:
            samples = list(islice(op.sample_inputs("cpu", torch.float32, requires_grad=True), 1))
        except Exception:
            continue
        for s in samples:
            leaves = [x for x in tree_leaves((s.input, s.args, s.kwargs))
                      if isinstance(x, torch.Tensor) and x.requires_grad]
            try:
                torch.manual_seed(0)
                outs = [o for o in tree_leaves(op(s.input, *s.args, **s.kwargs))
                        if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
                if not outs:
                    continue
                ref = list(torch.autograd.grad(sum(o.sum() for o in outs), leaves, allow_unused=True))
            except Exception:
                continue
            mapping = {}
            args = _to_emu((s.input, s.args, s.kwargs), mapping)
            try:
                torch.manual_seed(0)
                outs = [o for o in tree_leaves(op(args[0], *args[1], **args[2]))
                        if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
                got = torch.autograd.grad(sum(o.sum() for o in outs), [mapping[id(x)] for x in leaves],
                                          allow_unused=True)
                if not _drops(op, s):  # a dropout mask from the device generator: not the CPU's gradients
                    _compare(op, _to_cpu(list(got)), ref)
                ran += 1
            except Exception as exc:
                failures.append(f"{op.name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}")
    assert not failures, "\n".join(failures)
    assert ran > 450
