"""CUDA idioms from training scripts, each run on its own and its outcome written as JSON.

    HAL_BACKEND=cpu hal run idioms.py OUT.json [IDIOM ...]

Written for CUDA and nothing else: run under ``hal run`` it exercises the shim as a user's
script does.  tests/dist/test_hal_run_idioms.py asserts what each outcome must be.
"""
import json
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IDIOMS = {}


def idiom(fn):
    IDIOMS[fn.__name__] = fn
    return fn


@idiom
def torch_device_two_args():
    d = torch.device("cuda", 0)
    return {"device": str(d), "tensor": torch.ones(2, device=d).device.type}


@idiom
def data_parallel():
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    w, b = m.weight.detach().clone(), m.bias.detach().clone()
    dp = nn.DataParallel(m).cuda()
    x = torch.randn(3, 4)
    out = dp(x.cuda())
    return {"out": out.device.type, "param": next(dp.parameters()).device.type,
            "matches": bool(torch.allclose(out.cpu(), x @ w.T + b, atol=1e-6)),
            "state_dict_prefix": next(iter(dp.state_dict())).split(".")[0]}


@idiom
def device_count_gate():
    return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "current": torch.cuda.current_device()}


@idiom
def get_device_name():
    return torch.cuda.get_device_name(0)


@idiom
def get_device_properties():
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "total_memory": p.total_memory, "major": p.major, "minor": p.minor,
            "multi_processor_count": p.multi_processor_count}


@idiom
def event_elapsed_time():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    x = torch.randn(64, 64, device="cuda")
    start.record()
    time.sleep(0.05)
    x = x @ x
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


@idiom
def stream_and_wait_stream():
    s = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    with torch.cuda.stream(s):
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    y.record_stream(torch.cuda.current_stream())
    return {"sum": float(y.sum()), "device": y.device.type}


@idiom
def peak_memory():
    torch.cuda.reset_peak_memory_stats()
    x = torch.empty(1 << 20, device="cuda")  # 4 MiB
    return {"peak": torch.cuda.max_memory_allocated(), "allocated": torch.cuda.memory_allocated(),
            "x": x.device.type}


@idiom
def generator_on_cuda():
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    a = torch.randn(3, generator=g, device="cuda")
    g.manual_seed(0)
    b = torch.randn(3, generator=g, device="cuda")
    return {"tensor": a.device.type, "generator": g.device.type, "same": bool(torch.equal(a, b)),
            "isinstance": isinstance(g, torch.Generator)}


@idiom
def amp_deprecated_namespace():
    m = nn.Linear(8, 8).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast():
        y = m(torch.randn(4, 8).cuda())
    scaler.scale(y.float().pow(2).mean()).backward()
    scaler.step(opt)
    scaler.update()
    return {"dtype": str(y.dtype), "scale": float(scaler.get_scale())}


@idiom
def cudnn_benchmark():
    torch.backends.cudnn.benchmark = True
    conv = nn.Conv2d(3, 4, 3).cuda()
    return conv(torch.randn(1, 3, 8, 8).cuda()).device.type


@idiom
def compile_model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    x = torch.randn(4, 8).cuda()
    out = torch.compile(m)(x)
    return {"device": out.device.type, "matches": bool(torch.allclose(out, m(x), atol=1e-5))}


@idiom
def is_cuda_gate():
    model = nn.Linear(4, 2).cuda()
    x = torch.randn(3, 4)
    if next(model.parameters()).is_cuda:
        x = x.cuda(non_blocking=True)
    return {"is_cuda": next(model.parameters()).is_cuda, "out": model(x).device.type}


@idiom
def cuda_non_blocking():
    return torch.randn(2).cuda(non_blocking=True).device.type


@idiom
def empty_cache():
    torch.cuda.empty_cache()
    return True


@idiom
def cuda_device_context():
    with torch.cuda.device(0):
        return {"current": torch.cuda.current_device(), "tensor": torch.zeros(1, device="cuda").device.type}


@idiom
def set_device_local_rank():
    torch.cuda.set_device(0)
    return {"current": torch.cuda.current_device(), "tensor": torch.zeros(1).to(0).device.type}


@idiom
def legacy_tensor_type():
    t = torch.cuda.FloatTensor(2, 3)
    return {"device": t.device.type, "dtype": str(t.dtype), "isinstance": isinstance(t, torch.cuda.FloatTensor)}


@idiom
def default_device_context():
    with torch.device("cuda"):
        t = torch.zeros(2)
    return t.device.type


@idiom
def accelerator_api():
    acc = torch.accelerator.current_accelerator()
    return {"accelerator": None if acc is None else acc.type, "available": torch.accelerator.is_available(),
            "count": torch.accelerator.device_count()}


@idiom
def accelerator_device_choice():
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    return nn.Linear(2, 2).to(device).weight.device.type


@idiom
def dataloader_pin_memory_workers_and_adam():
    ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loader = DataLoader(ds, batch_size=4, pin_memory=True, num_workers=2)
    m = nn.Linear(4, 1).cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for x, y in loader:
        loss = F.mse_loss(m(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"param": m.weight.device.type, "loss": loss.item()}


def main():
    out, wanted = sys.argv[1], sys.argv[2:]
    results = {}
    for name, fn in IDIOMS.items():
        if wanted and name not in wanted:
            continue
        try:
            results[name] = {"ok": True, "value": fn()}
        except Exception as exc:  # recorded for the test to show
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()[-3000:]}
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
