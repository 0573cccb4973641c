"""``op_coverage scan train.py --static``: the migration checklist read from the source.

Inline sources cover each rule (finding, line, level); the corpus of CUDA-written training
scripts (tests/corpus) gives the findings real code produces; the CLI tests cover --json
(against the published schema), the other formats and the exit codes.  Nothing here needs
torch: the scan is an AST pass.
"""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from hal.plugin.spec import builtin_spec
from op_coverage.datafiles import read_json
from op_coverage.errors import ScriptNotFound
from op_coverage.report.torch_static import CSV_COLUMNS, render
from op_coverage.torch.static import LEVELS, load_rules, static_scan

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "scripts"


def scan_src(tmp_path, src, name="train.py", **kw):
    p = tmp_path / name
    p.write_text(textwrap.dedent(src).lstrip("\n"), encoding="utf-8")
    return static_scan(p, **kw)


def hits(report, level=None):
    """{(line, rule)} of a report (optionally of one level)."""
    return {(f.line, f.rule) for f in report.findings if level is None or f.level == level}


def only(report, rule):
    [f] = [f for f in report.findings if f.rule == rule]
    return f


# -- aliased imports and third-party CUDA-only libraries --------------------------------------
def test_aliased_imports_resolve(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        import torch.cuda as tc
        from flash_attn import flash_attn_func as f
        g = tc.CUDAGraph()
        out = f(q, k, v, causal=True)
        tc.synchronize()
        with tc.amp.autocast():
            pass
    """)
    assert hits(r) == {(3, "flash-attn"), (4, "cuda-graphs"), (5, "flash-attn")}
    assert all(f.level == "change" for f in r.findings)
    fa = [f for f in r.findings if f.rule == "flash-attn"]
    assert "scaled_dot_product_attention" in fa[0].fix and "transpose(1, 2)" in fa[0].fix
    assert fa[1].what.startswith("`flash_attn.flash_attn_func`")
    assert fa[1].code == "out = f(q, k, v, causal=True)"


def test_third_party_libraries_and_their_replacements(tmp_path):
    r = scan_src(tmp_path, """
        import xformers.ops as xops
        from apex.optimizers import FusedAdam
        from apex.normalization import FusedLayerNorm
        from apex import amp
        import bitsandbytes as bnb
        import deepspeed
        from deepspeed.ops.adam import FusedAdam as DSAdam
        import cupy, pycuda.autoinit
        y = xops.memory_efficient_attention(q, k, v)
        opt = FusedAdam(model.parameters(), lr=1e-3)
        ln = FusedLayerNorm(512)
        model, opt = amp.initialize(model, opt, opt_level="O1")
        opt8 = bnb.optim.Adam8bit(model.parameters())
        lin = bnb.nn.Linear8bitLt(4, 4)
    """)
    assert hits(r) == {(1, "xformers"), (2, "apex-fused-adam"), (3, "apex-fused-norm"), (4, "apex-amp"),
                       (5, "bitsandbytes"), (6, "deepspeed"), (7, "deepspeed-ops"), (8, "cupy"), (8, "pycuda"),
                       (9, "xformers"), (10, "apex-fused-adam"), (11, "apex-fused-norm"), (12, "apex-amp"),
                       (13, "bitsandbytes-optim"), (14, "bitsandbytes")}
    fixes = {f.rule: f.fix for f in r.findings}
    assert "scaled_dot_product_attention" in fixes["xformers"]
    assert "torch.optim.AdamW(params, fused=True)" in fixes["apex-fused-adam"]
    assert "hal.optim" in fixes["apex-fused-adam"]
    assert "torch.nn.LayerNorm" in fixes["apex-fused-norm"]
    assert "torch.autocast" in fixes["apex-amp"]
    assert only(r, "deepspeed").level == "caveat" and "DS_ACCELERATOR=npu|mlu|musa" in only(r, "deepspeed").fix


def test_custom_cuda_extensions_and_triton(tmp_path):
    r = scan_src(tmp_path, """
        from torch.utils.cpp_extension import load, load_inline, CUDAExtension
        import triton
        import triton.language as tl
        m = load(name="m", sources=["m.cpp", "kernel.cu"])
        c = load(name="c", sources=["c.cpp"])
        i = load_inline(name="i", cpp_sources=s, cuda_sources=k)
        j = load_inline(name="j", cpp_sources=s)
        ext = CUDAExtension("x", ["x.cu"])
        v = load(name="v", sources=srcs)

        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            tl.store(x_ptr, tl.load(x_ptr))
    """)
    assert hits(r) == {(2, "triton"), (3, "triton"), (4, "cpp-extension-cuda"), (6, "cpp-extension-cuda"),
                       (8, "cpp-extension-cuda"), (9, "cpp-extension-cuda"), (11, "triton-kernel")}
    assert [f.level for f in r.findings if f.line == 9] == ["caveat"]  # sources unknown: maybe .cu
    assert "load_inline(cuda_sources=...)" in [f for f in r.findings if f.line == 6][0].what


# -- torch.backends, torch.cuda and the shim's limits -------------------------------------------
def test_cudnn_and_cuda_backend_flags(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        import torch.backends.cudnn as cudnn
        torch.backends.cudnn.benchmark = True
        cudnn.deterministic = True
        cudnn.deterministic = False
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cuda.enable_flash_sdp(False)
        if torch.backends.cudnn.version() is None or torch.version.cuda is None:
            pass
    """)
    assert hits(r) == {(3, "cudnn-benchmark"), (4, "cudnn-deterministic"), (6, "cudnn-benchmark"),
                       (7, "cuda-backend-flags"), (8, "cudnn-query"), (8, "torch-version-cuda")}
    assert hits(r, "ok") == {(3, "cudnn-benchmark"), (6, "cudnn-benchmark")}
    assert "use_deterministic_algorithms" in only(r, "cudnn-deterministic").fix


