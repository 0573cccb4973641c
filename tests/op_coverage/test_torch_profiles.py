"""Torch op profiles: bundled data is valid and cited, judging follows the facts' rules on real entries."""
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import hal.op_support.torch_profile as tp
from hal._errors import BadTorchProfile, UnknownTorchTarget
from hal.op_support.torch_profile import (TorchProfile, load_torch_profiles, nearest_profile,
                                        resolve_torch_targets)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "hal" / "data" / "torch"  # torch's own tables
#: the bundled profiles: each vendor's torch-<version>.json, in its hal backend's folder
PROFILE_FILES = sorted((ROOT / "backends").rglob("torch-*.json"))
MUSA = ROOT / "backends" / "musa" / "torch-2.7.json"
NAMES = {"ascend-2.7", "ascend-2.13", "musa-2.7", "mlu-2.4", "xpu-2.13", "mps-2.13", "gcu-2.10", "biren-partial",
         "metax-2.4", "cuda-2.4", "cuda-2.7", "cuda-2.10", "cuda-2.13"}


@pytest.fixture(scope="module")
def profiles():
    return load_torch_profiles(use_plugins=False)


def _validator(ref=None):
    schema = json.loads((ROOT / "hal" / "data" / "torch_profile.schema.json").read_text())
    if ref:
        schema = {"$defs": schema["$defs"], "$ref": f"#/$defs/{ref}"}
    return jsonschema.Draft202012Validator(schema)


# -- the data -------------------------------------------------------------------------------------------
def test_every_bundled_file_validates_against_the_published_schema():
    files = sorted(DATA.glob("*.json")) + PROFILE_FILES
    assert len(files) == len(NAMES) + 4 + 1  # profiles, composite tables 2.4/2.7/2.10/2.13, parents table
    for f in files:
        data = json.loads(f.read_text())
        ref = ("composite" if f.name.startswith("composite-") else
               "cuda_only_parents" if f.name == "cuda_only_parents.json" else None)
        _validator(ref).validate(data)
        if ref is None:
            assert data["source"]["repo"] and data["source"]["commit"], f.name
            assert data["retrieved"] and data["facts_file"] and data["uncertain"], f.name
            assert data["ops"] == sorted(data["ops"]), f"{f.name}: ops must be sorted"


def test_profiles_cover_each_vendor_and_version_with_bare_aliases_on_the_newest(profiles):
    assert set(profiles) == NAMES
    amap = tp.alias_map(profiles)
    for alias, name in {"ascend": "ascend-2.13", "musa": "musa-2.7", "mlu": "mlu-2.4", "xpu": "xpu-2.13",
                        "mps": "mps-2.13", "gcu": "gcu-2.10", "cuda": "cuda-2.13", "biren": "biren-partial",
                        "metax": "metax-2.4"}.items():
        assert amap[alias] == name
    assert "ascend" not in profiles["ascend-2.7"].aliases


def test_counts_match_the_facts(profiles):
    assert len(profiles["ascend-2.13"].ops) == 1064 and len(profiles["ascend-2.7"].ops) == 1076
    assert len(profiles["musa-2.7"].ops) == 1163 and len(profiles["xpu-2.13"].ops) == 786
    assert len(profiles["cuda-2.13"].ops) == 885 and len(profiles["biren-partial"].ops) == 50
    comp = json.loads((DATA / "composite-2.13.json").read_text())
    assert (len(comp["cia"]), len(comp["cea"]), len(comp["ceanf"]), len(comp["structured_delegate"])) == \
        (743, 1061, 57, 385)


