"""Automatic mixed precision the "old" way: `torch.cuda.amp.GradScaler` + `torch.cuda.amp.autocast`.

Written like the AMP recipe of the PyTorch 1.x era: a stack of Linear+ReLU layers, data
generated directly on the device, a timer built on `torch.cuda.synchronize` and the
memory counters, `scaler.unscale_` before gradient clipping, and a checkpoint holding
model/optimizer/scaler state resumed with `map_location=lambda storage, loc: storage.cuda()`.
AMP is enabled only when CUDA is available (`enabled=use_amp`).
"""
import argparse
import gc
import os
import tempfile
import time

import torch

start_time = None


def start_timer():
    global start_time
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_max_memory_allocated()
        torch.cuda.synchronize()
    start_time = time.time()


def end_timer_and_print(local_msg):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    end_time = time.time()
    print("\n" + local_msg)
    print("Total execution time = {:.3f} sec".format(end_time - start_time))
    if torch.cuda.is_available():
        print("Max memory used by tensors = {} bytes".format(torch.cuda.max_memory_allocated()))


def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers))


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--in-size", type=int, default=64)
parser.add_argument("--out-size", type=int, default=64)
parser.add_argument("--num-layers", type=int, default=3)
parser.add_argument("--num-batches", type=int, default=8)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.001)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(args.seed)
use_amp = torch.cuda.is_available()
device = "cuda" if torch.cuda.is_available() else "cpu"
if use_amp:
    torch.cuda.manual_seed(args.seed)

# Creates data in default precision.
# The same data is used for both default and mixed precision trials below.
data = [torch.randn(args.batch_size, args.in_size, device=device) for _ in range(args.num_batches)]
targets = [torch.randn(args.batch_size, args.out_size, device=device) for _ in range(args.num_batches)]

loss_fn = torch.nn.MSELoss().to(device)

net = make_model(args.in_size, args.out_size, args.num_layers).to(device)
opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

start_timer()
for epoch in range(args.epochs):
    for i, (input, target) in enumerate(zip(data, targets)):
        with torch.cuda.amp.autocast(enabled=use_amp):
            output = net(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()

        # Unscales the gradients of optimizer's assigned params in-place
        scaler.unscale_(opt)
        # Since the gradients of optimizer's assigned params are now unscaled, clips as usual.
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)

        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    print("epoch {} loss {:.6f} scale {}".format(epoch, loss.item(), scaler.get_scale()))
end_timer_and_print("Mixed precision:" if use_amp else "Default precision:")

checkpoint = {"model": net.state_dict(),
              "optimizer": opt.state_dict(),
              "scaler": scaler.state_dict()}
ckpt_path = os.path.join(tempfile.gettempdir(), "amp_cuda_amp_checkpoint.pt")
torch.save(checkpoint, ckpt_path)

if use_amp:
    dev = torch.cuda.current_device()
    checkpoint = torch.load(ckpt_path, map_location=lambda storage, loc: storage.cuda(dev))
else:
    checkpoint = torch.load(ckpt_path, map_location=lambda storage, loc: storage)

net.load_state_dict(checkpoint["model"])
opt.load_state_dict(checkpoint["optimizer"])
scaler.load_state_dict(checkpoint["scaler"])

# one more epoch after resuming
for input, target in zip(data, targets):
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = loss_fn(net(input), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
print("resumed epoch loss {:.6f}".format(loss.item()))
os.remove(ckpt_path)
