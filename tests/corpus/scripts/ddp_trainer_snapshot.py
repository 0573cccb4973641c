"""Multi-GPU training with torchrun and a Trainer class that snapshots and resumes
(the layout of the DDP tutorial series' multigpu_torchrun.py).

    torchrun --standalone --nproc-per-node 2 ddp_trainer_snapshot.py 4 1

The Trainer keeps `gpu_id = int(os.environ["LOCAL_RANK"])`, moves the model with
`.to(gpu_id)`, wraps it in `DDP(model, device_ids=[gpu_id])`, calls `set_epoch` on the
DistributedSampler, saves a snapshot dict on rank 0 every `save_every` epochs and loads
it with `map_location=f"cuda:{gpu_id}"`. To exercise the resume path within one launch the
job "restarts" itself once after `--stop-at` epochs, as torchrun would after a failure.
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset, DataLoader
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        g = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    init_process_group(backend=backend)


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader,
        optimizer: torch.optim.Optimizer,
        save_every: int,
        snapshot_path: str,
    ) -> None:
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.device = self.gpu_id if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print(f"[GPU{self.gpu_id}] Loading snapshot")
            self._load_snapshot(snapshot_path)

        if torch.cuda.is_available():
            self.model = DDP(self.model, device_ids=[self.gpu_id])
        else:
            self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.gpu_id}" if torch.cuda.is_available() else "cpu"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"[GPU{self.gpu_id}] Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        if self.gpu_id == 0:
            print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.train_data:
            source = source.to(self.device)
            targets = targets.to(self.device)
            total += self._run_batch(source, targets)
        total /= len(self.train_data)
        dist.all_reduce(total)  # sum over ranks
        if self.gpu_id == 0:
            print(f"[GPU{self.gpu_id}] Epoch {epoch} | Loss {total.item() / dist.get_world_size():.8f}")

    def _save_snapshot(self, epoch):
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch,
        }
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {os.path.basename(self.snapshot_path)}")

    def train(self, max_epochs: int):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch + 1)
            dist.barrier()


def load_train_objs(lr):
    train_set = MyTrainDataset(256)  # load your dataset
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))  # load your model
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        pin_memory=True,
        shuffle=False,
        sampler=DistributedSampler(dataset)
    )


def main(save_every: int, total_epochs: int, batch_size: int, stop_at: int, lr: float,
         snapshot_path: str = "snapshot.pt"):
    ddp_setup()
    if int(os.environ["RANK"]) == 0 and os.path.exists(snapshot_path):
        os.remove(snapshot_path)  # start from scratch on every launch of this test
    dist.barrier()

    torch.manual_seed(0)
    dataset, model, optimizer = load_train_objs(lr)
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(stop_at)

    # --- simulated failure: the job is restarted and resumes from the snapshot ---
    del trainer, model, optimizer
    torch.manual_seed(1)  # a different init that the snapshot must overwrite
    dataset, model, optimizer = load_train_objs(lr)
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)

    dist.barrier()
    if int(os.environ["RANK"]) == 0:
        os.remove(snapshot_path)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description='simple distributed training job')
    parser.add_argument('total_epochs', type=int, nargs='?', default=4, help='Total epochs to train the model')
    parser.add_argument('save_every', type=int, nargs='?', default=1, help='How often to save a snapshot')
    parser.add_argument('--batch_size', '--batch-size', default=32, type=int,
                        help='Input batch size on each device (default: 32)')
    parser.add_argument('--stop-at', default=2, type=int, help='epoch after which the job "fails" and restarts')
    parser.add_argument('--lr', default=0.05, type=float)
    parser.add_argument('--snapshot-path', default=None)
    args = parser.parse_args()
    path = args.snapshot_path or os.path.join(
        tempfile.gettempdir(), f"snapshot_{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}.pt")
    main(args.save_every, args.total_epochs, args.batch_size, args.stop_at, args.lr, path)
