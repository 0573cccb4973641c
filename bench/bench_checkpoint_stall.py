"""Training-loop stall per checkpoint, and save throughput, against named baselines.

Baselines measured in the same run, on the same ~200 MB state, in the same folder:

* stall: ``torch.save(state) + fsync`` (synchronous, what most loops do) vs
  ``hal.checkpoint.save`` (synchronous) vs ``hal.checkpoint.Checkpointer.save`` (async:
  the loop waits only for the host snapshot);
* throughput: a raw file write + fsync of the same tensor bytes vs ``hal.checkpoint.save``
  (which also hashes every byte, writes JSON state, a manifest and the ``latest`` pointer);
* interference: median training-step time while an async write runs vs without.

    python bench/bench_checkpoint_stall.py [--mb 200] [--repeat 3] [--dir /tmp]
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch
from torch import nn

import hal.checkpoint as ckpt


def _fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=200, help="state size in MiB (float32 weights)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    p.add_argument("--device", default="cpu", help="where the state lives (cpu, cuda, npu...); "
                   "the snapshot is then a device-to-host copy")
    args = p.parse_args()

    torch.manual_seed(0)
    width = 2048
    layers = max(1, args.mb * 2**20 // (4 * width * width))
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)]).to(args.device)
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    work = tempfile.mkdtemp(prefix="hal-ckpt-bench-", dir=args.dir)
    print(f"state: {layers} x Linear({width},{width}) = {nbytes / 2**20:.0f} MiB float32; folder {work}")
    print(f"machine: {os.cpu_count()} CPU(s), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"state on {args.device}")

    def torch_save():
        f = os.path.join(work, "torch.pt")
        torch.save(model.state_dict(), f)
        _fsync_path(f)

    raw = b"".join(t.detach().cpu().contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
                   for t in model.state_dict().values())

    def raw_write():
        with open(os.path.join(work, "raw.bin"), "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())

    step = [0]

    def hal_sync():
        step[0] += 1
        ckpt.save(os.path.join(work, "sync"), step[0], model=model, keep_last=1, rng=False)

    saver = ckpt.Checkpointer(os.path.join(work, "async"), keep_last=1)
    times = {"torch": [], "raw": [], "hal": [], "stall": [], "commit": []}

    def async_save():
        t0 = time.perf_counter()
        saver.save(step[0] + 1000, model=model)
        times["stall"].append(saver.last_stall_s)
        saver.wait()
        times["commit"].append(time.perf_counter() - t0)

    # round-robin, each run after os.sync(), so that no method inherits another's dirty pages
    for _ in range(args.repeat):
        for key, fn in (("torch", torch_save), ("raw", raw_write), ("hal", hal_sync), ("async", async_save)):
            os.sync()
            t0 = time.perf_counter()
            fn()
            if key != "async":
                times[key].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    t_torch, t_raw, t_hal = med["torch"], med["raw"], med["hal"]
    async_stall, async_commit = med["stall"], med["commit"]

    # interference: a small training step, alone and while an async write runs
    x = torch.randn(256, width, device=args.device)
    probe = nn.Linear(width, width).to(args.device)
    sync = torch.get_device_module(args.device).synchronize if args.device != "cpu" else (lambda: None)

    def train_step():
        t0 = time.perf_counter()
        probe(x).sum().backward()
        sync()
        return time.perf_counter() - t0

    for _ in range(5):
        train_step()
    alone = statistics.median(train_step() for _ in range(30))
    during = []
    for i in range(args.repeat):
        saver.save(100 + i, model=model)
        while saver.pending:
            during.append(train_step())
        saver.wait()
    during_med = statistics.median(during) if during else float("nan")
    saver.close()

    mb = nbytes / 2**20
    print()
    print("training-loop stall per checkpoint (median of %d):" % args.repeat)
    print(f"  torch.save + fsync (baseline)     {t_torch * 1e3:9.1f} ms")
    print(f"  hal.checkpoint.save (sync)        {t_hal * 1e3:9.1f} ms   ratio vs baseline {t_hal / t_torch:6.2f}x")
    print(f"  Checkpointer.save (async) stall   {async_stall * 1e3:9.1f} ms   ratio vs baseline {async_stall / t_torch:6.3f}x"
          f"   ({t_torch / async_stall:.1f}x shorter stall)")
    print(f"  Checkpointer.save until committed {async_commit * 1e3:9.1f} ms")
    print("save throughput:")
    print(f"  raw write + fsync (baseline)      {mb / t_raw:9.1f} MiB/s")
    print(f"  hal.checkpoint.save (sync)        {mb / t_hal:9.1f} MiB/s   ratio vs baseline {t_raw / t_hal:6.2f}x")
    print("interference of a background write with training:")
    print(f"  train step alone                  {alone * 1e3:9.2f} ms")
    print(f"  train step during async write     {during_med * 1e3:9.2f} ms   ratio {during_med / alone:6.2f}x"
          f"   ({len(during)} steps)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