def test_not_redirected_torch_cuda_calls(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        from torch import nn
        torch.cuda.is_available(); torch.cuda.max_memory_allocated(); x = torch.cuda.FloatTensor(2)
        torch.cuda.comm.broadcast(t, [0, 1])
        fn = torch.cuda.jiterator._create_jit_fn(code)
        u = torch.cuda.utilization()
        torch.cuda.nvtx.range_push("step")
        torch.cuda.set_per_process_memory_fraction(0.5)
        bf16 = torch.cuda.get_device_capability()[0] >= 8
        torch.cuda.some_new_cuda_call()
        try:
            pass
        except torch.cuda.OutOfMemoryError:
            pass
        y = torch.nn.parallel.data_parallel(model, x, [0, 1])
        dp = nn.DataParallel(model)
        cm = torch.compile(model)
        with torch.random.fork_rng():
            pass
        with torch.random.fork_rng(device_type="npu"):
            pass
        on = torch.is_autocast_enabled()
        on2 = torch.is_autocast_enabled("cuda")
    """)
    assert hits(r) == {(4, "cuda-comm"), (5, "cuda-jiterator"), (6, "cuda-nvml"), (7, "cuda-nvtx"),
                       (8, "cuda-no-op"), (9, "cuda-capability"), (10, "torch-cuda-other"), (13, "cuda-oom-error"),
                       (15, "data-parallel-functional"), (16, "data-parallel"), (17, "torch-compile"),
                       (18, "fork-rng-cuda"), (22, "autocast-enabled-noarg")}
    assert hits(r, "change") == {(4, "cuda-comm"), (5, "cuda-jiterator"), (6, "cuda-nvml"),
                                 (10, "torch-cuda-other"), (15, "data-parallel-functional"),
                                 (18, "fork-rng-cuda"), (22, "autocast-enabled-noarg")}
    assert "is_bf16_supported" in only(r, "cuda-capability").fix


def test_tensor_device_comparisons(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        device = torch.device("cuda")
        if x.device == torch.device("cuda"):
            pass
        if next(model.parameters()).device.type == "cuda":
            pass
        if str(x.device).startswith("cuda"):
            pass
        dev = x.device
        if dev.type == "cuda":
            pass
        if device.type == "cuda" or args.device == "cuda" or self.device.type == "cuda":
            pass
        if x.type() == "torch.cuda.FloatTensor":
            pass
    """)
    assert hits(r) == {(3, "tensor-device-compare"), (5, "tensor-device-compare"), (7, "tensor-device-compare"),
                       (10, "tensor-device-compare"), (14, "tensor-type-string")}
    assert all(f.level == "change" for f in r.findings)


