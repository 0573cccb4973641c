"""MFU in hal accept's throughput section: the achieved FLOP/s over the peak of the devices a run used, for the
dtype its matrix products ran in, from the backend's facts (backend.json ``peak_flops``); null with the missing
fact where there is none (the emulator's and the CPU's runs here)."""
import json
from pathlib import Path

import pytest
import torch

from hal.metrics import AttachedMetrics
from hal_accept import AcceptOptions, Target, terminal, to_html
from hal_accept.accept import mfu, throughput
from hal_accept.runs import Run

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "hal_accept" / "accept.schema.json").read_text())


def _records(backend, device, device_name, host="node0", flops=None, dtype=None, rank=0, steps=4, step_time=0.5):
    out = []
    for step in range(1, steps + 1):
        rec = {"schema": "hal.metrics/1", "run": "run", "rank": rank, "host": host, "backend": backend,
               "device": device, "device_name": device_name, "step": step,
               "step_time_s": None if step == 1 else step_time, "samples": 32,
               "samples_per_s": None if step == 1 else 32 / step_time, "tokens": None, "tokens_per_s": None,
               "mem_peak_bytes": 1 << 30, "scalars": {"loss": 1.0 / step}}
        if step == 2:  # the counted step
            rec["scalars"]["flops"] = flops
            if dtype:
                rec["compute_dtype"] = dtype
        out.append(rec)
    return out


def _run(target, label, records):
    return Run(target, label, ["hal", "run", "train.py"], {}, 0, 3.0, None, records)


def test_mfu_is_the_achieved_flops_over_the_peak_of_every_device_used():
    # two ranks on two H100 SXM, bfloat16 products: 2e14 FLOP per rank per step in 0.5 s
    ref = _run(Target("cuda"), "reference",
               [_records("cuda", f"cuda:{i}", "NVIDIA H100 80GB HBM3", flops=2e14, dtype="bfloat16", rank=i)
                for i in range(2)])
    emu = _run(Target("emu"), "target-emu",
               [_records("emu", "emu:0", "hal emulated accelerator 0 (host memory)", flops=2e9, dtype="float32")])
    options = AcceptOptions("train.py", reference=Target("cuda"), targets=(Target("emu"),), steps=4)
    section = throughput(options, {"reference": ref, "emu": emu})
    r = section["reference_mfu"]
    assert r["mfu"] == pytest.approx(2 * 2e14 / 0.5 / (2 * 989.4e12))  # about 40%
    assert (r["devices"], r["compute_dtype"], r["device_name"], r["peak_device"]) == \
        (2, "bfloat16", "NVIDIA H100 80GB HBM3", "H100 SXM5 80GB")
    assert r["peak_source"] == "https://www.nvidia.com/en-us/data-center/h100/" and r["mfu_why"] is None
    e = section["targets"]["emu"]
    assert e["mfu"] is None and "backends/emu/backend.json holds no peak FLOPs" in e["mfu_why"]
    assert e["achieved_flops_per_s"] == pytest.approx(4e9)  # measured all the same
    assert "MFU reference 40.4%" in section["summary"]
    # the report shows it: the terminal lines, the HTML table, and the JSON follows the schema
    report = {"schema": "hal.accept/1", "created": "2026-12-07T00:00:00+00:00", "script": "train.py",
              "script_args": [], "reference": "cuda", "targets": ["emu"], "nproc_per_node": 2, "steps": 4,
              "verdict": "accepted", "exit_code": 0, "gates": [],
              "sections": {k: {"verdict": "not_checked", "summary": ""} for k in
                           ("code_changes", "operators", "numerics", "stability", "inference", "environment")},
              "runs": {n: run.summary() for n, run in (("reference", ref), ("emu", emu))}}
    report["sections"]["throughput"] = section
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(json.dumps(report)), SCHEMA)
    lines = terminal(report)
    assert "reference: MFU 40.4% of 2 x H100 SXM5 80GB's dense bfloat16 peak (989.4 TFLOP/s each" in lines
    assert "emu: MFU unknown: backends/emu/backend.json holds no peak FLOPs of any emu device" in lines
    page = to_html(report)
    assert "<th>MFU</th>" in page and "MFU reference: 40.4%" in page


def test_a_missing_fact_is_named():
    h100 = _records("cuda", "cuda:0", "NVIDIA H100 80GB HBM3", flops=1e14)  # no compute dtype recorded
    assert "dtype the matrix products ran in is unknown" in \
        mfu("cuda", _run(Target("cuda"), "r", [h100]).throughput())["mfu_why"]
    old = [{k: v for k, v in r.items() if k != "device_name"} for r in h100]  # records of an older hal
    assert "device's name is unknown" in mfu("cuda", _run(Target("cuda"), "r", [old]).throughput())["mfu_why"]
    assert "did not finish" in mfu("cuda", None)["mfu_why"]
    no_flops = _records("cuda", "cuda:0", "NVIDIA H100 80GB HBM3", dtype="bfloat16")
    assert "no floating-point operations were counted" in \
        mfu("cuda", _run(Target("cuda"), "r", [no_flops]).throughput())["mfu_why"]


def test_a_real_cpu_run_measures_flops_and_says_why_its_mfu_is_unknown(tmp_path):
    attached = AttachedMetrics(tmp_path, "run", flops=True).install()
    try:
        model = torch.nn.Linear(16, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(32, 16)
        for _ in range(3):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    finally:
        attached.close()
    records = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    tp = _run(Target("cpu"), "reference", [records]).throughput()
    m = mfu("cpu", tp)
    assert tp["achieved_flops_per_s"] > 0 and m["compute_dtype"] == "float32" and m["device_name"]
    assert m["mfu"] is None and m["mfu_why"] == "backends/cpu/backend.json holds no peak FLOPs of any cpu device"
