"""A Hugging Face-style custom training loop (the "full training loop" of the course),
with a tiny BERT-like model written here instead of `transformers`.

Batches are dicts moved with `{k: v.to(device) for k, v in batch.items()}`, the model is
called as `model(**batch)` and returns an output object with `.loss` and `.logits`, AdamW
with `foreach=True`, a linear warmup/decay schedule (LambdaLR), a tqdm-free progress line
that formats the 0-d loss tensor directly (`f"{loss:.6f}"`), `loss.item()` bookkeeping,
class weights built with `torch.tensor(..., device=device)`, and evaluation under
`model.eval()` + `torch.inference_mode()`. Dropout probabilities come from the config
(0.0 here).
"""
import argparse
import math
import random
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class TinyBertConfig:
    vocab_size: int = 40
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 32
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    num_labels: int = 2
    pad_token_id: int = 0


@dataclass
class SequenceClassifierOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, config, class_weights=None):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        layer = nn.TransformerEncoderLayer(
            config.hidden_size, config.num_attention_heads, config.intermediate_size,
            dropout=config.attention_probs_dropout_prob, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.class_weights = class_weights

    def forward(self, input_ids, attention_mask=None, labels=None):
        seq_len = input_ids.size(1)
        position_ids = torch.arange(seq_len, device=input_ids.device).unsqueeze(0)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        hidden = self.dropout(self.LayerNorm(hidden))
        key_padding_mask = attention_mask == 0 if attention_mask is not None else None
        hidden = self.encoder(hidden, src_key_padding_mask=key_padding_mask)
        pooled = self.pooler(hidden[:, 0])
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss_fct = nn.CrossEntropyLoss(weight=self.class_weights)
            loss = loss_fct(logits.view(-1, self.config.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


class ToySentimentDataset(Dataset):
    """Token 5 is "good", token 6 is "bad"; the label is which one occurs more often."""

    def __init__(self, n, seed):
        rng = random.Random(seed)
        self.examples = []
        for _ in range(n):
            length = rng.randint(6, 20)
            ids = [rng.randint(7, 39) for _ in range(length)]
            good, bad = rng.randint(0, 3), rng.randint(0, 3)
            if good == bad:
                good += 1
            for tok in [5] * good + [6] * bad:
                ids.insert(rng.randint(0, len(ids)), tok)
            self.examples.append({"input_ids": [1] + ids[:29] + [2], "label": int(good > bad)})

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]


def data_collator(features, pad_token_id=0):
    max_len = max(len(f["input_ids"]) for f in features)
    input_ids = torch.full((len(features), max_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(features), max_len), dtype=torch.long)
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        input_ids[i, :n] = torch.tensor(f["input_ids"], dtype=torch.long)
        attention_mask[i, :n] = 1
    labels = torch.tensor([f["label"] for f in features], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step: int):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) /
                   float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_train_epochs", "--epochs", dest="num_train_epochs", type=int, default=3)
    parser.add_argument("--per_device_train_batch_size", "--batch-size", dest="batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", "--lr", dest="learning_rate", type=float, default=1e-3)
    parser.add_argument("--num_warmup_steps", type=int, default=5)
    parser.add_argument("--logging_steps", "--log-interval", dest="logging_steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    set_seed(args.seed)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

    train_dataset = ToySentimentDataset(320, seed=1)
    eval_dataset = ToySentimentDataset(96, seed=2)
    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=args.batch_size, collate_fn=data_collator)
    eval_dataloader = DataLoader(eval_dataset, batch_size=32, collate_fn=data_collator)

    config = TinyBertConfig()
    class_weights = torch.tensor([1.0, 1.0], device=device)
    model = TinyBertForSequenceClassification(config, class_weights=class_weights)
    model.to(device)

    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, foreach=True)

    num_training_steps = args.num_train_epochs * len(train_dataloader)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, args.num_warmup_steps, num_training_steps)

    print("***** Running training *****")
    print(f"  Num examples = {len(train_dataset)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Total optimization steps = {num_training_steps}")

    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        total_loss = 0.0
        for step, batch in enumerate(train_dataloader):
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)
            loss = outputs.loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
            total_loss += loss.item()
            if completed_steps % args.logging_steps == 0:
                print(f"Steps: {completed_steps}/{num_training_steps} "
                      f"[{100 * completed_steps / num_training_steps:3.0f}%] "
                      f"loss={loss:.6f} lr={lr_scheduler.get_last_lr()[0]:.2e}")

        model.eval()
        correct, seen, eval_loss = 0, 0, 0.0
        for batch in eval_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.inference_mode():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            correct += (predictions == batch["labels"]).sum().item()
            seen += batch["labels"].numel()
            eval_loss += outputs.loss.item() * batch["labels"].numel()
        print(f"epoch {epoch}: train_loss={total_loss / len(train_dataloader):.6f} "
              f"eval_loss={eval_loss / seen:.6f} accuracy={correct / seen:.4f} "
              f"perplexity={math.exp(eval_loss / seen):.4f}")


if __name__ == "__main__":
    main()