def test_torchscript_with_cuda_inside(tmp_path):
    r = scan_src(tmp_path, """
        import torch

        @torch.jit.script
        def f(x):
            return x + torch.ones(3, device="cuda")

        def g(x):
            return x.cuda()

        sg = torch.jit.script(g)

        def h(x):
            return x.cuda()
    """)
    assert hits(r) == {(5, "jit-script-cuda"), (8, "jit-script-cuda")}


# -- NCCL, environment, nvidia-smi ------------------------------------------------------------
def test_nccl_and_cuda_environment(tmp_path):
    r = scan_src(tmp_path, """
        import os, subprocess
        from os import environ
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ.setdefault("NCCL_IB_DISABLE", "1")
        os.putenv("NCCL_P2P_DISABLE", "1")
        environ.update(NCCL_SOCKET_IFNAME="eth0")
        env = {**os.environ, "NCCL_ASYNC_ERROR_HANDLING": "1"}
        subprocess.run("NCCL_DEBUG=INFO torchrun train.py", shell=True)
        os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
        n = len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        level = os.environ.get("NCCL_DEBUG")
    """)
    assert hits(r) == {(3, "nccl-env"), (4, "nccl-env"), (5, "nccl-env"), (6, "nccl-env"), (7, "nccl-env"),
                       (8, "nccl-env"), (9, "cuda-visible-devices"), (10, "cuda-visible-devices"), (11, "cuda-env")}
    assert all(f.level == "caveat" for f in r.findings)
    nccl = [f for f in r.findings if f.rule == "nccl-env"][0]
    for prefix in ("HCCL_*", "CNCL_*", "MCCL_*"):
        assert prefix in nccl.fix
    cvd = [f for f in r.findings if f.rule == "cuda-visible-devices"]
    assert "ASCEND_RT_VISIBLE_DEVICES" in cvd[0].fix and "MLU_VISIBLE_DEVICES" in cvd[0].fix
    assert cvd[1].what.startswith("reads CUDA_VISIBLE_DEVICES") and "device_count" in cvd[1].fix


def test_vendor_narrowing_names_only_that_vendor(tmp_path):
    r = scan_src(tmp_path, 'import os\nos.environ["NCCL_DEBUG"] = "INFO"\n', vendors=["ascend"])
    f = only(r, "nccl-env")
    assert "HCCL_*" in f.fix and "CNCL_" not in f.fix and r.vendors == ["ascend"]
    r = scan_src(tmp_path, 'import os\nos.environ["NCCL_DEBUG"] = "INFO"\n', vendors=["mlu,musa", "nope"])
    assert r.vendors == ["cambricon", "musa"] and "nope" in r.warnings[0]


def test_nvml_and_nvidia_smi(tmp_path):
    r = scan_src(tmp_path, """
        import subprocess, os
        import pynvml
        out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.used", "--format=csv"])
        os.system("nvidia-smi")
        print("see nvidia-smi")
    """)
    assert hits(r) == {(2, "nvml"), (3, "nvidia-smi-command"), (4, "nvidia-smi-command")}
    assert "npu-smi (Huawei Ascend)" in only(r, "nvml").fix


