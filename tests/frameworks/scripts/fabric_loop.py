"""Lightning Fabric as its docs write it for a GPU: `Fabric(accelerator="cuda", devices=1,
precision="bf16-mixed")`, `fabric.setup`, `fabric.backward`, `fabric.save` / `fabric.load`."""
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

fabric = L.Fabric(accelerator="cuda", devices=1, precision="bf16-mixed")
fabric.launch()
fabric.seed_everything(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, opt = fabric.setup(model, opt)
g = torch.Generator().manual_seed(0)
loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.randn(64, 16, generator=g),
                                                           torch.randint(0, 4, (64,), generator=g)), batch_size=16))
step = 0
for epoch in range(2):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        fabric.print(f"LOSS step={step} loss={loss.item():.8g}")
        step += 1
fabric.save("fabric.ckpt", {"model": model, "optimizer": opt, "step": step})
state = {"model": model, "optimizer": opt, "step": 0}
fabric.load("fabric.ckpt", state)
assert state["step"] == step, f"fabric.load restored step {state['step']}, not {step}"
fabric.print(f"DONE device={fabric.device} step={state['step']}")
