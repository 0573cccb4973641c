"""``op_coverage trace`` and ``op_coverage scan`` of a trace: what a PyTorch program sends to the
device, judged per vendor.

The traced programs are the corpus's CUDA-written training scripts (run unmodified through the
hal run shim on the emulator), the zoo's architectures (a module factory) and a torch.export
file; the judgement uses the bundled vendor op lists.  Each command runs in a fresh process,
as a user runs it.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from op_coverage.datafiles import read_json

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "scripts"
SCHEMA = read_json("torch_trace.schema.json")
pytestmark = pytest.mark.emu


def oc(*args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("HAL_BACKEND", None)
    return subprocess.run([sys.executable, "-m", "op_coverage", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mnist_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "ops.json"
    r = oc("trace", CORPUS / "mnist_cnn.py", "--steps", 2, "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    return out, json.loads(out.read_text()), r.stderr


def test_a_cuda_script_is_traced_unmodified_and_stops_after_its_steps(mnist_trace):
    path, trace, err = mnist_trace
    jsonschema.validate(trace, SCHEMA)
    assert trace["stopped_by"] == "steps" and trace["steps"] == 2 and trace["exit_code"] == 0
    ops = {r["op"]: r for r in trace["ops"]}
    # what a vendor kernel receives: aten overloads after autograd (no nn.functional names)
    for op in ("convolution", "convolution_backward", "max_pool2d_with_indices", "nll_loss_forward",
               "nll_loss_backward", "addmm", "native_dropout"):
        assert ops[op]["count"] > 0, op
    assert "linear" not in ops and "dropout" not in ops  # CompositeImplicitAutograd: decomposed above the device
    assert ops["convolution_backward"]["phases"]["backward"] == ops["convolution_backward"]["count"]
    assert ops["convolution"]["phases"]["forward"] == ops["convolution"]["count"] == 4  # 2 convs x 2 steps
    assert ops["convolution"]["first_frame"].endswith("mnist_cnn.py:44")  # x = self.conv1(x)
    # the backward op names the forward line that made its autograd node
    assert ops["convolution_backward"]["first_frame"].endswith("(backward of ConvolutionBackward0)")
    assert "mnist_cnn.py:4" in ops["convolution_backward"]["first_frame"]
    assert any(r["phases"]["optimizer"] for r in trace["ops"])  # Adam's _foreach_* ops
    assert ops["addmm"]["dtypes"] == ["float32"]
    # nested calls are kept apart from the program's calls: copy_ runs _copy_from on a PrivateUse1 device
    assert ops["_copy_from"]["count"] == 0 and ops["_copy_from"]["parents"] == {"copy_": ops["_copy_from"]["nested"]}
    assert "2 optimizer step(s)" in err
    # a trace never holds tensor data: names, counts, dtypes and places only
    assert {k for r in trace["ops"] for k in r} <= {"op", "count", "nested", "parents", "dtypes", "phases",
                                                    "first_frame"}


def test_scan_of_a_trace_judges_each_op_per_vendor(mnist_trace, tmp_path):
    path, trace, _ = mnist_trace
    r = oc("scan", path, "-t", "ascend,musa,xpu", "--json")
    report = json.loads(r.stdout)
    jsonschema.Draft202012Validator(read_json("report.schema.json")).validate(report)  # the scan's published format
    ops = {o["op_type"]: o for o in report["models"][0]["ops"]}
    assert set(report["targets"]) == {"ascend-2.13", "musa-2.7", "xpu-2.13"}
    # musa's list is for torch 2.7: the skew is named
    assert any("skew" in w and "musa" in w for w in report["models"][0]["warnings"])
    assert ops["addmm"]["support"]["ascend-2.13"]["torch_status"] == "native"
    # a PrivateUse1-only op on an in-tree backend is judged at its parent
    assert ops["_copy_from"]["support"]["xpu-2.13"]["via"] == "parent:copy_"
    assert r.returncode == {0: 0, 3: 3, 4: 4}[report["exit_code"]]
    for fmt in ("table", "csv", "md", "html"):
        out = tmp_path / f"r.{fmt}"
        r = oc("scan", path, "-t", "ascend", "--format", fmt, "-o", out)
        assert r.returncode in (0, 3, 4) and "convolution" in out.read_text(), (fmt, r.stderr)


def _trace_with(tmp_path, ops):
    trace = {"schema": "op_coverage.torch_trace/1", "torch_version": "2.13.0", "source": {"kind": "script",
             "target": "train.py"}, "steps": 1, "seconds": 0.1, "stopped_by": "end",
             "ops": [{"op": op, "count": 3, "nested": 0, "dtypes": ["float32"],
                      "phases": {"forward": 3, "backward": 0, "optimizer": 0}, "first_frame": "train.py:7"}
                     for op in ops]}
    jsonschema.validate(trace, SCHEMA)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    return p


def test_exit_codes_follow_what_the_vendor_does_with_a_missing_op(tmp_path):
    # _logcumsumexp: MUSA has no kernel and raises; Ascend 2.13 runs it through its CPU fallback
    p = _trace_with(tmp_path, ["add.Tensor", "_logcumsumexp"])
    musa = oc("scan", p, "-t", "musa", "--json")
    ascend = oc("scan", p, "-t", "ascend-2.7", "--json")
    for r in (musa, ascend):  # with plans of missing ops, in the published format
        jsonschema.Draft202012Validator(read_json("report.schema.json")).validate(json.loads(r.stdout))
    assert musa.returncode == 4, musa.stderr
    row = {o["op_type"]: o for o in json.loads(musa.stdout)["models"][0]["ops"]}["_logcumsumexp"]
    assert row["support"]["musa-2.7"]["behaviour"] == "error"
    assert row["locations"][0]["node"] == "train.py:7"  # where in the user's code
    assert ascend.returncode == 3, ascend.stderr
    assert oc("scan", p, "-t", "musa", "--fail-on", "never").returncode == 0
    assert oc("scan", _trace_with(tmp_path, ["add.Tensor", "mm"]), "-t", "musa").returncode == 0


def test_bad_traces_get_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "op_coverage.torch_trace/1", "ops": 3}')
    r = oc("scan", bad, "-t", "ascend")
    assert r.returncode == 18 and "'ops' is not a list" in r.stderr and "Traceback" not in r.stderr
    r = oc("trace", tmp_path / "missing.py")
    assert r.returncode == 10 and "no such file" in r.stderr
    r = oc("scan", _trace_with(tmp_path, ["mm"]), "-t", "nosuchvendor")
    assert r.returncode == 16 and "ascend" in r.stderr


def test_seconds_stop_a_script_without_optimizer_and_a_failing_script_keeps_its_trace(tmp_path):
    loop = tmp_path / "loop.py"
    loop.write_text(textwrap.dedent("""
        import torch
        x = torch.ones(4, device="cuda")
        while True:
            x = torch.relu(x - 1) + 1
    """))
    r = oc("trace", loop, "--seconds", 3, "-o", tmp_path / "loop.json", "--timeout", 120)
    trace = json.loads((tmp_path / "loop.json").read_text())
    assert r.returncode == 0 and trace["stopped_by"] == "seconds", r.stderr[-2000:]
    assert {"relu", "sub.Tensor", "add.Tensor"} <= {o["op"] for o in trace["ops"] if o["count"]}
    fails = tmp_path / "fails.py"
    fails.write_text("import torch\nx = torch.ones(3).cuda()\ny = torch.cumsum(x, 0)\nraise ValueError('boom')\n")
    r = oc("trace", fails, "-o", tmp_path / "fails.json")
    trace = json.loads((tmp_path / "fails.json").read_text())
    assert r.returncode == 1 and "ValueError: boom" in trace["error"]
    assert "cumsum" in {o["op"] for o in trace["ops"]}


@pytest.mark.long  # about 15 s on 2 cores: make long
def test_a_module_factory_and_a_torch_export_file(tmp_path):
    r = oc("trace", "tests.torch_zoo.models:cnn_bn", "-o", tmp_path / "f.json", cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    trace = json.loads((tmp_path / "f.json").read_text())
    ops = {o["op"]: o for o in trace["ops"] if o["count"]}
    assert trace["steps"] == 1 and ops["native_batch_norm"]["count"] == ops["native_batch_norm_backward"]["count"]
    assert any(o["phases"]["optimizer"] for o in ops.values())
    script = tmp_path / "export.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
        ep = torch.export.export(m, (torch.randn(2, 4),))
        torch.export.save(ep, {str(tmp_path / 'm.pt2')!r})
    """))
    subprocess.run([sys.executable, str(script)], check=True, timeout=300)
    r = oc("trace", tmp_path / "m.pt2", "-o", tmp_path / "e.json")
    assert r.returncode == 0, r.stderr[-2000:]
    ops = {o["op"] for o in json.loads((tmp_path / "e.json").read_text())["ops"] if o["count"]}
    assert {"addmm", "gelu", "native_layer_norm"} <= ops and "native_layer_norm_backward" not in ops


