"""Softmax over the last dimension, then its sum over that dimension: exactly one for every
finite input, a legitimate shortcut for a candidate that proves it (CPU-small)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).sum(dim=-1)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
