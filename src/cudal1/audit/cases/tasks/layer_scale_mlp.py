"""A ConvNeXt-style residual MLP block behind layer scale (CPU-small): ``x + gamma * mlp(x)``
with ``gamma`` a learnable per-channel scale initialised to 1e-6 (ConvNeXt's
``layer_scale_init_value``), so at initialisation the block's contribution is about a millionth
of its input's."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        return x + self.gamma * self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [128, 512]
