"""How much `import hal` adds to `import torch` (baseline: `import torch` alone).

Each figure is the median of fresh interpreter runs, measured side by side in one run.
Usage: python bench/bench_import.py [--runs 7]
"""
import argparse
import statistics
import subprocess
import sys
import time


def timed(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    timed("import torch")  # warm the page cache
    torch_t, hal_t, first_t = [], [], []
    for _ in range(a.runs):
        torch_t.append(timed("import torch"))
        hal_t.append(timed("import torch, hal"))
        first_t.append(timed("import torch, hal; hal.device()"))
    base, med, first = (statistics.median(x) for x in (torch_t, hal_t, first_t))
    print(f"import torch              median {base * 1e3:8.1f} ms   (baseline)")
    print(f"import torch, hal         median {med * 1e3:8.1f} ms   ratio {med / base:.3f}")
    print(f"... + hal.device() probe  median {first * 1e3:8.1f} ms   ratio {first / base:.3f}")


if __name__ == "__main__":
    main()
