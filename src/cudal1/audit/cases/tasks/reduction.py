"""Sum over one dimension, chosen by get_init_inputs (CPU-small)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(16, 64, 8)]


def get_init_inputs():
    return [1]
