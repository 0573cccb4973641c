"""Lightning DDP the way its docs write it for a 2-GPU machine, inside torchrun (`torchrun --nproc-per-node 2 lightning_ddp_torchrun.py`):
Lightning sees the torchrun environment and starts no ranks itself;
`Trainer(accelerator="gpu", devices=2, strategy="ddp")`."""
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.global_rank == 0:
            print(f"LOSS step={self.global_step} loss={loss.item():.8g}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))
    trainer = L.Trainer(accelerator="gpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), DataLoader(ds, batch_size=8))
    if trainer.global_rank == 0:
        print(f"DONE world_size={trainer.world_size} global_step={trainer.global_step}", flush=True)