def test_unimplemented_behaviour_is_each_vendors(profiles):
    u = {n: p.unimplemented for n, p in profiles.items()}
    for n in ("ascend-2.13", "ascend-2.7", "mlu-2.4", "gcu-2.10"):
        assert u[n]["default"] == "cpu_fallback", n
    assert u["musa-2.7"]["default"] == "error" and u["cuda-2.13"]["default"] == "error"
    assert (u["xpu-2.13"]["default"], u["xpu-2.13"]["env"]) == ("error_unless_env", "PYTORCH_ENABLE_XPU_FALLBACK")
    assert (u["mps-2.13"]["default"], u["mps-2.13"]["env"]) == ("error_unless_env", "PYTORCH_ENABLE_MPS_FALLBACK")
    assert u["biren-partial"]["default"] == "unknown" and profiles["biren-partial"].partial
    assert "linalg_svd" in u["mps-2.13"]["always_cpu"] and "cholesky" in u["xpu-2.13"]["always_cpu"]
    assert "native_layer_norm_backward" in u["gcu-2.10"]["chip_cpu"]["s60"]
    assert any(s["env"] == "ENABLE_FALLBACK_TO_CPU" and s["effect"] == "error" for s in u["mlu-2.4"]["switches"])
    # vendor texts, {op} the only placeholder; torch's own text is marked generic
    assert u["mps-2.13"]["error_message_kind"] == "vendor"
    assert "PYTORCH_ENABLE_MPS_FALLBACK=1" in u["mps-2.13"]["error_message"]
    assert u["musa-2.7"]["error_message_kind"] == "generic"
    assert "from the 'musa' backend" in u["musa-2.7"]["error_message"]
    assert "on the NPU backend and will fall back" in u["ascend-2.13"]["warning_message"]
    for n, x in u.items():
        for key in ("error_message", "warning_message"):
            if x.get(key):
                assert x[key].replace("{op}", "").count("{") == 0, (n, key)
                # XPU's real fallback warning names no op (unless PYTORCH_DEBUG_XPU_FALLBACK=1)
                assert "{op}" in x[key] or (n, key) == ("xpu-2.13", "warning_message"), (n, key)


def test_doubtful_sources_carry_uncertain_notes(profiles):
    assert any("Unofficial" in s for s in profiles["gcu-2.10"].uncertain)
    assert any("PARTIAL" in s for s in profiles["biren-partial"].uncertain)
    assert any("stock CUDA" in s for s in profiles["metax-2.4"].uncertain)


def test_converter_regenerates_the_committed_data(tmp_path):
    facts = Path("/work/shared/torch-op-facts")
    if not facts.is_dir():
        pytest.skip("the fact sheet is not on this machine")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_profiles_from_facts.py"), str(facts), str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    for f in sorted(DATA.glob("*.json")) + PROFILE_FILES:
        rel = f.relative_to(ROOT)
        assert (tmp_path / rel).read_text() == f.read_text(), f"{rel} differs from the converter's output"


# -- judging -------------------------------------------------------------------------------------------
def test_an_op_musa_lacks_raises_there_and_falls_back_on_ascend(profiles):
    m = profiles["musa-2.7"].judge("_logcumsumexp")
    assert (m.status, m.behaviour) == ("missing", "error")
    assert m.message.startswith("Could not run 'aten::_logcumsumexp' with arguments from the 'musa' backend")
    a = profiles["ascend-2.7"].judge("_logcumsumexp")
    assert (a.status, a.behaviour) == ("missing", "cpu_fallback")
    assert "'aten::_logcumsumexp' is not currently supported on the NPU backend" in a.message


def test_listed_op_is_native(profiles):
    v = profiles["musa-2.7"].judge("std.correction")
    assert (v.status, v.via) == ("native", "listed")


def test_structured_delegate_op_is_native_through_its_out_kernel(profiles):
    v = profiles["mps-2.13"].judge("add.Tensor")
    assert (v.status, v.via) == ("native", "structured_delegate:add.out")
    # the rule itself: a profile listing only lgamma.out runs lgamma and lgamma_
    p = TorchProfile.from_dict({"schema": "op_coverage.torch_profile/1", "name": "tiny", "device_type": "x",
                                "torch_version": "2.13.0", "ops": ["lgamma.out"],
                                "unimplemented": {"default": "error", "error_message": "no {op}"}})
    for op in ("lgamma", "lgamma_"):
        assert (p.judge(op).status, p.judge(op).via) == ("native", "structured_delegate:lgamma.out")
    v = p.judge("digamma")
    assert (v.status, v.behaviour, v.message) == ("missing", "error", "no digamma")


def test_cia_op_is_composite_and_vendor_override_is_native(profiles):
    v = profiles["musa-2.7"].judge("matmul")
    assert (v.status, v.via) == ("composite", "cia") and "torch 2.7.1" in v.detail
    assert profiles["ascend-2.13"].judge("matmul").status == "native"  # Ascend overrides the CIA op
    assert profiles["mps-2.13"].judge("_foreach_add.List").via == "cea"


