"""hal accept on outside-shaped scripts (``make accept``; not in ``make test``: minutes): a Hugging Face
Trainer script at 2 ranks, a torchrun DDP script, an FSDP2 script, each against the emulator with a
vendor's operator coverage; every one is accepted (the losses agree with the cpu reference within
the default tolerance, every run ends, the throughput is measured) and its report follows the schema."""
import json
from pathlib import Path

import pytest

from hal_accept import AcceptOptions, Target, accept

pytestmark = [pytest.mark.accept, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "hal_accept" / "accept.schema.json").read_text())
CASES = {
    # (script, its arguments, processes, the vendor coverage the emulator takes on)
    "hf_trainer_ddp": (ROOT / "tests/frameworks/scripts/hf_trainer_ddp.py", (), 2, "musa-2.7"),
    "ddp_torchrun": (ROOT / "tests/corpus/scripts/ddp_torchrun_basic.py", ("--epochs", "2"), 2, "ascend-2.13"),
    "fsdp2": (ROOT / "tests/accept/train_fsdp2.py", (), 2, "mlu-2.4"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_outside_script_is_accepted_on_the_emulator_with_a_vendors_coverage(case, tmp_path):
    if case == "hf_trainer_ddp":
        pytest.importorskip("transformers", reason="the Hugging Face Trainer case needs transformers (make setup)")
    jsonschema = pytest.importorskip("jsonschema")
    script, args, nproc, vendor = CASES[case]
    # the emulator's speed says nothing about a vendor's chip (docs/emulator.md), and 2 ranks share this
    # machine's 2 cores: the throughput gate is set where only a broken measurement fails it
    options = AcceptOptions(str(script), tuple(args), targets=(Target("emu", vendor),), nproc_per_node=nproc,
                            steps=4, workdir=tmp_path, timeout_s=600, min_throughput_ratio=0.05)
    report = accept(options)
    jsonschema.validate(json.loads(json.dumps(report, default=str)), SCHEMA)
    failed = {g["gate"]: g["detail"] for g in report["gates"] if not g["holds"]}
    assert report["exit_code"] == 0, (failed, {n: r["output_tail"][-1500:] for n, r in report["runs"].items()})
    target = f"emu:{vendor}"
    assert len(report["runs"][target]["loss"]) == 4 and None not in report["runs"][target]["loss"]
    assert report["sections"]["operators"]["targets"][target]["op_types"] > 5
    assert report["sections"]["throughput"]["targets"][target]["ratio"] > 0.05
    # rank 0 killed at step 3, torchrun's restart, resumed from step 2's checkpoint taken from outside the script
    # (the Trainer's accelerate loader prefetches a batch: the replay must give it the same stream), bitwise
    stab = report["sections"]["stability"]
    for name in ("reference", target):
        e = stab["rehearsals"][name]
        assert (e["resumed_from_step"], e["steps_after_resume"], e["bitwise"]) == (2, [3, 4], True), e
    assert stab["portability"][target]["ok"], stab["portability"][target]
