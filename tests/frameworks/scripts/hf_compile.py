"""`torch.compile` of a transformers model (a tiny BERT classifier) on the GPU, as the
transformers `torch.compile` guide does it: compile the model, train a few steps."""
import torch
from transformers import BertConfig, BertForSequenceClassification

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=64,
                                                 max_position_embeddings=32, num_labels=2,
                                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).to(device)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
ids = torch.randint(0, 128, (4, 16), generator=g).to(device)
labels = torch.randint(0, 2, (4,), generator=g).to(device)
for step in range(4):
    loss = compiled(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"LOSS step={step} loss={loss.item():.8g}", flush=True)
print(f"DONE device={loss.device.type}", flush=True)