def test_always_cpu_ops_are_missing_with_cpu_fallback_even_when_listed(profiles):
    v = profiles["mps-2.13"].judge("col2im")
    assert "col2im" in profiles["mps-2.13"].ops
    assert (v.status, v.behaviour, v.via) == ("missing", "cpu_fallback", "always_cpu")
    assert profiles["xpu-2.13"].judge("cholesky").behaviour == "cpu_fallback"


def test_error_unless_env_vendor_names_the_variable(profiles):
    v = profiles["mps-2.13"].judge("_logcumsumexp.out") if "_logcumsumexp.out" not in profiles["mps-2.13"].native \
        else profiles["mps-2.13"].judge("_fused_dropout")
    assert (v.status, v.behaviour) == ("missing", "error_unless_env")
    assert "PYTORCH_ENABLE_MPS_FALLBACK=1" in v.detail and "PYTORCH_ENABLE_MPS_FALLBACK=1" in v.message


def test_cuda_only_ops_are_judged_at_their_parent(profiles):
    v = profiles["ascend-2.13"].judge("_scaled_dot_product_flash_attention")
    assert (v.status, v.via) == ("native", "parent:scaled_dot_product_attention")
    v = profiles["musa-2.7"].judge("_scaled_dot_product_flash_attention_backward")
    assert (v.status, v.via) == ("composite", "parent:scaled_dot_product_attention")
    assert profiles["musa-2.7"].judge("cudnn_convolution").via == "parent:convolution_overrideable"
    assert profiles["xpu-2.13"].judge("_scaled_dot_product_flash_attention").via == "listed"  # XPU has it
    assert profiles["cuda-2.13"].judge("cudnn_convolution").via == "listed"


def test_partial_profile_says_missing_proves_nothing(profiles):
    v = profiles["biren-partial"].judge("lgamma")
    assert (v.status, v.behaviour) == ("missing", "unknown") and "PARTIAL" in v.detail


def test_composite_table_is_the_profiles_own_torch_version(profiles):
    assert profiles["mlu-2.4"].composite().torch_version == "2.4.1"
    assert profiles["metax-2.4"].composite().torch_version == "2.4.1"  # 2.4.0 yaml = 2.4.1 yaml
    assert profiles["gcu-2.10"].composite().torch_version == "2.10.0"


def test_skew_warning_for_a_2_10_trace_against_ascend(profiles):
    p, warn = nearest_profile(profiles, "ascend", "2.10.0")
    assert p.name == "ascend-2.13"
    assert "2.10.0" in warn and "2.7.1, 2.13.0" in warn and "ascend-2.13" in warn
    p, warn = nearest_profile(profiles, "ascend", "2.7.1+cu126")
    assert (p.name, warn) == ("ascend-2.7", None)
    p, warn = nearest_profile(profiles, "mlu", "2.13.0")
    assert p.name == "mlu-2.4" and "2.4.1" in warn
    with pytest.raises(UnknownTorchTarget, match="known vendors"):
        nearest_profile(profiles, "kunlunxin", "2.13.0")


def test_loading_reads_json_only(tmp_path):
    code = ("import sys, hal.op_support.torch_profile as t; ps = t.load_torch_profiles(use_plugins=False); "
            "ps['ascend'] if False else None; [p.judge('addmm') for p in ps.values()]; "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "False", r.stderr


# -- target names ---------------------------------------------------------------------------------------------
def test_resolve_names_aliases_and_lists(profiles):
    got = resolve_torch_targets(profiles, ["ascend,musa", "xpu-2.13", "ascend-2.13"])
    assert [p.name for p in got] == ["ascend-2.13", "musa-2.7", "xpu-2.13"]
    assert len(resolve_torch_targets(profiles, ["all"])) == len(NAMES)


def test_unknown_target_lists_the_known_ones(profiles):
    with pytest.raises(UnknownTorchTarget) as e:
        resolve_torch_targets(profiles, ["ascend-3.0"])
    msg = str(e.value)
    assert "'ascend-3.0' is not known" in msg and "ascend-2.13" in msg and "musa=musa-2.7" in msg


# -- user and plugin profiles -------------------------------------------------------------------------------
def test_user_file_replaces_a_bundled_profile(tmp_path):
    data = json.loads(MUSA.read_text())
    data["ops"] = data["ops"] + ["_logcumsumexp"]
    f = tmp_path / "musa.json"
    f.write_text(json.dumps(data))
    ps = load_torch_profiles([f], use_plugins=False)
    assert ps["musa-2.7"].judge("_logcumsumexp").status == "native" and ps["musa-2.7"].origin == str(f)


def test_bad_user_file_names_file_and_fix(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"schema": "op_coverage.torch_profile/1", "name": "x"}))
    with pytest.raises(BadTorchProfile, match="missing required field.*device_type"):
        load_torch_profiles([f], use_plugins=False)
    with pytest.raises(BadTorchProfile, match="no such file"):
        load_torch_profiles([tmp_path / "nope.json"], use_plugins=False)


