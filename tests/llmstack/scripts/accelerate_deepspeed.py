"""A training loop with Accelerate and its DeepSpeed plugin, as written for a GPU node:

    accelerate launch --num_processes 2 accelerate_deepspeed.py --ds-config ds_zero2.json
    torchrun --nproc-per-node 2 accelerate_deepspeed.py --ds-config ds_zero2.json

``Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=...))``, ``accelerator.prepare`` of the model,
a torch AdamW, the data loader and a LambdaLR stepped once per optimizer step, ``accelerator.backward``; the model is the one of
ds_zero.py (weights from a CPU-made state dict, so every run starts from the same weights).  Prints
``step N loss X`` (the mean over the processes, ``accelerator.reduce``) on the main process, and
``saved and reloaded`` after ``save_state`` / ``load_state`` round-trips the weights.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator, DeepSpeedPlugin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ds_zero import GLOBAL_BATCH, SEQ, VOCAB, TinyGPT, pretrained  # noqa: E402  the same small LM


class Tokens(torch.utils.data.Dataset):
    def __init__(self, steps):
        g = torch.Generator().manual_seed(11)
        self.data = torch.randint(0, VOCAB, (steps * GLOBAL_BATCH, SEQ + 1), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-config", required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    # the schedule counts optimizer steps, whatever the number of processes (by default Accelerate steps a
    # prepared scheduler once per process)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=args.ds_config),
                              step_scheduler_with_optimizer=False)
    model = TinyGPT()
    model.load_state_dict(pretrained())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 0.1 * s))
    per_process = GLOBAL_BATCH // accelerator.num_processes
    loader = torch.utils.data.DataLoader(Tokens(args.steps), batch_size=per_process, shuffle=False)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    for step, batch in enumerate(loader):
        x, y = batch[:, :-1], batch[:, 1:]
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        accelerator.backward(loss)
        opt.step()
        sched.step()
        opt.zero_grad()
        mean = accelerator.reduce(loss.detach(), reduction="mean").item()
        if accelerator.is_main_process:
            print(f"step {step} loss {mean:.8f}", flush=True)
    before = {k: v.detach().float().cpu().clone() for k, v in accelerator.get_state_dict(model).items()}
    accelerator.save_state("state")
    accelerator.wait_for_everyone()  # the main process writes the scheduler's state; every process reads it
    accelerator.load_state("state")
    after = accelerator.get_state_dict(model)
    same = all(torch.equal(before[k], after[k].detach().float().cpu()) for k in before)
    if accelerator.is_main_process:
        print(f"on {accelerator.device.type}: {'saved and reloaded' if same else 'RELOAD DIFFERS'}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
