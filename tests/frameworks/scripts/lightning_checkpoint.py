"""Lightning as its docs write it for a GPU: `Trainer(accelerator="gpu")` (or `"cuda"`, the
first argument), `ModelCheckpoint` every epoch, then a second Trainer that resumes with
`fit(ckpt_path=...)` and must start from the saved epoch and global step."""
import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.first_step = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.first_step is None:
            self.first_step = self.global_step
        print(f"LOSS epoch={self.current_epoch} step={self.global_step} loss={loss.item():.8g}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)), batch_size=8)


accelerator = sys.argv[1] if len(sys.argv) > 1 else "gpu"
kw = dict(accelerator=accelerator, devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
torch.manual_seed(0)
ckpt = ModelCheckpoint(dirpath="ckpt", save_top_k=-1, every_n_epochs=1)
trainer = L.Trainer(max_epochs=2, callbacks=[ckpt], **kw)
trainer.fit(Regressor(), loader())
print(f"SAVED {ckpt.last_model_path or ckpt.best_model_path} global_step={trainer.global_step}", flush=True)
torch.manual_seed(0)
resumed = L.Trainer(max_epochs=3, enable_checkpointing=False, **kw)
model = Regressor()
resumed.fit(model, loader(), ckpt_path=ckpt.best_model_path)
assert (model.first_step, resumed.global_step) == (8, 12), \
    f"resumed run trained steps {model.first_step}..{resumed.global_step}, not 8..12 (after the saved step 8)"
print(f"RESUME ok: fit(ckpt_path=...) continued from global_step=8 to {resumed.global_step} "
      f"on {resumed.strategy.root_device.type}", flush=True)