def test_plugin_profiles_in_both_formats(monkeypatch):
    new = json.loads(MUSA.read_text())
    new.update(name="acme-2.13", aliases=["acme"], vendor="acme", torch_version="2.13.0")
    old = {"schema": "hal.op_profile/1", "backend": "emu", "device_type": "emu", "device": "emu:0",
           "torch": "2.13.0+cpu", "ops": {"add": {"status": "native", "detail": "ok"},
                                          "erf": {"status": "fallback", "detail": "host"},
                                          "lgamma": {"status": "failing", "detail": "boom"}}}
    monkeypatch.setattr(tp, "plugin_torch_profiles",
                        lambda: [("acme:acme", new), ("emu:emu", old), ("broken:x", {"schema": "nope"}),
                                 ("dup:x", dict(new, name="ascend-2.13"))])
    problems = []
    ps = load_torch_profiles(problems=problems)
    assert ps["acme-2.13"].origin == "hal plugin acme:acme"
    emu = ps["emu"]
    assert emu.partial and emu.torch_version == "2.13.0"
    assert emu.judge("add").status == "native"
    assert (emu.judge("erf").status, emu.judge("erf").behaviour) == ("missing", "cpu_fallback")
    assert emu.judge("lgamma").status == "missing"
    assert any("broken:x" in p for p in problems) and any("clashes" in p for p in problems)
    assert ps["ascend-2.13"].origin == "backends/ascend/torch-2.13.json"  # the bundled one


def test_the_emulator_plugin_profile_loads():
    pytest.importorskip("hal.plugin.registry")
    problems = []
    ps = load_torch_profiles(problems=problems)
    assert "emu" in ps and not problems, problems


# -- op_coverage targets ---------------------------------------------------------------------------------------
def test_targets_lists_onnx_and_torch_with_their_kind(run_cli):
    r = run_cli("targets", "--json", "--no-plugins")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "op_coverage.targets/2"
    kinds = {(t["name"], t["kind"]) for t in doc["targets"]}
    assert {("ascend", "onnx"), ("ort-cuda", "onnx"), ("ascend-2.13", "torch"), ("musa-2.7", "torch")} <= kinds
    row = next(t for t in doc["targets"] if t["name"] == "ascend-2.13")
    assert row["aliases"] == ["ascend", "npu"] and row["torch_version"] == "2.13.0"
    assert row["unimplemented"] == "cpu_fallback" and row["source"]["repo"] == "Ascend/pytorch"

    r = run_cli("targets", "--kind", "torch", "--no-plugins")
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "kind", "ops"]
    assert any(ln.split()[:2] == ["musa-2.7", "torch"] for ln in lines)
    assert not any(ln.split()[1:2] == ["onnx"] for ln in lines[1:] if ln.strip())


def test_targets_details_and_torch_profile_files(run_cli, tmp_path):
    data = json.loads(MUSA.read_text())
    data.update(name="my-npu", aliases=[], vendor="my")
    f = tmp_path / "my.json"
    f.write_text(json.dumps(data))
    r = run_cli("targets", "--details", "--kind", "torch", "--profile", str(f), "--no-plugins")
    assert r.returncode == 0, r.stderr
    assert "my-npu [torch]" in r.stdout and "a missing op: error" in r.stdout and "uncertain:" in r.stdout


def test_onnx_scan_with_a_torch_target_name_says_so(run_cli):
    r = run_cli("scan", "-t", "ascend-2.13", "--no-plugins")
    assert r.returncode == 16
    assert "'ascend-2.13' is a torch target" in r.stderr
