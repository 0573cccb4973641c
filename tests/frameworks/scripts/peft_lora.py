"""PEFT LoRA on a tiny Llama as the PEFT quicktour writes it for a GPU (`model.to("cuda")`):
train a few steps, `save_pretrained` the adapter, reload it with `PeftModel.from_pretrained`
on a fresh base model, and check the reloaded model's outputs equal the trained one's."""
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

device = "cuda" if torch.cuda.is_available() else "cpu"
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def base():
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


model = get_peft_model(base(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                          lora_dropout=0.0, task_type="CAUSAL_LM")).to(device)
model.print_trainable_parameters()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(1)).to(device)
for step in range(6):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"LOSS step={step} loss={loss.item():.8g}", flush=True)
model.eval()
with torch.no_grad():
    before = model(input_ids=ids).logits
model.save_pretrained("adapter")
reloaded = PeftModel.from_pretrained(base(), "adapter").to(device).eval()
with torch.no_grad():
    after = reloaded(input_ids=ids).logits
diff = (before - after).abs().max().item()
assert diff == 0.0, f"reloaded adapter gives other logits (max abs difference {diff})"
print(f"RELOAD ok: logits equal after PeftModel.from_pretrained (device {after.device.type})", flush=True)
