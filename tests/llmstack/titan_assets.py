#!/usr/bin/env python3
"""The files torchtitan's llama3 debug model trains on, made here (nothing is downloaded or copied).

torchtitan's own test tokenizer and ``c4_test`` data live in its git repository, not in the wheel, so
the recipes of tests/llmstack/torchtitan.json use files made by this helper, deterministically, into a
cache folder (``$HAL_LLMSTACK_CACHE``, default ``~/.cache/hal/llmstack``), under a name that changes
with :data:`VERSION` and the torchtitan version:

* ``tokenizer/``: ``tokenizer.json`` (a byte-level BPE trained with the ``tokenizers`` library on the
  text below) and ``tokenizer_config.json`` (BOS / EOS): what ``--model.hf_assets_path`` points at.
* ``c4_local/``: a local folder laid out as the ``allenai/c4`` repository is (a README whose configs
  name ``en``, JSON lines with a ``text`` field), read by torchtitan's ``c4`` data set (streaming)
  with ``--training.dataset_path``.  Every document is ``SEQ_LEN - 1`` words that are one token each,
  so with BOS and EOS it is exactly one training sequence; a streaming data set of one file is split
  over data-parallel ranks example by example (rank r keeps documents r, r + n, ...), so the global
  batch of step k at n ranks with ``local_batch_size`` b/n holds the same sequences as a one-process
  run's batch with b: the losses of both are the same numbers, up to reduction order.
* ``seed/checkpoint/step-0``: torchtitan's seed checkpoint (``--checkpoint.create_seed_checkpoint``,
  one process, made through ``hal run`` on the cpu backend), the weights every recipe starts from
  (``--checkpoint.initial_load_path``), as torchtitan's own numerics comparisons across parallelisms do.

    python tests/llmstack/titan_assets.py                  # make them (if missing) and print the folder
    python tests/llmstack/titan_assets.py --data-only DIR  # the tokenizer and the data set alone, into DIR
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
#: bump when what is generated changes: the cache folder's name changes with it
VERSION = 1
SEQ_LEN = 64
DOCUMENTS = 96
VOCAB_SIZE = 1024  # below the debug model's 2048 embeddings
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
SEED_CONFIG = os.path.join(HERE, "configs", "titan_llama3_debug.toml")


def _torchtitan_version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torchtitan")
    except PackageNotFoundError:
        return "none"


def folder():
    """The cache folder of this generator version and the installed torchtitan (it may not exist yet)."""
    root = os.environ.get("HAL_LLMSTACK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hal",
                                                                "llmstack")
    return os.path.join(root, f"torchtitan-{_torchtitan_version()}-assets-v{VERSION}")


def _words(rng, n=240):
    """``n`` distinct pronounceable words."""
    onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh", "tr", "pl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    out = []
    while len(out) < n:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))
        if w not in out:
            out.append(w)
    return out


def _successors(rng, words):
    """A bigram table: each word is followed by one of four others (a text a model can learn)."""
    return {w: rng.sample(words, 4) for w in words}


def _text(rng, words, table, n):
    w = rng.choice(words)
    out = [w]
    for _ in range(n - 1):
        w = rng.choice(table[w]) if rng.random() < 0.9 else rng.choice(words)
        out.append(w)
    return " ".join(out)


def _make_tokenizer(path, words, table):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(1)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([_text(rng, words, table, 200) for _ in range(400)], trainer)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}, f, indent=1)
    return tok


def _make_dataset(path, words, table, tok):
    one = [w for w in words if len(tok.encode(w).ids) == 1]  # " word" is one token
    if len(one) < len(words) // 2:
        raise RuntimeError(f"the tokenizer made only {len(one)} of {len(words)} words one token; raise VOCAB_SIZE")
    table = {w: [s for s in table[w] if s in one] or one[:4] for w in one}
    rng = random.Random(2)
    os.makedirs(os.path.join(path, "en"), exist_ok=True)
    with open(os.path.join(path, "README.md"), "w") as f:
        f.write("---\nconfigs:\n- config_name: en\n  data_files:\n  - split: train\n    path: en/train.jsonl\n---\n"
                "Generated by hal's tests/llmstack/titan_assets.py: one training sequence per document.\n")
    with open(os.path.join(path, "en", "train.jsonl"), "w") as f:
        for _ in range(DOCUMENTS):
            text = _text(rng, one, table, SEQ_LEN - 1)
            assert len(tok.encode(text).ids) == SEQ_LEN - 1, "a document is not SEQ_LEN - 1 tokens"
            f.write(json.dumps({"text": text}) + "\n")


def _make_seed_checkpoint(path, assets):
    """torchtitan's seed checkpoint of the debug model, one process, through hal run on the cpu backend."""
    env = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "hal", "run", "--quiet", "--nproc-per-node", "1", "-m", "torchtitan.train",
           "--job.config_file", SEED_CONFIG, "--job.dump_folder", path,
           "--model.hf_assets_path", os.path.join(assets, "tokenizer"),
           "--training.dataset_path", os.path.join(assets, "c4_local"),
           "--checkpoint.enable", "--checkpoint.create_seed_checkpoint"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or not os.path.isdir(os.path.join(path, "checkpoint", "step-0")):
        raise RuntimeError(f"the seed checkpoint was not made (exit {p.returncode}): {' '.join(cmd)}\n"
                           f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def make_data(path):
    """The tokenizer (``path``/tokenizer) and the data set (``path``/c4_local) alone: what any torchtitan
    version reads (scripts/llmstack_torch214.sh uses them with torchtitan 0.3)."""
    rng = random.Random(0)
    words = _words(rng)
    table = _successors(rng, words)
    tok = _make_tokenizer(os.path.join(path, "tokenizer"), words, table)
    _make_dataset(os.path.join(path, "c4_local"), words, table, tok)


def ensure():
    """Make the tokenizer, the data set and the seed checkpoint where missing; the folder holding them."""
    out = folder()
    if os.path.isfile(os.path.join(out, "done")):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out) + ".", dir=os.path.dirname(out))
    try:
        make_data(tmp)
        _make_seed_checkpoint(os.path.join(tmp, "seed"), tmp)
        with open(os.path.join(tmp, "done"), "w") as f:
            f.write(digest(tmp) + "\n")
        try:
            os.rename(tmp, out)
        except OSError:  # made meanwhile by another process: keep theirs
            if not os.path.isfile(os.path.join(out, "done")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def digest(path):
    """sha256 over the tokenizer and data files (not the checkpoint): the same on every machine."""
    h = hashlib.sha256()
    for rel in ("tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json", "c4_local/README.md",
                "c4_local/en/train.jsonl"):
        with open(os.path.join(path, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read())
    return h.hexdigest()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--data-only"]:  # python titan_assets.py --data-only DIR
        make_data(sys.argv[2])
        print(sys.argv[2])
    else:
        print(ensure())
    sys.exit(0)
