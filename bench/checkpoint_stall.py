"""Training-loop stall per checkpoint, and save throughput, against named baselines.

Baselines measured in the same run, on the same ~200 MB state, in the same folder:

* stall: ``torch.save(state) + fsync`` (synchronous, what most loops do) vs
  ``hal.checkpoint.save`` (synchronous) vs ``hal.checkpoint.Checkpointer.save`` (async:
  the loop waits only for the host snapshot);
* throughput: a raw file write + fsync of the same tensor bytes vs ``hal.checkpoint.save``
  (which also hashes every byte, writes JSON state, a manifest and the ``latest`` pointer);
* interference: median training-step time while an async write runs vs without.

    python bench/checkpoint_stall.py [--mb 200] [--repeat 3] [--dir /tmp]
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


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=200, help="state size in MiB (float32 weights)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    args = p.parse_args()

    torch.manual_seed(0)
    width = 2048
    layers = max(1, args.mb * 2**20 // (4 * width * width))
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    work = tempfile.mkdtemp(prefix="hal-ckpt-bench-", dir=args.dir)
    print(f"state: {layers} x Linear({width},{width}) = {nbytes / 2**20:.0f} MiB float32; folder {work}")
    print(f"machine: {os.cpu_count()} CPU(s), torch {torch.__version__}, {torch.get_num_threads()} threads")

    def torch_save():
        f = os.path.join(work, "torch.pt")
        torch.save(model.state_dict(), f)
        _fsync_path(f)

    raw = b"".join(t.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
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
    stalls, commits = [], []
    for i in range(args.repeat):
        t0 = time.perf_counter()
        saver.save(i + 1, model=model)
        stalls.append(saver.last_stall_s)
        saver.wait()
        commits.append(time.perf_counter() - t0)
    async_stall, async_commit = statistics.median(stalls), statistics.median(commits)

    t_torch = timed(torch_save, args.repeat)
    t_raw = timed(raw_write, args.repeat)
    t_hal = timed(hal_sync, args.repeat)

    # interference: a small training step, alone and while an async write runs
    x = torch.randn(256, width)
    probe = nn.Linear(width, width)

    def train_step():
        t0 = time.perf_counter()
        probe(x).sum().backward()
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
