#!/usr/bin/env python
"""Fit a random degree-4 polynomial with a single Linear layer (the classic regression
example), with the manual `param.add_(-lr * param.grad)` update and the loop that runs
until the loss drops under a threshold. Moved to the GPU when there is one.
"""
from __future__ import print_function

import argparse
from itertools import count

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument('--poly-degree', type=int, default=4)
parser.add_argument('--batch-size', type=int, default=32)
parser.add_argument('--lr', type=float, default=0.1)
parser.add_argument('--threshold', type=float, default=1e-3)
parser.add_argument('--max-batches', type=int, default=2000)
parser.add_argument('--log-interval', type=int, default=100)
parser.add_argument('--seed', type=int, default=3)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

POLY_DEGREE = args.poly_degree
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = 'y = '
    for i, w in enumerate(W):
        result += '{:+.2f} x^{} '.format(w, i + 1)
    result += '{:+.2f}'.format(b[0])
    return result


def get_batch(batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


# Define model
fc = torch.nn.Linear(W_target.size(0), 1).to(device)

for batch_idx in count(1):
    # Get data
    batch_x, batch_y = get_batch(args.batch_size)
    batch_x, batch_y = batch_x.to(device), batch_y.to(device)

    # Reset gradients
    fc.zero_grad()

    # Forward pass
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()

    # Backward pass
    output.backward()

    # Apply gradients
    for param in fc.parameters():
        param.data.add_(-args.lr * param.grad)

    if batch_idx % args.log_interval == 0:
        print('Batch {}: loss {:.6e}'.format(batch_idx, loss))

    # Stop criterion
    if loss < args.threshold or batch_idx >= args.max_batches:
        break

print('Loss: {:.6e} after {} batches'.format(loss, batch_idx))
print('==> Learned function:\t' + poly_desc(fc.weight.view(-1).cpu(), fc.bias.cpu()))
print('==> Actual function:\t' + poly_desc(W_target.view(-1), b_target))
