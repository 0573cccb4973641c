"""Hugging Face Trainer as its docs write it for a GPU: mixed precision from the command line
(`--bf16` or `--fp16`), gradient accumulation, `save_steps`, and a second run (a fresh process)
that resumes with `resume_from_checkpoint=True`.

The script trains an uninterrupted run, then a run that stops after its checkpoint at step
SAVE, then starts itself again to resume that run; the resumed run must start after SAVE and
its losses must equal the uninterrupted run's (dropout is on: only the restored RNG gives that).
"""
import argparse
import os
import subprocess
import sys

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

STEPS, SAVE = 6, 3


class Tokens(Dataset):
    def __init__(self, n=48, length=16, vocab=128):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


LOSSES = {}


class PrintingTrainer(Trainer):
    tag = "LOSS"

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        loss = out[0] if return_outputs else out
        if self.is_world_process_zero():
            line = f"{self.tag} step={self.state.global_step + 1} loss={loss.item():.8g}"
            LOSSES.setdefault(self.tag, []).append(line.split(" ", 1)[1])
            print(line, flush=True)
        return out


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def make_trainer(out, tag, precision, stop=None):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=32, vocab_size=128,
                                       bos_token_id=0, eos_token_id=0))
    args = TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=4,
                             gradient_accumulation_steps=2, learning_rate=1e-3, save_steps=SAVE,
                             save_strategy="steps" if stop else "no", logging_steps=1, report_to="none",
                             seed=42, dataloader_num_workers=0, disable_tqdm=True,
                             **{precision: True} if precision else {})
    t = PrintingTrainer(model=model, args=args, train_dataset=Tokens(),
                        callbacks=[StopAt(stop)] if stop else [])
    t.tag = tag
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--resume", metavar="DIR", help="(internal) the second run: resume DIR")
    a = ap.parse_args()
    precision = "bf16" if a.bf16 else "fp16" if a.fp16 else None
    if a.resume:
        t = make_trainer(a.resume, "RESUMED", precision)
        first = []
        t.add_callback(type("First", (TrainerCallback,), {
            "on_step_begin": lambda self, args, state, control, **k: first.append(state.global_step)})())
        t.train(resume_from_checkpoint=True)
        print(f"RESUME first_step={first[0] + 1} global_step={t.state.global_step}", flush=True)
        return
    make_trainer("full", "FULL", precision).train()
    t = make_trainer("cut", "LOSS", precision, stop=SAVE)
    t.train()
    assert os.path.isfile(os.path.join("cut", f"checkpoint-{SAVE}", "trainer_state.json")), "no checkpoint saved"
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--resume", "cut",
                            *([f"--{precision}"] if precision else [])], capture_output=True, text=True)
    sys.stdout.write(child.stdout)
    if child.returncode:
        sys.stderr.write(child.stderr)
        sys.exit(f"resume run failed (exit {child.returncode})")
    resumed = [l.split(" ", 1)[1] for l in child.stdout.splitlines() if l.startswith("RESUMED ")]
    after = [l for l in LOSSES["FULL"] if int(l.split()[0].split("=")[1]) > SAVE]
    start = next(l for l in child.stdout.splitlines() if l.startswith("RESUME "))
    if f"first_step={SAVE + 1} " not in start + " " or resumed != after:
        sys.exit(f"resume did not continue the saved run: {start}\n resumed: {resumed}\n uninterrupted: {after}")
    print(f"RESUME_CHECK ok: continued at step {SAVE + 1}, {len(after)} losses equal the uninterrupted run's",
          flush=True)


if __name__ == "__main__":
    main()
