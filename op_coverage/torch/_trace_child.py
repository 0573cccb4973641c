"""The traced run of ``op_coverage trace`` (a fresh process with ``HAL_BACKEND=emu``).

    python -m op_coverage.torch._trace_child --out T.json --kind script [--steps N] [--seconds S] -- train.py ARGS

Records every op that reaches the emulated device while the target runs, stops cleanly after
``--steps`` optimizer steps or ``--seconds`` seconds, and writes the trace to ``--out``.
"""
from __future__ import annotations

import _thread
import argparse
import importlib
import json
import os
import sys
import threading
import time
import traceback


#: the child's exit code when the factory cannot be imported (op_coverage trace: not found)
EXIT_NOT_FOUND = 10


class StepsReached(BaseException):
    """Raised from the optimizer-step hook once the trace has its steps (not an Exception, so
    the script's own ``except Exception`` does not swallow it)."""


def _factory(spec: str):
    module, _, name = spec.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        fn = importlib.import_module(module)
        for part in name.split("."):
            fn = getattr(fn, part)
    except (ImportError, AttributeError) as exc:
        print(f"op_coverage trace: {spec}: cannot import the factory ({exc}); pass module:function "
              f"importable from this folder, e.g. mypkg.models:build", file=sys.stderr)
        raise SystemExit(EXIT_NOT_FOUND)
    return fn


def _floats(x):
    import torch
    if isinstance(x, torch.Tensor):
        if x.is_floating_point():
            yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _floats(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _floats(v)
    elif hasattr(x, "values") and callable(x.values):  # ModelOutput-like
        for v in x.values():
            yield from _floats(v)


def _unpack(built):
    """(model, inputs, targets, loss_fn, optimizer_factory) from what a factory returns: an
    object with ``model`` and ``example_inputs`` (and optionally ``targets``, ``loss_fn``,
    ``optimizer_factory``), a ``(model, example_inputs)`` tuple, or a module with an
    ``example_inputs`` attribute."""
    import torch
    if isinstance(built, tuple) and len(built) >= 2 and isinstance(built[0], torch.nn.Module):
        inputs = built[1] if isinstance(built[1], tuple) else (built[1],)
        return built[0], inputs, (), None, None
    model = getattr(built, "model", built)
    inputs = getattr(built, "example_inputs", None)
    if not isinstance(model, torch.nn.Module) or inputs is None:
        raise SystemExit("op_coverage trace: the factory must return (model, example_inputs), a module "
                         "with an example_inputs attribute, or an object with model and example_inputs")
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return (model, inputs, tuple(getattr(built, "targets", ()) or ()), getattr(built, "loss_fn", None),
            getattr(built, "optimizer_factory", None))


def _run_factory(spec: str, device: str) -> None:
    import torch

    from hal.op_support.observe_inputs import move as _to
    model, inputs, targets, loss_fn, make_opt = _unpack(_factory(spec)())
    model = model.to(device)
    inputs, targets = _to(inputs, device), _to(targets, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (make_opt(model.parameters()) if make_opt else torch.optim.SGD(params, lr=1e-3)) if params else None
    model.train()
    out = model(*inputs)
    loss = loss_fn(out, *targets) if loss_fn else sum(t.float().sum() for t in _floats(out))
    if loss.requires_grad:  # a model without trainable parameters has no backward or optimizer step
        loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)


def _run_export(path: str, device: str) -> None:
    import torch

    from hal.op_support.observe_inputs import move as _to
    ep = torch.export.load(path)
    if ep.example_inputs is None:
        raise SystemExit(f"op_coverage trace: {path} holds no example inputs; export with "
                         f"torch.export.export(model, args) and save with torch.export.save")
    args, kwargs = ep.example_inputs
    module = ep.module().to(device)
    with torch.no_grad():
        module(*_to(args, device), **_to(kwargs, device))


def _one_rank_job() -> None:
    """A script written for torchrun (env:// rendezvous) runs as rank 0 of a 1-rank job, as under
    ``torchrun --nproc-per-node 1``: its collectives run, on one rank, and are traced."""
    if "RANK" in os.environ:
        return
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                       "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m op_coverage.torch._trace_child")
    p.add_argument("--out", required=True)
    p.add_argument("--kind", choices=("script", "factory", "export"), required=True)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("target")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args

    import torch
    from hal.plugin.registry import get_registry
    if get_registry().selected().backend is None or not hasattr(torch, "emu"):
        raise SystemExit("op_coverage trace: the emulated accelerator did not load; run "
                         "HAL_BACKEND=emu hal doctor to see why")
    from hal.util.io import atomic_write
    from hal.emu import DeviceOpTrace

    from op_coverage.torch.trace import make_trace

    trace = DeviceOpTrace()
    steps = [0]
    timed_out = threading.Event()

    def pre(opt, args, kwargs):
        trace.optimizer_step(True)

    def post(opt, args, kwargs):
        trace.optimizer_step(False)
        steps[0] += 1
        if a.steps and steps[0] >= a.steps:
            raise StepsReached()

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    if a.seconds:
        timer = threading.Timer(a.seconds, lambda: (timed_out.set(), _thread.interrupt_main()))
        timer.daemon = True
    start = time.monotonic()
    exit_code, error, stopped_by = 0, None, "end"
    source = {"kind": a.kind, "target": a.target, "argv": list(args)}
    # anomaly mode records where each autograd node was made: backward ops get the user's forward line
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    trace.start()
    if a.seconds:
        timer.start()
    try:
        if a.kind == "script":
            from hal.redirect import run_script
            _one_rank_job()
            report = run_script(a.target, args)
            exit_code = int(report["exit_code"])
            err = report.get("error")
            if err and err["type"] == "StepsReached":
                exit_code, stopped_by = 0, "steps"
            elif err and err["type"] == "KeyboardInterrupt" and timed_out.is_set():
                exit_code, stopped_by = 0, "seconds"
            elif err:
                error = f"{err['type']}: {err['message']} ({err.get('where')})"
                sys.stderr.write(err["traceback"])
        else:
            from hal.emu import set_fallback_notice
            set_fallback_notice(lambda op, route, where: None)  # the trace is the report
            (_run_factory if a.kind == "factory" else _run_export)(a.target, "emu")
    except StepsReached:
        stopped_by = "steps"
    except KeyboardInterrupt:
        if not timed_out.is_set():
            raise
        stopped_by = "seconds"
    except Exception as exc:  # noqa: BLE001 - the model's own failure: shown, and what ran is kept
        traceback.print_exc()
        exit_code, error = 1, f"{type(exc).__name__}: {exc}"
    finally:
        trace.stop()
        if a.seconds:
            timer.cancel()
        for h in handles:
            h.remove()
    data = make_trace(trace.rows(), source, steps[0], time.monotonic() - start, stopped_by,
                      torch.__version__, exit_code, error)
    atomic_write(a.out, json.dumps(data, indent=1) + "\n")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