# -- distributed, data loading, serialization forms ---------------------------------------------
def test_distributed_init_forms(tmp_path):
    r = scan_src(tmp_path, """
        import os, argparse
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        dist.init_process_group("nccl", init_method="env://")
        dist.init_process_group(backend="gloo", init_method="tcp://10.0.0.1:23456", rank=r, world_size=w)
        dist.init_process_group(backend=b, init_method="file:///tmp/rdzv")
        g = dist.new_group([0, 1], backend="nccl")
        torch.cuda.nccl.all_reduce(ts)
        local_rank = int(os.environ["LOCAL_RANK"])
        rank = int(os.environ["RANK"])
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        mp.spawn(worker, nprocs=2)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    """)
    assert hits(r) == {(6, "dist-init-nccl"), (7, "dist-init-nccl"), (8, "dist-init-gloo"), (9, "dist-init-form"),
                       (10, "dist-init-nccl"), (11, "torch-cuda-nccl"), (12, "torchrun-env"),
                       (15, "launch-local-rank-arg"), (16, "mp-spawn"), (17, "ddp-device-ids")}
    lv = {f.line: f.level for f in r.findings}
    assert lv[6] == lv[7] == lv[9] == lv[12] == lv[16] == "ok"
    assert lv[8] == lv[15] == "caveat" and lv[11] == "change"
    six = [f for f in r.findings if f.line == 6][0]
    assert "'nccl' or 'gloo'" in six.what and "hccl (Huawei Ascend)" in six.fix
    assert "init_method tcp://" in [f for f in r.findings if f.line == 8][0].what
    assert "init_method file://" in [f for f in r.findings if f.line == 9][0].what


def test_data_loading_forms(tmp_path):
    r = scan_src(tmp_path, """
        import multiprocessing
        from torch.utils.data import DataLoader
        dl = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, pin_memory_device="cuda",
                        multiprocessing_context="spawn")
        x = batch.pin_memory().to("cuda", non_blocking=True)
        multiprocessing.set_start_method("forkserver")
    """)
    assert hits(r) == {(3, "dataloader"), (5, "tensor-pin-memory"), (6, "mp-spawn")}
    assert all(f.level == "ok" for f in r.findings)
    dl = only(r, "dataloader").what
    assert "num_workers=4" in dl and "pin_memory_device is redirected" in dl and "spawn workers start" in dl


def test_serialization_forms(tmp_path):
    r = scan_src(tmp_path, """
        import pickle
        import torch
        torch.save(model.state_dict(), "ckpt.pt")
        sd = torch.load("ckpt.pt")
        sd = torch.load("ckpt.pt", map_location={"cuda:1": "cuda:0"})
        m = torch.jit.load("m.pt")
        m = torch.jit.load("m.pt", map_location="cuda")
        m = torch.jit.load("m.pt", map_location="cpu")
        obj = pickle.load(open("obj.pkl", "rb"))

        class Holder:
            def __setstate__(self, state):
                self.__dict__.update(state)
                self.t = self.t.cuda()
    """)
    assert hits(r) == {(3, "torch-save"), (4, "torch-load"), (5, "torch-load"), (6, "jit-load"), (7, "jit-load"),
                       (9, "pickle-load"), (14, "setstate-cuda")}
    lv = {(f.line, f.rule): f.level for f in r.findings}
    assert lv[(6, "jit-load")] == lv[(7, "jit-load")] == "change" and lv[(9, "pickle-load")] == "caveat"
    assert "map_location={'cuda:1': 'cuda:0'}" in [f for f in r.findings if f.line == 5][0].what


# -- files: folders, syntax errors, encodings ------------------------------------------------
def test_folder_syntax_error_and_non_utf8_keep_scanning(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("import flash_attn\n")
    (tmp_path / "pkg" / "py2.py").write_text("import torch\nprint 'hello'\n")
    (tmp_path / "pkg" / "latin.py").write_bytes(b"# caf\xe9\nimport cupy\n")
    (tmp_path / "pkg" / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nimport xformers\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "skip.py").write_text("import apex\n")
    (tmp_path / "pkg" / ".venv").mkdir()
    (tmp_path / "pkg" / ".venv" / "skip.py").write_text("import apex\n")
    r = static_scan(tmp_path / "pkg")
    status = {Path(m["path"]).name: m["status"] for m in r.files}
    assert status == {"cookie.py": "scanned", "latin.py": "not-utf8", "ok.py": "scanned", "py2.py": "syntax-error"}
    got = [(Path(f.file).name, f.line, f.rule) for f in r.findings]
    assert got == [("cookie.py", 3, "xformers"), ("latin.py", 1, "not-utf8"), ("latin.py", 2, "cupy"),
                   ("ok.py", 1, "flash-attn"), ("py2.py", 2, "syntax-error")]
    syn = r.findings[-1]
    assert syn.level == "change" and "SyntaxError" in syn.what and syn.code == "print 'hello'"


def test_long_chains_scan_and_too_deep_is_a_finding(tmp_path):
    (tmp_path / "long.py").write_text("x = " + " + ".join(["a"] * 3000) + "\nimport apex\n")
    (tmp_path / "deep.py").write_text("x = " + " + ".join(["a"] * 60000) + "\n")
    r = static_scan(tmp_path)
    assert [(Path(m["path"]).name, m["status"]) for m in r.files] == [("deep.py", "too-deep"), ("long.py", "scanned")]
    assert [(Path(f.file).name, f.line, f.rule) for f in r.findings] == [("deep.py", 1, "syntax-error"),
                                                                          ("long.py", 2, "apex")]
    assert sys.getrecursionlimit() < 20000


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(ScriptNotFound, match="no such file"):
        static_scan(tmp_path / "nope.py")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScriptNotFound, match="no .py file"):
        static_scan(tmp_path / "empty")


