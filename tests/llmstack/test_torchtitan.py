"""The torchtitan recipes of the LLM-stack corpus (tests/llmstack/torchtitan.json), run as a user runs them.

Each entry is ``hal run --nproc-per-node N --local-ranks-filter R --role rank --tee 3 -m torchtitan.train
--job.config_file tests/llmstack/configs/<toml> ...`` -- torchtitan's own launch line with ``hal run`` in
place of ``torchrun`` -- on the llama3 debug model, with the tokenizer, data set and seed checkpoint that
tests/llmstack/titan_assets.py makes.  Plain torchtitan cannot run on a CPU machine, so every recipe's
reference is ``titan_single``, one process on the cpu backend: each step's loss of FSDP2, TP and PP at 2
ranks (and of a run resumed from its DCP checkpoint), on cpu and on emu, must equal it within the entry's
``rtol``.  Runs a missing piece of hal still fails are strict xfails naming the piece (manifest
``blocked_by``).  The whole matrix is ``make llmstack``; ``make test`` runs CI_SUBSET.
"""

import pytest

import check_llmstack as ls  # tests/llmstack/check_llmstack.py (pytest puts this folder on sys.path)

MANIFEST = ls.manifests()["torchtitan.json"]
ENTRIES = {n: e for n, e in ls.entries().items() if e["stack"] == "torchtitan"}
REFERENCE = "titan_single"
TIMEOUT_S = 600
#: the case `make test` runs (with the one-process reference it needs)
CI_SUBSET = {("titan_fsdp2", "emu")}

_runs = {}


def _skip_if_missing(entry):
    mod = ls.missing_requirement(entry)
    if mod:
        pytest.skip(f"{entry['name']} needs {mod} (pip install torchtitan==0.2.2 with "
                    f"-c build/torch-constraint.txt: its datasets and tokenizers come with it)")


def _run(name, mode):
    if (name, mode) not in _runs:
        _skip_if_missing(ENTRIES[name])
        _runs[(name, mode)] = ls.run(ENTRIES[name], mode, TIMEOUT_S)
    return _runs[(name, mode)]


def _marks(name, mode):
    marks = [] if (name, mode) in CI_SUBSET else [pytest.mark.llmstack]
    if mode == "emu":
        marks.append(pytest.mark.emu)
    blocked = ENTRIES[name].get("blocked_by", {}).get(mode)
    if blocked:
        marks.append(pytest.mark.xfail(strict=True, reason=blocked))
    return marks


def test_manifest_is_consistent():
    assert [p for p in ls.validate() if p.startswith("torchtitan.json")] == []
    for name, e in ENTRIES.items():
        if name != REFERENCE:  # every 2-rank recipe is held to the one-process run on both backends
            assert e["nproc_per_node"] == 2 and set(e["compare"]) == {f"cpu={REFERENCE}:cpu", f"emu={REFERENCE}:cpu"}
    assert {"titan_fsdp2", "titan_tp2", "titan_pp2", "titan_fsdp2_resume"} <= set(ENTRIES)


def test_assets_are_the_same_each_time_and_one_sequence_per_document(tmp_path):
    """The tokenizer and data set a recipe trains on are made the same on every machine, and each document
    is exactly one training sequence (BOS, SEQ_LEN - 1 words, EOS) in torchtitan's tokenizer: what makes a
    2-rank global batch hold the same sequences as the one-process batch."""
    pytest.importorskip("tokenizers")
    tt_tokenizer = pytest.importorskip("torchtitan.components.tokenizer")
    import json

    assets = ls.assets_helper("titan_assets")
    digests = []
    for i in range(2):
        assets.make_data(str(tmp_path / str(i)))
        digests.append(assets.digest(str(tmp_path / str(i))))
    assert digests[0] == digests[1]
    tokenizer = tt_tokenizer.HuggingFaceTokenizer(str(tmp_path / "0" / "tokenizer"))
    with open(tmp_path / "0" / "c4_local" / "en" / "train.jsonl") as f:
        docs = [json.loads(line)["text"] for line in f]
    assert len(docs) == assets.DOCUMENTS
    for text in docs:
        ids = tokenizer.encode(text, add_bos=True, add_eos=True)
        assert len(ids) == assets.SEQ_LEN + 1 and ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert tokenizer.get_vocab_size() <= 2048  # the debug model's embedding table


CASES = [pytest.param(n, m, marks=_marks(n, m), id=f"{n}-{m}") for n in sorted(ENTRIES) for m in ("cpu", "emu")]


@pytest.mark.slow
@pytest.mark.parametrize("name,mode", CASES)
def test_recipe_trains_as_one_process_does(name, mode):
    entry = ENTRIES[name]
    r = _run(name, mode)
    assert not r["problems"], "\n".join(r["problems"] + r["stdout_tail"][-8:] + r["stderr_tail"])
    for pair in entry["compare"]:
        if pair.partition("=")[0] != mode:
            continue
        ref_entry, ref_mode = ls.fw.reference(pair, entry, ENTRIES)
        problems = ls.compare(r, _run(ref_entry["name"], ref_mode), entry["rtol"])
        assert not problems, "\n".join(problems)
    assert len(r["losses"]) == 6, r["losses"]  # every step's loss, the resumed run's included
