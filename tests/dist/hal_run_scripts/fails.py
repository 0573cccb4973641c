"""A CUDA script that fails: raise (default), exit N, or exit with a message.

    hal run fails.py raise|exit N|message TEXT
"""
import sys

import torch


def forward(x):
    return x @ torch.ones(3, 3, device="cuda")  # shapes do not match: raises inside torch


def main():
    x = torch.ones(2, 2).cuda()
    how = sys.argv[1] if len(sys.argv) > 1 else "raise"
    if how == "exit":
        sys.exit(int(sys.argv[2]))
    if how == "message":
        sys.exit(sys.argv[2])
    forward(x)


if __name__ == "__main__":
    main()
