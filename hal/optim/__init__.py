"""Optimizers built on ``hal.ops`` fused kernels::

    opt = hal.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
"""
from hal.optim.adamw import AdamW

__all__ = ["AdamW"]