def test_exit_codes_follow_the_worst_level(tmp_path):
    clean = scan_src(tmp_path, "import torch\nx = torch.zeros(2).cuda()\ntorch.save(x, 'x.pt')\n", "a.py")
    caveat = scan_src(tmp_path, "import torch\ntorch.backends.cudnn.deterministic = True\n", "b.py")
    change = scan_src(tmp_path, "import flash_attn\n", "c.py")
    assert [clean.exit_code(), caveat.exit_code(), change.exit_code()] == [0, 3, 4]
    assert caveat.exit_code("change") == 0 and change.exit_code("change") == 4 and change.exit_code("never") == 0
    assert caveat.exit_code("fallback") == 3 and change.exit_code("unsupported") == 4


# -- the corpus of CUDA-written training scripts --------------------------------------------------
#: every finding that is not "ok" on the corpus: these scripts run unmodified through hal run
#: (tests/corpus/test_corpus.py), so changes are only in branches that need several GPUs
CORPUS_NOT_OK = {
    ("compile_mlp.py", 57, "torch-compile", "caveat"),
    ("cudnn_deterministic_cnn.py", 28, "cudnn-deterministic", "caveat"),
    ("data_parallel_tutorial.py", 66, "data-parallel", "caveat"),
    ("dcgan.py", 112, "data-parallel-functional", "change"),  # only when --ngpu > 1
    ("dcgan.py", 142, "data-parallel-functional", "change"),
    ("imagenet_style.py", 99, "cudnn-deterministic", "caveat"),
    ("imagenet_style.py", 131, "data-parallel", "caveat"),
    ("nanogpt_fused_adamw.py", 247, "torch-compile", "caveat"),
    ("packed_lstm_classifier.py", 72, "cudnn-deterministic", "caveat"),
}


@pytest.fixture(scope="module")
def corpus():
    return static_scan(CORPUS)


def test_corpus_every_script_scanned(corpus):
    manifest = json.loads((ROOT / "tests" / "corpus" / "manifest.json").read_text())
    assert {Path(m["path"]).name for m in corpus.files} == {s["script"] for s in manifest["scripts"]}
    assert all(m["status"] == "scanned" for m in corpus.files)
    assert len(corpus.files) == 32


def test_corpus_caveats_and_changes(corpus):
    got = {(Path(f.file).name, f.line, f.rule, f.level) for f in corpus.findings if f.level != "ok"}
    assert got == CORPUS_NOT_OK
    for f in corpus.findings:
        assert Path(f.file).read_text().splitlines()[f.line - 1].strip()[:200] == f.code


def test_corpus_forms_match_the_manifest_idioms(corpus):
    manifest = json.loads((ROOT / "tests" / "corpus" / "manifest.json").read_text())
    rules_of = {}
    for f in corpus.findings:
        rules_of.setdefault(Path(f.file).name, set()).add(f.rule)
    for s in manifest["scripts"]:
        got = rules_of.get(s["script"], set())
        idioms = set(s["idioms"])
        if "ddp-torchrun" in idioms:
            assert {"dist-init-nccl", "torchrun-env", "ddp-device-ids"} <= got, s["script"]
        if "dataloader-workers-pin-memory" in idioms:
            assert "dataloader" in got, s["script"]
        if "cudnn-benchmark" in idioms:  # (tf32-flags includes the portable set_float32_matmul_precision)
            assert "cudnn-benchmark" in got, s["script"]
        if "mp-spawn" in idioms or "hogwild-share-memory" in idioms:
            assert "mp-spawn" in got, s["script"]
        if idioms & {"map-location-none", "map-location-cuda-string", "map-location-lambda"}:
            assert "torch-load" in got, s["script"]
    ok = [f for f in corpus.findings if f.rule == "torch-load" and Path(f.file).name == "save_load_map_location.py"]
    assert len(ok) == 15 and all(f.level == "ok" for f in ok)


