"""Hugging Face Trainer under torchrun at 2 ranks, as a multi-GPU recipe runs it
(`torchrun --nproc-per-node 2 hf_trainer_ddp.py`): the Trainer builds DDP itself."""
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self, n=32, length=16, vocab=128):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class PrintingTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        if self.is_world_process_zero():
            print(f"LOSS step={self.state.global_step + 1} loss={loss.item():.8g}", flush=True)
        return loss


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=32, vocab_size=128,
                                   bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
args = TrainingArguments(output_dir="out", max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                         report_to="none", save_strategy="no", seed=42, disable_tqdm=True, logging_steps=1)
trainer = PrintingTrainer(model=model, args=args, train_dataset=Tokens())
trainer.train()
if trainer.is_world_process_zero():
    print(f"DONE world_size={trainer.args.world_size} device={trainer.args.device}", flush=True)