def test_a_script_written_for_torchrun_is_traced_as_a_one_rank_job(tmp_path):
    # env:// rendezvous needs RANK, WORLD_SIZE, MASTER_ADDR...: the trace sets them as
    # torchrun --nproc-per-node 1 would, so DDP scripts trace without a launcher
    out = tmp_path / "ddp.json"
    r = oc("trace", CORPUS / "ddp_torchrun_basic.py", "--steps", 2, "-o", out, "--quiet")
    trace = json.loads(out.read_text())
    assert r.returncode == 0 and trace["error"] is None, r.stderr[-2000:]
    assert trace["steps"] == 2 and {"addmm", "mse_loss"} <= {o["op"] for o in trace["ops"] if o["count"]}


def test_collectives_and_custom_ops_are_named_not_judged(tmp_path):
    r = oc("scan", _trace_with(tmp_path, ["mm", "c10d::allreduce_", "mylib::fused_rope"]), "-t", "musa", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 0 and [o["op_type"] for o in report["models"][0]["ops"]] == ["mm"]
    assert any("not judged" in w and "c10d::allreduce_" in w and "mylib::fused_rope" in w
               for w in report["models"][0]["warnings"])


@pytest.mark.long  # make long
def test_scan_of_a_script_traces_it_then_judges_it_and_a_run_past_its_timeout_is_one_line(tmp_path):
    r = oc("scan", CORPUS / "mnist_cnn.py", "-t", "ascend,musa", "--steps", 1, "--json")
    report = json.loads(r.stdout)
    assert r.returncode == report["exit_code"] == 0, r.stderr[-2000:]
    assert "1 optimizer step(s)" in r.stderr and report["targets"] == ["ascend-2.13", "musa-2.7"]
    assert {"convolution", "convolution_backward"} <= {o["op_type"] for o in report["models"][0]["ops"]}
    loop = tmp_path / "forever.py"
    loop.write_text("import torch\nx = torch.ones(4, device='cuda')\nwhile True:\n    x = x + 1\n")
    r = oc("trace", loop, "--timeout", 20, "--quiet")
    assert r.returncode == 19 and "did not end within 20 s" in r.stderr and "--steps" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_factory_that_fails_keeps_its_trace_and_one_that_cannot_be_imported_is_one_line(tmp_path):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent("""
        import torch
        class Broken(torch.nn.Module):
            def forward(self, x):
                torch.relu(x)
                raise RuntimeError("shape bug in my model")
        def broken():
            return Broken(), torch.randn(3)   # no parameters: no optimizer step to take
    """))
    r = oc("trace", "mymodels:broken", "-o", tmp_path / "b.json", cwd=tmp_path)
    trace = json.loads((tmp_path / "b.json").read_text())
    assert r.returncode == 1 and trace["error"] == "RuntimeError: shape bug in my model"
    assert "relu" in {o["op"] for o in trace["ops"] if o["count"]}
    r = oc("trace", "nosuchmodule:build", cwd=tmp_path)
    assert r.returncode == 10 and "cannot import the factory" in r.stderr and "Traceback" not in r.stderr
