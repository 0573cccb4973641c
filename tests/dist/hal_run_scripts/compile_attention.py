"""A transformer block with causal scaled_dot_product_attention, compiled as a CUDA script
compiles it (torch.compile with its defaults), against the same block in eager mode."""
import sys

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.norm, self.mlp = torch.nn.LayerNorm(d), torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                                                         torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(x)


torch.manual_seed(0)
model = Block().cuda()
x = torch.randn(2, 16, 32, device="cuda")
eager = model(x)
compiled = torch.compile(model)(x)
compiled.sum().backward()
print(f"device={compiled.device.type} max_abs_diff={(compiled - eager).abs().max().item():.3e} "
      f"grad={model.qkv.weight.grad is not None}")
sys.exit(0 if torch.allclose(compiled, eager, atol=1e-5) else 1)
