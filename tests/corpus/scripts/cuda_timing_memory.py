"""Benchmark-style training loop: device info, CUDA event timing and memory reports.

Prints `torch.cuda.get_device_name(0)` and `get_device_properties(0)` (name,
total_memory), times steps with `torch.cuda.Event(enable_timing=True)` +
`elapsed_time` after `torch.cuda.synchronize()`, reports `memory_allocated`,
`max_memory_allocated` after `reset_peak_memory_stats`, calls `empty_cache`; falls back
to `time.perf_counter` on the CPU. AdamW is `fused=use_cuda`.
"""
import argparse
import time

import torch
import torch.nn as nn


def mb(n):
    return n / (1024 ** 2)


class MLP(nn.Module):
    def __init__(self, d_in=64, hidden=128, d_out=10, depth=3):
        super().__init__()
        layers = [nn.Linear(d_in, hidden), nn.GELU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.GELU()]
        layers.append(nn.Linear(hidden, d_out))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def main():
    parser = argparse.ArgumentParser(description="training throughput / memory benchmark")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    if use_cuda:
        print(f"Using GPU: {torch.cuda.get_device_name(0)}")
        props = torch.cuda.get_device_properties(0)
        print(f"  name={props.name} total_memory={props.total_memory / 1024 ** 3:.1f} GiB "
              f"capability={props.major}.{props.minor} SMs={props.multi_processor_count}")
        print(f"  device_count={torch.cuda.device_count()} current_device={torch.cuda.current_device()}")
    else:
        print("Using CPU")

    model = MLP().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=use_cuda)
    criterion = nn.CrossEntropyLoss()

    g = torch.Generator().manual_seed(1)
    inputs = torch.randn(args.steps, args.batch_size, 64, generator=g)
    targets = inputs[..., :10].argmax(-1)  # a learnable labelling

    if use_cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        print(f"memory allocated before training: {mb(torch.cuda.memory_allocated()):.2f} MiB")

    times_ms = []
    for step in range(args.steps):
        x = inputs[step].to(device)
        y = targets[step].to(device)
        if use_cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()

        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

        if use_cuda:
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            elapsed = (time.perf_counter() - t0) * 1000.0
        if step >= args.warmup:
            times_ms.append(elapsed)
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step:3d} loss {loss.item():.6f} time {elapsed:.2f} ms")

    mean_ms = sum(times_ms) / max(1, len(times_ms))
    print(f"mean step time {mean_ms:.3f} ms, throughput {args.batch_size / (mean_ms / 1000):.0f} samples/s")
    if use_cuda:
        print(f"memory allocated: {mb(torch.cuda.memory_allocated()):.2f} MiB, "
              f"peak: {mb(torch.cuda.max_memory_allocated()):.2f} MiB, "
              f"reserved: {mb(torch.cuda.memory_reserved()):.2f} MiB")
        del x, y, loss
        torch.cuda.empty_cache()
        print(f"after empty_cache reserved: {mb(torch.cuda.memory_reserved()):.2f} MiB")


if __name__ == "__main__":
    main()
