"""Staging of an asynchronous sharded save: DCP's own stagers against hal's HostStage (the baseline).

The state is an FSDP2 model's shards with their AdamW state (one rank, a gloo group in this
process), at two sizes: a small model (about 1.5 MiB) and a training-sized one (``--mb``).  For
each stager: does it accept the configuration on this host, the median time of a save after the
first, whether every save copies into the same host memory, and the ratio to HostStage:

* ``HostStage``: hal's buffers kept between saves (the path for torches without DefaultStager);
* ``DefaultStager``: DCP's, as hal configures it (``hal.checkpoint._dcp.Staging``);
* ``DefaultStager(StagingOptions())``: DCP's defaults (pinned, shared, async, non-blocking);
* ``FileSystemWriter.stage``: what ``async_save`` does without a stager (uncached);
* ``FileSystemWriter(cache_staged_state_dict=True).stage``: its cached form (pins memory).

    python bench/bench_checkpoint_staging.py [--mb 192] [--repeat 5]
"""
import argparse
import statistics
import time
import warnings

import torch
import torch.distributed as dist

from hal.checkpoint import _dcp


def _model_state(width: int):
    from torch.distributed.checkpoint import state_dict as sd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    mesh = init_device_mesh("cpu", (1,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        model(torch.randn(2, width)).sum().backward()
        opt.step()
        opt.zero_grad()

    def state():
        msd, osd = sd.get_state_dict(model, opt)
        return {"model": msd, "optimizer": osd}

    step()
    return step, state


def _stagers():
    from torch.distributed.checkpoint import FileSystemWriter

    out = {"HostStage": lambda: _dcp.HostStage()}
    if _dcp._default_stager(False)[0] is not None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
        out["DefaultStager"] = lambda: _dcp._default_stager(False)[0]
        out["DefaultStager(StagingOptions())"] = lambda: DefaultStager(StagingOptions())
    out["FileSystemWriter.stage"] = lambda: FileSystemWriter("/nonexistent")
    out["FileSystemWriter(cache_staged_state_dict=True).stage"] = \
        lambda: FileSystemWriter("/nonexistent", cache_staged_state_dict=True)
    return out


def _measure(make, step, state, repeat):
    """``(median seconds, same memory every save, refusal or None)``."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            stager = make()
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            return None, None, f"{type(exc).__name__}: {exc}"
        times, ptrs = [], []
        try:
            for _ in range(repeat + 1):
                step()
                st = state()
                t0 = time.perf_counter()
                out = stager.stage(st)
                times.append(time.perf_counter() - t0)
                ptrs.append(sorted(t.data_ptr() for t in _dcp.local_tensors(out)))
                del out
        except Exception as exc:  # noqa: BLE001
            return None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    for w in said:
        print(f"    warned: {str(w.message).strip()[:160]}")
    return statistics.median(times[1:]), all(p == ptrs[0] for p in ptrs), None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=192, help="training-sized state in MiB (weights + AdamW state)")
    p.add_argument("--repeat", type=int, default=5, help="saves measured after the first")
    args = p.parse_args()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        print(f"torch {torch.__version__}, accelerator available: {torch.accelerator.is_available()}")
        big = int((args.mb * 2 ** 20 / 4 / 3 / 4) ** 0.5)  # 4 layers, weights + 2 AdamW tensors, float32
        for width in (128, big):
            step, state = _model_state(width)
            nbytes = sum(t.numel() * t.element_size() for t in _dcp.local_tensors(state()))
            print(f"\n{nbytes / 2 ** 20:.1f} MiB of shards and AdamW state (4 x Linear({width}, {width}))")
            base = None
            for name, make in _stagers().items():
                med, same, refused = _measure(make, step, state, args.repeat)
                if refused:
                    print(f"  {name:55s} refused: {refused}")
                    continue
                base = base or med
                print(f"  {name:55s} {med * 1e3:8.2f} ms  {med / base:5.2f}x HostStage  "
                      f"same host memory every save: {same}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
