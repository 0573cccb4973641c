"""One rank of the conformance CCL check (``python -m hal.conformance._ccl_worker OUT [IDS]``).

Initialises torch.distributed the way a training job does on the selected backend
(``cpu:gloo,<device>:<ccl>``, ``device_id=`` for an accelerator; gloo groups serving
``ReduceOp.PREMUL_SUM`` as under ``hal run`` and ``hal.dist.init()``), builds a gloo group over
the same ranks for the ground truth, runs every op of :data:`CCL_OPS` (or the comma-separated
``IDS``) on both and appends one JSON line per op to ``OUT`` as soon as it is done, so a
hung op is named by the lines that are missing.
"""
import datetime
import json
import os
import sys
import time
import traceback
import warnings

#: seconds a single collective may block before gloo (and a CCL honouring the timeout) raises
ENV_OP_TIMEOUT = "HAL_CONFORMANCE_OP_TIMEOUT"


def _error(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                  if "torch" not in f.filename and "_ccl_ops" not in f.filename), "")
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:400]}" + (f" (at {where})" if where else "")


def main(out_path: str, ids=None) -> None:
    import torch
    import torch.distributed as dist

    from hal.conformance._ccl_ops import CCL_OPS, OpSkip, Side, disagreement, reference_group
    from hal.dist import premul_sum, register_plugin_ccl
    from hal.plugin.registry import selected_backend

    b = selected_backend()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    timeout = datetime.timedelta(seconds=float(os.environ.get(ENV_OP_TIMEOUT, "60")))
    kwargs = {}
    if b.device_type == "cpu" or not b.spec.dist_backend:
        backend, dev = "gloo", torch.device("cpu")
    else:
        register_plugin_ccl()  # the path hal.dist.init takes
        backend = f"cpu:gloo,{b.device_type}:{b.spec.dist_backend}"
        b.set_device(local % b.device_count())
        dev = b.device()
        kwargs["device_id"] = dev
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **kwargs)
    premul_sum.install(premul_sum.INSTALLED.patch)
    gloo = reference_group(timeout=timeout)
    sides = (Side(dev, False, dist.group.WORLD, rank, world, kwargs.get("device_id")),
             Side(torch.device("cpu"), True, gloo, rank, world, kwargs.get("device_id")))
    with open(out_path, "w") as f:
        f.write(json.dumps({"rank": rank, "backend": str(dist.get_backend()), "device": str(dev)}) + "\n")
        f.flush()
        for oid, used_by, fn in CCL_OPS:
            if ids and oid not in ids:
                continue
            row = {"id": oid}
            t0 = time.perf_counter()
            results = []
            for side in sides:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        results.append(fn(side))
                except OpSkip as exc:
                    results.append(exc)
                except Exception as exc:  # noqa: BLE001 - reported per op, the run goes on
                    results.append(exc)
                # an op that raised inside _coalescing_manager leaves its group collecting ops
                dist.distributed_c10d._world.pg_coalesce_state.clear()
            tested, ref = results
            if isinstance(tested, OpSkip):
                row.update(status="skipped", error=str(tested))
            elif isinstance(ref, BaseException):
                row.update(status="failed", error=f"the gloo reference itself failed: {_error(ref)}")
            elif isinstance(tested, BaseException):
                row.update(status="failed", error=_error(tested))
            else:
                diff = disagreement(tested, ref)
                row.update(status="failed" if diff else "ok", error=diff and f"differs from gloo: {diff}")
            if sides[0].note:
                row["note"], sides[0].note = sides[0].note, ""
            row["seconds"] = round(time.perf_counter() - t0, 3)
            f.write(json.dumps(row) + "\n")
            f.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], [s for s in sys.argv[2].split(",") if s] if len(sys.argv) > 2 else None)
