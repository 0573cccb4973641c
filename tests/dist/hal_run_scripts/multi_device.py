"""Device selection as a multi-GPU CUDA script does it; the outcome is written as JSON.

    hal run multi_device.py OUT.json

Gates on torch.cuda.device_count() >= 4 and then picks devices by index.
"""
import json
import sys

import torch


def main():
    out = sys.argv[1]
    r = {"count": torch.cuda.device_count()}
    if r["count"] < 4:
        with open(out, "w") as f:
            json.dump(r, f)
        sys.exit(f"needs 4 GPUs, found {r['count']}")
    torch.cuda.set_device(2)
    r["current"] = torch.cuda.current_device()
    r["default"] = str(torch.zeros(1, device="cuda").device)
    r["cuda3"] = str(torch.zeros(1, device="cuda:3").device)
    r["index1"] = str(torch.zeros(1).to(1).device)
    with torch.cuda.device(1):
        r["in_context"] = torch.cuda.current_device()
        r["cuda_in_context"] = str(torch.ones(1).cuda().device)
    r["after_context"] = torch.cuda.current_device()
    r["module"] = str(torch.nn.Linear(2, 2).cuda(3).weight.device)
    r["name3"] = torch.cuda.get_device_name(3)
    r["plain"] = type(torch.zeros(1, device="cuda:3")) is torch.Tensor
    with open(out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
