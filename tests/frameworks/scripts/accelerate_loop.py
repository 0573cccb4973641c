"""An `accelerate` training loop as its docs write it (`Accelerator()` picks the GPU), with
`save_state` after half the steps and `load_state` into a fresh model/optimizer (freshly
seeded, so its weights differ until loaded) that must hold the saved weights and optimizer
state, then trains on.
Runs at 1 rank (`python accelerate_loop.py`) or 2 (`torchrun --nproc-per-node 2 ...`)."""
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

STEPS, SAVE = 8, 4


def build(accelerator):
    accelerator.free_memory()  # forget the objects prepared before: save_state/load_state see one model
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 16, generator=g), torch.randn(64, 1, generator=g))
    loader = DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    return accelerator.prepare(model, opt, loader)


def train(accelerator, model, opt, loader, steps, tag):
    losses, step = [], 0
    while step < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            loss = accelerator.reduce(loss.detach(), "mean")
            losses.append(f"{loss.item():.8g}")
            accelerator.print(f"{tag} step={step} loss={losses[-1]}")
            step += 1
            if step == steps:
                break
    return losses


accelerator = Accelerator()
model, opt, loader = build(accelerator)
full = train(accelerator, model, opt, loader, STEPS, "LOSS")
model, opt, loader = build(accelerator)
train(accelerator, model, opt, loader, SAVE, "FIRST")
accelerator.save_state("state")
saved = {k: v.detach().cpu().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
saved_step = opt.state_dict()["state"][0]["step"].item()
model, opt, loader = build(accelerator)
accelerator.load_state("state")
loaded = accelerator.unwrap_model(model).state_dict()
assert all(torch.equal(saved[k], v.detach().cpu()) for k, v in loaded.items()), "load_state: other weights"
assert opt.state_dict()["state"][0]["step"].item() == saved_step, "load_state: optimizer step not restored"
accelerator.print(f"LOAD_STATE ok: weights and optimizer step {saved_step:g} restored")
train(accelerator, model, opt, loader, STEPS - SAVE, "RESUMED")
accelerator.print(f"DONE device={accelerator.device} processes={accelerator.num_processes}")