def test_corpus_sorted_and_fast(corpus):
    keys = [(f.file, f.line, f.col, f.rule) for f in corpus.findings]
    assert keys == sorted(keys)
    assert corpus.seconds < 5.0  # about 0.2 s on one core


# -- the data file ---------------------------------------------------------------------------
def test_rules_file_is_consistent():
    data = load_rules()
    ids = [r["id"] for r in data["rules"]]
    assert len(ids) == len(set(ids))
    for r in data["rules"]:
        assert r["level"] in LEVELS and r["category"] in data["categories"], r["id"]
        assert r["what"] and r["fix"] and r["source"], r["id"]
        assert ("names" in r) != ("detector" in r), r["id"]
    code = (ROOT / "op_coverage" / "torch" / "static_ast.py").read_text()
    for used in re.findall(r'self\.hit\("([a-z0-9-]+)"', code):
        assert used in ids, used
    schema_categories = read_json("torch_static_report.schema.json")["$defs"]["finding"]["properties"]["category"]
    assert set(schema_categories["enum"]) == set(data["categories"])


def test_redirected_torch_cuda_names_are_the_shims():
    """Every torch.cuda name the rules treat as redirected is one hal/redirect patches."""
    shim = "".join((ROOT / "hal" / "redirect" / n).read_text() for n in ("_cuda_module.py", "_devices.py"))
    for name in load_rules()["redirected_torch_cuda"]:
        assert f'"{name}"' in shim or name == "amp", name


def test_vendor_table_agrees_with_hal_backends():
    for key, v in load_rules()["vendors"].items():
        b = builtin_spec(key).to_dict()
        assert (v["device_type"], v["c10d_backend"], v["management_tool"]) == \
            (b["device_type"], b["dist_backend"], b["management_tool"]), key
        assert v["visible_devices_env"] == b["visible_devices_env"], key


# -- command line ------------------------------------------------------------------------------
def test_cli_json_validates_and_exit_codes(run_cli, tmp_path):
    p = tmp_path / "train.py"
    p.write_text("import torch\nfrom flash_attn import flash_attn_func\ntorch.backends.cudnn.deterministic = True\n")
    r = run_cli("scan", p, "--static", "--json")
    assert r.returncode == 4, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.Draft202012Validator(read_json("torch_static_report.schema.json")).validate(doc)
    assert doc["exit_code"] == 4 and doc["summary"]["by_level"] == {"ok": 0, "caveat": 1, "change": 1}
    assert [(f["line"], f["rule"]) for f in doc["findings"]] == [(2, "flash-attn"), (3, "cudnn-deterministic")]
    assert run_cli("scan", p, "--static", "--fail-on", "never").returncode == 0


def test_cli_formats_fail_on_and_errors(run_cli, tmp_path):
    p = tmp_path / "train.py"
    p.write_text("import torch\ntorch.backends.cudnn.deterministic = True\n")
    out = tmp_path / "c.md"
    r = run_cli("scan", p, "--static", "--format", "md", "-o", out)
    assert r.returncode == 3 and "- [ ] `" in out.read_text()
    assert run_cli("scan", p, "--static", "--fail-on", "change").returncode == 0
    r = run_cli("scan", p.parent, "-t", "ascend")  # a folder is read, not run: --static
    assert r.returncode == 2 and "--static" in r.stderr
    r = run_cli("scan", tmp_path / "missing.py", "--static")
    assert r.returncode == 10 and "no such file" in r.stderr


