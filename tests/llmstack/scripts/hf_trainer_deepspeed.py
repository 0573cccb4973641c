"""Fine-tune a small Llama with the Hugging Face Trainer and a DeepSpeed ZeRO config, as on a GPU node:

    torchrun --nproc-per-node 2 hf_trainer_deepspeed.py --deepspeed ds_zero3.json

The config is the Trainer's ``deepspeed=`` (a file; "auto" values filled by the Trainer).  The base model
is a "pretrained" checkpoint this script writes first (a random-weight LlamaConfig, seed 0), loaded with
``from_pretrained`` after the TrainingArguments exist, so that under ZeRO-3 transformers builds it inside
``deepspeed.zero.Init`` and loads the weights through ``GatheredParameters``.  Prints ``step N loss X``
from the Trainer's log history on rank 0, then ``generated <ids>`` from a greedy generate.
"""
import argparse
import os

import torch
import torch.distributed as dist
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)

SEQ, ROWS = 16, 64


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(0, 64, (ROWS, SEQ), generator=g)

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class PrintLoss(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            print(f"step {state.global_step} loss {logs['loss']:.6f}", flush=True)


def write_base(path):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default="hf_out")
    ap.add_argument("--per-device-batch", type=int, default=4)
    args = ap.parse_args()
    base = os.path.abspath("base_model")
    rank = int(os.environ.get("RANK", 0))
    if rank == 0 and not os.path.isdir(base):
        write_base(base)
    targs = TrainingArguments(output_dir=args.out, per_device_train_batch_size=args.per_device_batch, max_steps=args.steps,
                              learning_rate=3e-3, logging_steps=1, save_strategy="no", report_to=[], seed=0,
                              deepspeed=args.deepspeed, dataloader_drop_last=True, disable_tqdm=True)
    if dist.is_initialized():
        dist.barrier()  # rank 0 has written the base model
    model = AutoModelForCausalLM.from_pretrained(base)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=[PrintLoss()])
    trainer.train()
    prompt = torch.tensor([[1, 2, 3, 4]], device=trainer.model.device)
    with torch.no_grad():
        out = trainer.model_wrapped.module.generate(prompt, max_new_tokens=4, do_sample=False,
                                                    synced_gpus=dist.is_initialized())
    if trainer.is_world_process_zero():
        print(f"trained on {trainer.args.device.type}", flush=True)
        print(f"generated {out[0, 4:].tolist()}", flush=True)


if __name__ == "__main__":
    main()
