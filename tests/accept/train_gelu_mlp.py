"""A CUDA-written training loop in the usual shape: a DataLoader, an MLP with GELU, AdamW, a few steps."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g))
for epoch in range(3):
    for x, y in DataLoader(data, batch_size=32):
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