def test_renderers_share_the_findings(tmp_path):
    r = scan_src(tmp_path, "import os\nimport apex\nos.environ['NCCL_DEBUG'] = '1'\nimport torch\n"
                           "torch.save({}, 'x')\n")
    table = render(r, "table", width=80)
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "CHANGE" in table and "\033[" not in table
    assert "\033[31;1m" in render(r, "table", color=True)
    rows = list(__import__("csv").reader(render(r, "csv").splitlines()))
    assert rows[0] == CSV_COLUMNS and [row[1] for row in rows[1:]] == ["2", "3", "5"]
    html = render(r, "html")
    assert html.startswith("<!DOCTYPE html>") and "class='change'" in html and "<script" not in html
    md = render(r, "md")
    assert "## Needs a change" in md and "## Works via hal run" in md


def test_static_scan_does_not_import_torch():
    code = ("import sys; from op_coverage.torch.static import static_scan; "
            f"r = static_scan({str(CORPUS)!r}); print(len(r.findings)); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr


# -- frameworks and the device-typed distributed calls they make ------------------------------------------
def test_framework_device_flags_meshes_and_device_ids(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        import torch.distributed as dist
        import lightning as L
        from lightning.pytorch import Trainer as PLTrainer
        from torch.distributed.device_mesh import init_device_mesh, DeviceMesh
        from transformers import TrainingArguments
        from accelerate import Accelerator
        dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
        mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
        cpu_mesh = init_device_mesh("cpu", (2,))
        m2 = DeviceMesh(device_type="cuda", mesh=[0, 1])
        t = L.Trainer(accelerator="gpu", devices=2, strategy="ddp", precision="16-mixed")
        t2 = PLTrainer(max_steps=3)
        t3 = L.Trainer(accelerator="cpu")
        f = L.Fabric(accelerator="cuda", devices=1)
        a = TrainingArguments("out", bf16=True, per_device_train_batch_size=4)
        a2 = TrainingArguments("out", use_cpu=True)
        acc = Accelerator(mixed_precision="fp16")
        acc2 = Accelerator(cpu=True)
    """)
    assert hits(r) == {(8, "dist-init-nccl"), (8, "dist-init-device-id"), (9, "device-mesh-cuda"),
                       (11, "device-mesh-cuda"), (12, "lightning-accelerator"), (13, "lightning-accelerator"),
                       (15, "lightning-accelerator"), (16, "hf-training-args"), (17, "hf-training-args"),
                       (18, "accelerate-accelerator"), (19, "accelerate-accelerator")}
    assert hits(r, "caveat") == {(17, "hf-training-args"), (19, "accelerate-accelerator")}
    assert not hits(r, "change")
    by_line = {f.line: f for f in r.findings if f.rule != "dist-init-nccl"}
    assert by_line[12].what.startswith("`Trainer(accelerator='gpu', devices=2, strategy='ddp', precision='16-mixed')`")
    assert by_line[13].what.startswith("`Trainer()`")  # accelerator="auto" picks CUDA, which hal run presents
    assert by_line[9].what.startswith("`init_device_mesh('cuda', ...)`") and "backend's device type" in by_line[9].what
    assert "keeps the Trainer on the CPU" in by_line[17].what and "use_cpu" in by_line[17].fix
    assert by_line[8].what.startswith("`init_process_group(device_id=torch.device('cuda', 0))`")


def test_torch_cuda_submodules_are_judged_as_torch_cuda(tmp_path):
    r = scan_src(tmp_path, """
        import torch
        from torch.cuda import random as cuda_random
        state = torch.cuda.random.get_rng_state_all()
        torch.cuda.random.manual_seed_all(0)
        cuda_random.set_rng_state_all(state)
        used = torch.cuda.memory.memory_allocated()
        torch.cuda.memory._record_memory_history()
        g = torch.cuda.graphs.CUDAGraph()
        step = torch.cuda.make_graphed_callables(step, (x,))
        pool = torch.cuda.graph_pool_handle()
    """)
    assert hits(r) == {(7, "torch-cuda-other"), (8, "cuda-graphs"), (9, "cuda-graphs"), (10, "cuda-graphs")}
    assert only(r, "torch-cuda-other").what.startswith("`torch.cuda.memory._record_memory_history`")

