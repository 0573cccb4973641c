"""A CUDA AMP step (issue 20, item 5): linear + layer_norm + log_softmax + sum under
autocast("cuda", float16) with a GradScaler; writes each op's output dtype and the losses to argv[1]."""
import json
import sys

import torch

torch.manual_seed(0)
lin = torch.nn.Linear(16, 8).cuda()
norm = torch.nn.LayerNorm(8).cuda()
opt = torch.optim.SGD([*lin.parameters(), *norm.parameters()], lr=0.1)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(32, 16).cuda()
dtypes, losses = {}, []
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cuda", torch.float16):
        h = lin(x)
        n = norm(h)
        logp = torch.log_softmax(n, -1)
        s = logp.exp().sum() + h.float().exp().mean()
        loss = -logp.sum() / 32
        dtypes = {"linear": str(h.dtype), "layer_norm": str(n.dtype), "log_softmax": str(logp.dtype),
                  "sum": str(s.dtype), "softmax": str(torch.softmax(h, -1).dtype), "exp": str(h.exp().dtype),
                  "mm": str((h @ h.T).dtype)}
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
with open(sys.argv[1], "w") as f:
    json.dump({"dtypes": dtypes, "losses": losses, "scale": scaler.get_scale()}, f)
