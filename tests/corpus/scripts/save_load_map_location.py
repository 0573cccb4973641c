"""Saving and resuming a general checkpoint, loaded back with every common `map_location`.

The "save/load a general checkpoint" recipe (epoch, model_state_dict,
optimizer_state_dict, loss) plus the loading forms found in public code:
no map_location, `weights_only=True`, `map_location="cuda"`, `"cuda:0"`,
`torch.device("cuda")`, `{"cuda:1": "cuda:0"}`, `lambda storage, loc: storage.cuda()`,
and the CPU spellings used when CUDA is absent. After each load training resumes for a
few steps; all resumptions must give the same losses.
"""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(6, 24)
        self.fc2 = nn.Linear(24, 24)
        self.fc3 = nn.Linear(24, 1)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def run_steps(net, optimizer, data, device, n):
    criterion = nn.MSELoss()
    x, y = data
    losses = []
    for i in range(n):
        inputs, targets = x[i].to(device), y[i].to(device)
        optimizer.zero_grad()
        loss = criterion(net(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--resume-steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(args.seed)

    g = torch.Generator().manual_seed(3)
    x = torch.randn(args.steps, 16, 6, generator=g)
    y = x.pow(2).sum(-1, keepdim=True).sqrt()
    xr = torch.randn(args.resume_steps, 16, 6, generator=g)
    yr = xr.pow(2).sum(-1, keepdim=True).sqrt()

    net = Net().to(device)
    optimizer = optim.Adam(net.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        losses = run_steps(net, optimizer, (x, y), device, args.steps)
        print("epoch {} loss {:.6f}".format(epoch, losses[-1]))

    tmpdir = tempfile.mkdtemp(prefix="ckpt_forms_")
    PATH = os.path.join(tmpdir, "model.pt")
    torch.save({
        "epoch": args.epochs,
        "model_state_dict": net.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "loss": losses[-1],
    }, PATH)
    # the older habit: pickle the whole module
    FULL = os.path.join(tmpdir, "model_full.pt")
    torch.save(net, FULL)

    if use_cuda:
        forms = [
            ("none", lambda: torch.load(PATH)),
            ("weights_only=True", lambda: torch.load(PATH, weights_only=True)),
            ('"cuda"', lambda: torch.load(PATH, map_location="cuda")),
            ('"cuda:0"', lambda: torch.load(PATH, map_location="cuda:0")),
            ('torch.device("cuda")', lambda: torch.load(PATH, map_location=torch.device("cuda"))),
            ('{"cuda:1": "cuda:0"}', lambda: torch.load(PATH, map_location={"cuda:1": "cuda:0"})),
            ("lambda storage.cuda()", lambda: torch.load(PATH, map_location=lambda storage, loc: storage.cuda())),
        ]
    else:
        forms = [
            ("none", lambda: torch.load(PATH)),
            ("weights_only=True", lambda: torch.load(PATH, weights_only=True)),
            ('"cpu"', lambda: torch.load(PATH, map_location="cpu")),
            ('torch.device("cpu")', lambda: torch.load(PATH, map_location=torch.device("cpu"))),
            ('{"cuda:1": "cuda:0"}', lambda: torch.load(PATH, map_location={"cuda:1": "cuda:0"})),
            ("lambda storage", lambda: torch.load(PATH, map_location=lambda storage, loc: storage)),
            ('{"cuda:0": "cpu"}', lambda: torch.load(PATH, map_location={"cuda:0": "cpu"})),
        ]

    results = {}
    for name, load in forms:
        checkpoint = load()
        model = Net()
        model.load_state_dict(checkpoint["model_state_dict"])
        model.to(device)
        opt = optim.Adam(model.parameters(), lr=args.lr)
        opt.load_state_dict(checkpoint["optimizer_state_dict"])
        model.train()
        where = next(iter(checkpoint["model_state_dict"].values())).device
        losses = run_steps(model, opt, (xr, yr), device, args.resume_steps)
        results[name] = losses
        print("resume [{:<24}] from epoch {} (tensors on {}): loss {:.6f}".format(
            name, checkpoint["epoch"], where, losses[-1]))

    full = torch.load(FULL, map_location=device, weights_only=False)
    full.eval()
    with torch.no_grad():
        print("full-module reload eval loss {:.6f}".format(
            nn.functional.mse_loss(full(xr[0].to(device)), yr[0].to(device)).item()))

    first = next(iter(results.values()))
    assert all(v == first for v in results.values()), results
    for f in os.listdir(tmpdir):
        os.remove(os.path.join(tmpdir, f))
    os.rmdir(tmpdir)


if __name__ == "__main__":
    main()
