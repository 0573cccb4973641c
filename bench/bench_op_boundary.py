"""What the boundary into an operator costs per call, with nothing behind it.

Every contender wraps the same body on a decode-sized (1, 64) float32 CPU tensor: allocate the
output and run hal's C++ GELU host kernel into it on numpy views (``hal._C.gelu_fwd``): a
wrapper around a kernel outside torch, as a vendor library's would be:

* ``direct``: the Python function called directly (the floor);
* ``aten``: a C++-registered torch op of the same work, ``torch.ops.aten.gelu`` (what torch's
  own ops cost through the dispatcher, called from Python as ``torch.ops.hal.*`` is);
* ``torch_binding``: the same aten op through torch's generated Python binding,
  ``torch.nn.functional.gelu`` (how model code calls it);
* ``library``: ``torch.library.Library`` ``define`` + a Python CPU ``impl`` (and a Meta one);
  it has no autograd (that needs an Autograd-key kernel of its own), so it is a floor for
  the dispatcher's cost, not a finished route;
* ``custom_op``: ``torch.library.custom_op`` with a fake kernel and ``register_autograd``;
* ``autograd_function``: a ``torch.autograd.Function`` with ``setup_context``;
* ``hal_op``: hal.ops' boundary as hal.ops builds it (``hal.ops._boundary.entry``: the direct call
  when eager, an ``autograd.Function`` when a gradient is needed, the custom op when traced), with
  the per-call decision in C (``hal._C.OpEntry``) where hal._C has it;
* ``hal_op_python``: the same decision in Python (``hal.ops._boundary.Op``, what ``HAL_OPS_NATIVE=0``
  and a build without ``OpEntry`` use).

Each is timed without and with an input that requires grad, interleaved (ABC CBA blocks),
median and spread over ``--repeats``; the ratio is against ``aten``.  The run also checks,
for each registration, whether ``torch.compile(fullgraph=True)`` traces it as one op and
whether it runs under FakeTensorMode: speed only counts for a route that still works there.

Usage: python bench/bench_op_boundary.py [--repeats 7] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings

import torch
from torch import Tensor

import hal._C as hal_C


def body(x: Tensor) -> Tensor:
    y = torch.empty_like(x)
    hal_C.gelu_fwd(x.detach().numpy(), y.numpy(), False)  # a kernel outside torch
    return y


def contenders():
    from hal.ops._boundary import Op, entry

    lib = torch.library.Library("halbench", "DEF")  # noqa: F841 (kept alive by the closure below)
    lib.define("lib_op(Tensor x) -> Tensor")
    lib.impl("lib_op", body, "CPU")
    lib.impl("lib_op", lambda x: torch.empty_like(x), "Meta")

    def impl(x: Tensor) -> Tensor:
        return body(x)

    custom = torch.library.custom_op("halbench::custom", mutates_args=())(impl)
    custom.register_fake(lambda x: torch.empty_like(x))

    def setup(ctx, inputs, output):
        pass

    def backward(ctx, grad):
        return grad

    custom.register_autograd(backward, setup_context=setup)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return body(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    def impl2(x: Tensor) -> Tensor:
        return body(x)

    custom2 = torch.library.custom_op("halbench::for_hal_op", mutates_args=())(impl2)
    custom2.register_fake(lambda x: torch.empty_like(x))
    custom2.register_autograd(backward, setup_context=setup)
    hal_op = Op(torch.ops.halbench.for_hal_op, impl2, setup, backward, name="for_hal_op")
    return lib, {
        "direct": body,
        "aten": torch.ops.aten.gelu,
        "torch_binding": torch.nn.functional.gelu,
        "library": torch.ops.halbench.lib_op,
        "custom_op": torch.ops.halbench.custom,
        "autograd_function": Fn.apply,
        "hal_op": entry(hal_op),
        "hal_op_python": hal_op,
    }


def works_compiled(fn) -> str:
    try:
        torch._dynamo.reset()
        out = torch.compile(lambda t: fn(t) + 1, fullgraph=True, backend="eager")(torch.randn(2, 3))
        return "yes" if out.shape == (2, 3) else "wrong shape"
    except Exception as exc:  # the answer is the row's content
        return f"no ({type(exc).__name__})"


def works_fake(fn) -> str:
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode(), warnings.catch_warnings():
            warnings.simplefilter("error")  # a route that only warns on fake tensors does not work either
            out = fn(torch.empty(2, 3))
        return "yes" if type(out).__name__ == "FakeTensor" else "no (real tensor out)"
    except Exception as exc:
        return f"no ({type(exc).__name__})"


def measure(fns, x, repeats, n):
    names = list(fns)
    times = {k: [] for k in names}
    for fn in fns.values():
        for _ in range(200):
            fn(x)
    for rep in range(repeats):
        for k in (names if rep % 2 == 0 else names[::-1]):
            fn = fns[k]
            t = time.perf_counter()
            for _ in range(n):
                fn(x)
            times[k].append((time.perf_counter() - t) / n)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=5000, help="calls per timed block")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    _lib, fns = contenders()
    result = {"when": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__, "baseline": "aten",
              "threads": torch.get_num_threads(), "rows": []}
    checks = {k: (works_compiled(fn), works_fake(fn)) for k, fn in fns.items()}
    for grad in (False, True):
        x = torch.randn(1, 64, requires_grad=grad)
        times = measure(fns, x, args.repeats, args.calls)
        for k, ts in times.items():
            ratios = [a / b for a, b in zip(ts, times["aten"])]
            result["rows"].append({
                "route": k, "requires_grad": grad, "us": round(statistics.median(ts) * 1e6, 3),
                "us_spread": [round(min(ts) * 1e6, 3), round(max(ts) * 1e6, 3)],
                "over_aten": round(statistics.median(ratios), 2), "compile_fullgraph": checks[k][0],
                "fake_tensor": checks[k][1]})
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"per call, (1, 64) float32 on the CPU, torch {torch.__version__}, {result['threads']} threads; "
          f"median [min-max] of {args.repeats} blocks of {args.calls} calls")
    print(f"{'route':18s} {'grad':5s} {'us':>8s} {'spread':>18s} {'x aten':>7s}  {'compile':10s} fake")
    for r in result["rows"]:
        print(f"{r['route']:18s} {str(r['requires_grad']):5s} {r['us']:8.2f} {str(r['us_spread']):>18s} "
              f"{r['over_aten']:6.2f}x  {r['compile_fullgraph']:10s} {r['fake_tensor']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
