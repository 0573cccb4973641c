"""Lightning DDP as a GPU recipe writes it: Lightning starts rank 1 itself (``subprocess.Popen``
of this script).  Each rank writes what it did to ``OUTDIR/rank<N>.json``.

    hal run lightning_ddp.py OUTDIR
"""
import json
import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.batch_device = str(x.device)  # Lightning moves the module back to the CPU when fit ends
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(accelerator="gpu", devices=2, strategy="ddp", max_steps=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    model = Tiny()
    trainer.fit(model, DataLoader(ds, batch_size=8))
    with open(os.path.join(sys.argv[1], f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"rank": trainer.global_rank, "world_size": trainer.world_size, "step": trainer.global_step,
                   "device": model.batch_device,
                   "weights": [round(float(v), 6) for v in model.net.weight.detach().flatten()]}, f)
