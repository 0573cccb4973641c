"""Load a checkpoint saved on CUDA with every map_location form a CUDA script uses.

    hal run load_checkpoint.py CKPT OUT.json

CKPT's storages carry CUDA location tags (cuda:0 or cuda:1).  The outcome of each form
(device of the loaded tensor and its values, or the error) is written as JSON.
"""
import json
import sys

import torch

FORMS = {
    "none": {},
    "str_cuda": {"map_location": "cuda"},
    "str_cuda_0": {"map_location": "cuda:0"},
    "device_cuda": {"map_location": torch.device("cuda")},
    "dict": {"map_location": {"cuda:1": "cuda:0"}},
    "callable": {"map_location": lambda storage, loc: storage.cuda()},
}


def main():
    path, out = sys.argv[1], sys.argv[2]
    results = {}
    for name, kwargs in FORMS.items():
        try:
            state = torch.load(path, **kwargs)
            w = state["w"]
            results[name] = {"ok": True, "device": str(w.device), "values": w.cpu().tolist()}
        except Exception as exc:
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
