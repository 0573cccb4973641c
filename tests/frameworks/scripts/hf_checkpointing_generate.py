"""A tiny Llama trained on the GPU with `model.gradient_checkpointing_enable()` (activation
checkpointing, as the transformers memory guide sets it), then `model.generate()` greedy decoding."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     bos_token_id=1, eos_token_id=2, pad_token_id=0)).to(device)
model.gradient_checkpointing_enable()
model.config.use_cache = False
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ids = torch.randint(3, 128, (4, 16), generator=torch.Generator().manual_seed(1)).to(device)
for step in range(5):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"LOSS step={step} loss={loss.item():.8g}", flush=True)
model.eval()
model.config.use_cache = True
out = model.generate(ids[:1, :6], max_new_tokens=8, do_sample=False)
print(f"GENERATED {out[0, 6:].tolist()} device={out.device.type}", flush=True)
