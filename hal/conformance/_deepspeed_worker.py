"""The conformance kit's DeepSpeed check, in a process of its own (run as ``python -m``; writes JSON).

DeepSpeed binds its accelerator while it is imported, so the check needs a Python in which hal fills
the seam first (:func:`hal.stacks.deepspeed.install`), as ``hal run`` does.  Each part is recorded as
``{"part", "ok", "detail"}``; the parent (``hal.conformance._checks.check_deepspeed``) turns the first
failure into the check's reason.
"""
import json
import sys


def _parts(backend, choice):
    import torch
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    dt = backend.device_type
    dev = backend.device()
    want = "hal.stacks._deepspeed_accelerator:HalAccelerator" if choice.accelerator == "hal" else choice.accelerator
    got = f"{type(acc).__module__}:{type(acc).__qualname__}"
    yield "accelerator", got == want, f"{got} (hal chose {choice.describe()})"
    yield "device names", acc.device_name() == dt and acc.device_name(0) == f"{dt}:0" or dt == "cpu", \
        f"device_name() = {acc.device_name()!r}, device_name(0) = {acc.device_name(0)!r} for device type {dt!r}"
    on_dev, on_host = acc.on_accelerator(torch.ones(1, device=dev)), acc.on_accelerator(torch.ones(1))
    yield "on_accelerator", on_dev and (on_host == (dt == "cpu")), \
        f"a {dt} tensor: {on_dev}, a host tensor: {on_host}"
    names = [part.rpartition(":")[2] for part in acc.communication_backend_name().split(",")]
    unknown = [n for n in names if n not in dist.Backend.backend_list and n != "ccl"]
    yield "CCL", not unknown, (f"communication_backend_name() = {acc.communication_backend_name()!r}" +
                               (f"; not registered with torch.distributed: {unknown}" if unknown else ""))
    acc.manual_seed(1234)
    state = acc.get_rng_state()
    a = torch.rand(8, device=dev)
    acc.set_rng_state(state)
    b = torch.rand(8, device=dev)
    yield "RNG", torch.equal(a, b), "manual_seed, get_rng_state / set_rng_state replay a draw"
    if not acc.is_synchronized_device():
        s = acc.Stream()
        with acc.stream(s):
            x = torch.ones(4, device=dev) * 2
        acc.current_stream().wait_stream(s)
        e = acc.Event()
        e.record()
        e.synchronize()
        yield "streams", float(x.sum()) == 8.0, f"Stream / stream() / Event on {type(s).__name__}"
    before = acc.memory_allocated()
    keep = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
    yield "memory", isinstance(before, int) and isinstance(acc.memory_allocated(), int), \
        f"memory_allocated {before} -> {acc.memory_allocated()} after 1 MiB ({keep.numel()})"
    builder = acc.create_op_builder("FusedAdamBuilder")
    if choice.accelerator != "hal":  # DeepSpeed's own builder: compiled on first use, so asked only
        yield "FusedAdam", builder is not None and builder.is_compatible(), f"{type(builder).__name__}.is_compatible()"
        return
    from deepspeed.ops.adam import FusedAdam
    ref = torch.nn.Parameter(torch.linspace(-1, 1, 16))
    p = torch.nn.Parameter(ref.detach().to(dev))
    opt_ds, opt_ref = FusedAdam([p], lr=0.1, weight_decay=0.01), torch.optim.AdamW([ref], lr=0.1, weight_decay=0.01)
    for step in range(3):
        g = torch.cos(torch.arange(16.0) + step)
        p.grad, ref.grad = g.to(dev), g.clone()
        opt_ds.step()
        opt_ref.step()
    diff = float((p.detach().cpu() - ref.detach()).abs().max())
    yield "FusedAdam", diff < 1e-6, f"3 steps against torch.optim.AdamW: max difference {diff:.2e}"


def main(out_path: str) -> None:
    from hal.plugin.registry import selected_backend
    from hal.stacks import deepspeed as stack

    backend = selected_backend()
    choice = stack.install(backend)
    rows = []
    try:
        for part, ok, detail in _parts(backend, choice):
            rows.append({"part": part, "ok": bool(ok), "detail": detail})
    except Exception as exc:  # noqa: BLE001 - reported as the failing part
        rows.append({"part": "error", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
    with open(out_path, "w") as f:
        json.dump({"choice": choice.describe(), "parts": rows}, f)


if __name__ == "__main__":
    main(sys.argv[1])
