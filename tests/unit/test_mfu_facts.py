"""What MFU is made of: each device's dense peak FLOP/s per dtype (backend.json ``peak_flops``, read by
``hal.plugin.facts.builtin_peak_flops``), and the device's name and the dtype of the counted step's matrix
products that the attached metrics record (``hal run --metrics`` with ``HAL_METRICS_FLOPS=1``)."""
import json
from pathlib import Path

import pytest
import torch

from hal import metrics
from hal.metrics import AttachedMetrics
from hal.plugin.facts import backend_facts, backend_folders, builtin_peak_flops, flops_dtype
from hal.plugin.registry import selected_backend


def test_a_known_device_gives_its_sourced_dense_figure():
    h100 = builtin_peak_flops("cuda", "NVIDIA H100 80GB HBM3", torch.bfloat16)
    assert h100.flops == pytest.approx(989.4e12) and h100.device == "H100 SXM5 80GB" and not h100.why
    assert h100.source.startswith("https://www.nvidia.com/")
    assert builtin_peak_flops("cuda", "NVIDIA H100 PCIe", "bf16").flops == pytest.approx(756.5e12)
    assert builtin_peak_flops("cuda", "NVIDIA A100-SXM4-40GB", "tf32").flops == pytest.approx(156e12)
    assert builtin_peak_flops("cuda", "NVIDIA A100-PCIE-40GB", torch.float32).flops == pytest.approx(19.5e12)
    assert [flops_dtype(d) for d in (torch.float16, "fp32", torch.float8_e5m2, "torch.bfloat16")] == \
        ["float16", "float32", "float8", "bfloat16"]


def test_an_unknown_device_or_dtype_gives_none_with_the_missing_fact():
    t4 = builtin_peak_flops("cuda", "Tesla T4", torch.float16)
    assert t4.flops is None and "no peak FLOPs fact for 'Tesla T4' in backends/cuda/backend.json" in t4.why
    fp8 = builtin_peak_flops("cuda", "NVIDIA A100-SXM4-80GB", torch.float8_e4m3fn)
    assert fp8.flops is None and "gives A100 (40GB and 80GB, SXM4 and PCIe) no float8 figure" in fp8.why
    # the H200 NVL is a lower-power card: not given the H200 SXM's peak
    assert builtin_peak_flops("cuda", "NVIDIA H200 NVL", "bfloat16").flops is None
    emu = builtin_peak_flops("emu", "hal emulated accelerator 0 (host memory)", "float32")
    assert emu.flops is None and "backends/emu/backend.json holds no peak FLOPs" in emu.why
    assert "device's name is unknown" in builtin_peak_flops("cuda", None, "bfloat16").why
    assert "dtype the matrix products ran in is unknown" in builtin_peak_flops("cuda", "NVIDIA H100 PCIe", None).why
    assert "'tpu9000' is not a built-in backend" in builtin_peak_flops("tpu9000", "TPU", "bfloat16").why


def test_each_listed_device_name_finds_its_own_entry():
    # patterns of one entry must not take another's device (the first match wins)
    for backend in backend_folders():
        for entry in backend_facts(backend).get("peak_flops", []):
            for name in (n for n in entry["device_names"] if not set(n) & set("*?[")):
                assert builtin_peak_flops(backend, name, next(iter(entry["dense_tflops"]))).device == entry["device"]


def _train(steps=3, autocast=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(4, 6), torch.randn(4, 1)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(x)
        torch.nn.functional.mse_loss(out.float(), y).backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("autocast, precision, dtype", [(False, "highest", "float32"), (True, "highest", "bfloat16"),
                                                        (False, "high", "tf32")])
def test_the_counted_step_names_its_compute_dtype_and_every_record_the_device(tmp_path, autocast, precision, dtype):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    attached = AttachedMetrics(tmp_path, "run", flops=True).install()
    try:
        _train(autocast=autocast)  # float32 parameters; under autocast their products run in bfloat16
    finally:
        attached.close()
        torch.set_float32_matmul_precision(before)
    recs = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [r.get("compute_dtype") for r in recs] == [None, dtype, None]  # the second step is the counted one
    assert all(r["scalars"]["loss"] > 0 for r in recs)  # the counted step's loss is the script's as well
    assert {r["device_name"] for r in recs} == {selected_backend().device_name()}
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path(metrics.schema_path()).read_text())
    for r in recs:
        jsonschema.validate(r, schema)
